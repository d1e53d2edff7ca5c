"""The prioritizer's power service on an in-memory cluster: it learns for a look-ahead after
it starts, then powers idle nodes beyond the buffer down (never a busy or reserved one, within
the day's cycle budget), powers them up when work waits, and only reports in a dry run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prioritizer import Prioritizer
from prioritizer.power import waiting_nodes
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import SlurmError
from slurm_dl.core.model import Job, JobState
from slurm_dl.store import Store
from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]
STEP = 600.0


class PoweringCluster(MemoryCluster):
    """Nodes powered down and up as Slurm's power saving does it, at once."""

    def __init__(self, nodes: int = 6) -> None:
        super().__init__(nodes=nodes, gpus=8)
        self.off: set[str] = set()
        self.reserved: set[str] = set()
        self.power_calls: list[tuple[tuple[str, ...], bool]] = []
        self.refuse_power = False

    def snapshot(self):
        snap = super().snapshot()
        for i, n in enumerate(snap.nodes):
            if n.name in self.off:
                snap.nodes[i] = dataclasses.replace(n, state="IDLE+POWERED_DOWN")
        return snap

    def set_power(self, nodes, up: bool) -> None:
        if self.refuse_power:
            raise SlurmError("Invalid node state specified")
        self.power_calls.append((tuple(nodes), up))
        (self.off.difference_update if up else self.off.update)(nodes)

    def reserved_nodes(self, now: float, within_s: float) -> set[str]:
        return set(self.reserved)


def config(**power):
    c = load_config(ROOT / "site-configs" / "testbed.toml")
    p = c.power.model_copy(
        update={"enabled": True, "buffer_nodes": 1, "min_powered_nodes": 1, **power}
    )
    return c.model_copy(update={"power": p})


def run(p: Prioritizer, c: PoweringCluster, steps: int) -> list[dict]:
    out = []
    for _ in range(steps):
        r = p.run_cycle()
        if r.power is not None:
            out.append(r.power)
        c.now += STEP
    return out


def scene(tmp_path, **power):
    cfg = config(**power)
    c = PoweringCluster()
    c.add(1, 8, running_on="gpu01")
    return cfg, c, Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / 'p.db'}"))


def test_learns_first_then_keeps_demand_plus_buffer_and_never_a_busy_or_reserved_node(tmp_path):
    cfg, c, p = scene(tmp_path, forecast_hours=1.0)
    c.reserved = {"gpu06"}
    steps = run(p, c, 6)  # the first hour: learning
    assert c.power_calls == [] and all(s["powered_down"] == 0 for s in steps)
    run(p, c, 2)
    # busy gpu01 + buffer 1 = 2 powered: gpu01 and gpu06, which the reservation keeps up
    assert c.off == {"gpu02", "gpu03", "gpu04", "gpu05"}, c.power_calls
    assert "gpu01" not in c.off and "gpu06" not in c.off


def test_work_that_waits_powers_nodes_up_at_once(tmp_path):
    cfg, c, p = scene(tmp_path, forecast_hours=1.0)
    run(p, c, 8)
    assert len(c.off) == 4
    c.add(2, 32)  # a 4-node job waits
    steps = run(p, c, 1)
    assert steps[-1]["powered_up"] >= 3 and len(c.off) <= 1
    assert "work waits" in steps[-1]["groups"]["h100"]["reason"]


def test_a_dry_run_only_reports_and_a_refusal_is_kept(tmp_path):
    cfg = config(forecast_hours=1.0)
    c = PoweringCluster()
    p = Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / 'p.db'}"), dry_run=True)
    steps = run(p, c, 8)
    assert c.power_calls == [] and any(s["groups"]["h100"]["powered"] < 6 for s in steps)
    c2 = PoweringCluster()
    c2.refuse_power = True
    p2 = Prioritizer(cfg, c2, Store(f"sqlite:///{tmp_path / 'q.db'}"))
    steps = run(p2, c2, 8)
    assert "Invalid node state" in steps[-1]["failed"][0], "refused: tried again next step"
    assert c2.off == set()


def test_off_by_default_nothing_is_powered(tmp_path):
    cfg = load_config(ROOT / "site-configs" / "testbed.toml")
    c = PoweringCluster()
    p = Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / 'p.db'}"))
    assert run(p, c, 8) == [] and c.power_calls == []


def test_waiting_nodes_count_only_jobs_that_may_start():
    def job(i, gpus, **kw):
        return Job(i, user="u", account="a", name="j", num_gpus=gpus, **kw)

    pending = [
        job(1, 16),
        job(2, 8, gpu_type="a100"),  # another group
        job(3, 8, state_reason="JobHeldUser"),
        job(4, 8, eligible_time=5000.0),  # begins later
        job(5, 4, gpu_type="h100"),
        job(6, 0),
    ]
    assert all(j.state is JobState.PENDING for j in pending)
    assert waiting_nodes(pending, "h100", 8, 1000.0) == 3
