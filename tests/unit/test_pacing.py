"""Pacing against a slow slurmctld: the pure state, and the loop that applies it to the cycle."""

from __future__ import annotations

import logging
import types
from pathlib import Path

from prioritizer import Prioritizer
from prioritizer.loop import Loop
from prioritizer.pacing import Pacing
from slurm_dl.cli.config_file import load_config
from slurm_dl.store import Store

from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]


def test_slow_cycles_halve_the_batch_and_space_cycles_out_then_recover_step_by_step():
    p = Pacing(threshold_s=2.0, interval_s=5.0, batch=1000)
    said = p.observe(3.0, 1000, now=100.0)
    assert said is not None and "at most 500 SiteFactor updates" in said and len(said) < 200
    assert (
        (p.limit, p.skip, p.resume_at) == (500, 1, 105.0) and not p.ready(104.9) and p.ready(105.0)
    )
    assert p.observe(3.0, 500, now=110.0) is None  # said once
    assert (p.limit, p.skip, p.resume_at) == (250, 2, 120.0)
    assert p.observe(1.5, 250, now=120.0) is None  # between half the threshold and it: held
    assert (p.limit, p.skip) == (250, 2)
    assert p.observe(0.5, 250, now=130.0) is None and (p.limit, p.skip) == (500, 1)
    back = p.observe(0.5, 500, now=135.0)
    assert back is not None and "configured pace" in back
    assert (p.limit, p.skip, p.slow, p.resume_at) == (None, 0, False, 135.0)


def test_the_batch_never_drops_below_its_floor_nor_skips_past_the_cap():
    p = Pacing(threshold_s=1.0, interval_s=5.0, batch=80, min_batch=50, max_skip=3)
    for t in range(10):
        p.observe(9.0, 50, now=float(t))
    assert (p.limit, p.skip) == (50, 3)


def test_no_configured_limit_starts_from_what_the_cycle_pushed_and_zero_threshold_never_slows():
    p = Pacing(threshold_s=1.0, interval_s=5.0, batch=0)
    p.observe(4.0, 4000, now=0.0)
    assert p.limit == 2000
    p.observe(0.1, 2000, now=1.0)
    assert p.slow is False and p.limit is None
    off = Pacing(threshold_s=0.0, interval_s=5.0, batch=1000)
    assert off.observe(1e6, 1000, now=0.0) is None and not off.slow


class SlowCluster(MemoryCluster):
    """Each snapshot takes ``delay_s`` on the cycle's clock (a fake one: nothing sleeps)."""

    def __init__(self, clock) -> None:
        super().__init__()
        self.clock, self.delay_s = clock, 0.0

    def snapshot(self):
        self.clock.t += self.delay_s
        return super().snapshot()


def test_the_loop_lowers_the_batch_while_slurm_is_slow_logs_once_and_recovers(
    tmp_path, monkeypatch, caplog
):
    clock = types.SimpleNamespace(t=0.0)
    monkeypatch.setattr(
        "prioritizer.cycle.time", types.SimpleNamespace(perf_counter=lambda: clock.t)
    )
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    cfg = config.model_copy(
        update={
            "prioritizer": config.prioritizer.model_copy(
                update={"max_pushes_per_cycle": 4, "slow_slurm_seconds": 2.0}
            )
        }
    )
    c = SlowCluster(clock)
    c.add(99, 8, running_on="gpu01")
    for i in range(1, 9):
        c.add(i, 1, account=f"acc{i}").submit_time += i
    loop = Loop(Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / 'prio.db'}")))
    loop.pacing.min_batch = 1  # a small cluster: let the batch halve below the usual floor
    c.delay_s = 10.0
    with caplog.at_level(logging.WARNING, logger="slurm_dl.prioritizer"):
        r1 = loop.tick()
        assert r1 is not None and r1.slurm_s == 10.0 and r1.pushed_jobs == 4 and r1.deferred == 3
        assert loop.prio.push_limit == 2 and loop.pacing.skip == 1
        loop.pacing.resume_at = 0.0  # the spaced-out interval has passed
        r2 = loop.tick()
        assert r2 is not None and r2.pushed_jobs == 2 and loop.prio.push_limit == 1  # slower still
        c.delay_s = 0.0
        loop.pacing.resume_at = 0.0
        assert loop.tick().pushed_jobs == 1 and loop.prio.push_limit == 2
        loop.pacing.resume_at = 0.0
        loop.tick()
        loop.pacing.resume_at = 0.0
        loop.tick()
    assert loop.prio.push_limit is None and not loop.pacing.slow
    slow = [r.getMessage() for r in caplog.records if "slowly" in r.getMessage()]
    again = [r.getMessage() for r in caplog.records if "in time again" in r.getMessage()]
    assert len(slow) == 1 and len(again) == 1


class CountingCluster(SlowCluster):
    """A backend that counts its own waits on Slurm (as the command-line backend does)."""

    call_s = 0.0

    def snapshot(self):
        self.call_s += 0.5  # what Slurm took; the rest of delay_s is parsing on this side
        return super().snapshot()


def test_a_backend_that_counts_its_waits_is_judged_by_them_not_by_its_parsing(
    tmp_path, monkeypatch
):
    clock = types.SimpleNamespace(t=0.0)
    monkeypatch.setattr(
        "prioritizer.cycle.time", types.SimpleNamespace(perf_counter=lambda: clock.t)
    )
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    c = CountingCluster(clock)
    c.add(1, 1)
    c.delay_s = 30.0
    loop = Loop(Prioritizer(config, c, Store(f"sqlite:///{tmp_path / 'prio.db'}")))
    r = loop.tick()
    assert (
        r is not None and r.slurm_s == 0.5 and not loop.pacing.slow and loop.prio.push_limit is None
    )


def test_the_command_line_backend_adds_up_its_waits_on_slurm_commands():
    from slurm_dl.slurm.cli_backend import CliBackend

    b = CliBackend()
    assert b.call_s == 0.0
    b._run(["true"])
    first = b.call_s
    b._run(["true"])
    assert 0.0 < first < b.call_s
