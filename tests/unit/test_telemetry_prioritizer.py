"""The prioritizer with GPU telemetry: agents' exposition files -> utilisation in the explanations,
an idle job warned (log, comment) and then cancelled or deprioritized, a busy job left alone, dry
runs that only report, and a daemon restart that keeps the idle clock and the warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.explain.view import render_explanation
from slurm_dl.slurm.gpu_alloc import GpuAllocation
from slurm_dl.store import Store
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import write_atomically
from slurm_dl.telemetry.attribution import attribute
from slurm_dl.telemetry.samples import GpuSample
from test_cycle import MemoryCluster  # the in-memory cluster of the cycle tests (same directory)

ROOT = Path(__file__).resolve().parents[2]


class CancellingCluster(MemoryCluster):
    def __init__(self) -> None:
        super().__init__(nodes=1, gpus=8)
        self.cancelled: list[int] = []
        self.comments: list[tuple[int, str]] = []

    def cancel(self, job_id: int) -> None:
        self.cancelled.append(job_id)
        del self.jobs[job_id]

    def set_comment(self, job_id: int, text: str) -> None:
        self.comments.append((job_id, text))
        self.jobs[job_id].comment = text


def agent_writes(directory: Path, now: float, busy: int = 2) -> None:
    """What gpu01's agent would publish: GPUs 0-1 busy (job 1), GPUs 2-3 idle with no process (job 2)
    (``busy=4``: job 2's GPUs busy too)."""
    samples = [
        GpuSample(
            "gpu01",
            i,
            i,
            90.0 if i < busy else 0.0,
            1 << 30,
            80 << 30,
            300.0,
            (77,) if i < busy else (),
            now,
        )
        for i in range(4)
    ]
    allocs = [GpuAllocation(1, "u", "gpu01", (0, 1)), GpuAllocation(2, "u", "gpu01", (2, 3))]
    write_atomically(directory / "gpu01.prom", exposition.render(attribute(samples, allocs)))


def scene(tmp_path: Path, **telemetry):
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    t = config.telemetry.model_copy(
        update={
            "exposition_dir": str(tmp_path / "agents"),
            "idle_minutes": 10.0,
            "warn_grace_minutes": 5.0,
            "idle_action": "cancel",
            **telemetry,
        }
    )
    config = config.model_copy(update={"telemetry": t})
    c = CancellingCluster()
    c.add(1, 2, running_on="gpu01")
    c.add(2, 2, running_on="gpu01")
    return config, c, Store(f"sqlite:///{tmp_path / 'prio.db'}")


def run_minutes(
    p: Prioritizer, c: CancellingCluster, agents: Path, minutes: int, busy: int = 2
) -> None:
    for _ in range(minutes):
        agent_writes(agents, c.now, busy)
        p.run_cycle()
        c.now += 60


def test_idle_job_is_warned_then_cancelled_busy_job_untouched(tmp_path: Path) -> None:
    config, c, store = scene(tmp_path)
    p = Prioritizer(config, c, store)
    run_minutes(p, c, tmp_path / "agents", 12)
    kinds = [d.kind for d in store.decisions(2)]
    assert "idle-warn" in kinds and c.cancelled == []
    expl = store.explanation(2)
    assert (
        expl["gpu_utilisation"]["idle_verdict"] == "warn" and expl["gpu_utilisation"]["gpus"] == 2
    )
    text = render_explanation(expl, [])
    assert "GPU utilisation: 2 GPU(s), mean 0.0%" in text and "-> warn" in text
    assert store.explanation(1)["gpu_utilisation"]["mean_util_percent"] == 90.0
    run_minutes(p, c, tmp_path / "agents", 5)
    assert c.cancelled == [2]
    assert [d.kind for d in store.decisions(2)].count("idle-warn") == 1, (
        "warned once, not every cycle"
    )
    assert "idle-cancel" in [d.kind for d in store.decisions(2)]
    assert not any(d.kind.startswith("idle") for d in store.decisions(1))


@pytest.mark.parametrize("how", [{"dry_run": True}, {"idle_action": "report"}])
def test_report_modes_record_but_never_cancel(tmp_path: Path, how: dict) -> None:
    config, c, store = scene(tmp_path, **how)
    p = Prioritizer(config, c, store)
    run_minutes(p, c, tmp_path / "agents", 20)
    assert c.cancelled == []
    reasons = [d.reason for d in store.decisions(2) if d.kind.startswith("idle")]
    assert reasons and all("report only" in r for r in reasons)


def test_without_exposition_dir_the_cycle_ignores_telemetry(tmp_path: Path) -> None:
    config, c, store = scene(tmp_path, exposition_dir=None)
    p = Prioritizer(config, c, store)
    run_minutes(p, c, tmp_path / "agents", 20)
    assert c.cancelled == [] and "gpu_utilisation" not in store.explanation(2)


def idle_kinds(store: Store, job_id: int) -> list[str]:
    return [d.kind for d in store.decisions(job_id) if d.kind.startswith("idle")]


def test_restarted_daemon_keeps_the_idle_clock_and_does_not_warn_again(tmp_path: Path) -> None:
    config, c, store = scene(tmp_path)
    run_minutes(Prioritizer(config, c, store), c, tmp_path / "agents", 12)  # warned at minute 10
    assert idle_kinds(store, 2) == ["idle-warn"]
    saved = Store(store.url).utilisation_summaries()[2]
    assert (
        saved.verdict == "warn"
        and saved.warned_at == 1000.0 + 10 * 60
        and saved.idle_since == 1000.0
    )
    # kill -9: only the store survives; the new daemon's sample window starts empty
    run_minutes(Prioritizer(config, c, Store(store.url)), c, tmp_path / "agents", 5)
    assert c.cancelled == [2], "idle 15 min in all: cancelled on time, not 15 min after the restart"
    assert idle_kinds(store, 2) == ["idle-warn", "idle-cancel"]
    assert Store(store.url).utilisation_summaries()[2].action == "cancel"


def test_warning_is_appended_to_the_users_comment_and_replaced_by_the_action_note(
    tmp_path: Path,
) -> None:
    config, c, store = scene(tmp_path)
    c.jobs[2].comment = "dl:deadline=2026-11-21T05:00 dl:ckpt=1 my sweep"
    p = Prioritizer(config, c, store)
    run_minutes(p, c, tmp_path / "agents", 12)
    [(jid, text)] = c.comments
    assert jid == 2 and text.startswith(
        "dl:deadline=2026-11-21T05:00 dl:ckpt=1 my sweep [slurm-dl: GPUs idle 10 min"
    )
    assert "cancelled" in text and text.endswith("]")
    run_minutes(p, c, tmp_path / "agents", 5)
    last = c.comments[-1][1]
    assert last.startswith(
        "dl:deadline=2026-11-21T05:00 dl:ckpt=1 my sweep [slurm-dl: cancelled: GPUs idle 15 min"
    )
    assert last.count("[slurm-dl:") == 1
    assert ("log" in config.telemetry.warn_via) and not any(j == 1 for j, _ in c.comments)


def test_warn_via_log_only_leaves_the_comment_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, c, store = scene(tmp_path, warn_via=["log"])
    with caplog.at_level("WARNING", logger="slurm_dl.prioritizer"):
        run_minutes(Prioritizer(config, c, store), c, tmp_path / "agents", 12)
    assert c.comments == [] and "idle GPUs: job 2" in caplog.text


def test_deprioritized_idle_job_goes_to_the_bottom_and_is_requeued_first(tmp_path: Path) -> None:
    config, c, store = scene(tmp_path, idle_action="deprioritize")
    p = Prioritizer(config, c, store)
    agents = tmp_path / "agents"
    run_minutes(
        p, c, agents, 17
    )  # warned at 10, deprioritized at 15, SiteFactor pushed the cycle after
    bottom = -config.prioritizer.site_factor_max
    assert idle_kinds(store, 2) == ["idle-warn", "idle-deprioritize"] and c.cancelled == []
    assert c.jobs[2].site_factor == bottom and c.jobs[1].site_factor == 0
    assert store.explanation(2)["gpu_utilisation"]["action"] == "deprioritize"
    text = render_explanation(store.explanation(2), [])
    import time as _time

    def clock(at: float) -> str:  # explain shows local times
        return _time.strftime("%m-%d %H:%M", _time.localtime(at))

    assert f"idle GPUs: warned {clock(1600)}; deprioritize at {clock(1900)}" in text
    assert "GPU lifetime: 34 sample(s), mean 0.0%" in text and f"idle since {clock(1000)}" in text
    c.add(3, 6)  # needs 6 GPUs, 4 free: one of the two 2-GPU jobs must go; job 1 would by job id
    run_minutes(p, c, agents, 1)
    assert c.signals == [(2, "USR2")], (
        "the idle job is the victim, through the normal preemption path"
    )
    run_minutes(p, c, agents, 1)  # past the 10 s grace
    assert c.requeues == [2] and c.cancelled == [] and c.jobs[2].pending
    run_minutes(p, c, agents, 2)
    assert c.jobs[2].site_factor == bottom, "requeued, it waits at the bottom"


def test_a_job_busy_again_after_its_warning_is_warned_afresh_before_any_action(
    tmp_path: Path,
) -> None:
    config, c, store = scene(tmp_path)
    p = Prioritizer(config, c, store)
    agents = tmp_path / "agents"
    run_minutes(p, c, agents, 12)  # warned at minute 10
    run_minutes(p, c, agents, 2, busy=4)  # its GPUs are used again
    assert Store(store.url).utilisation_summaries()[2].warned_at is None
    run_minutes(p, c, agents, 14)  # a new idle spell of 13 min: warned again, not yet cancelled
    assert idle_kinds(store, 2) == ["idle-warn", "idle-warn"] and c.cancelled == []
    run_minutes(p, c, agents, 3)
    assert c.cancelled == [2]


def test_steps_only_reported_in_a_dry_run_are_taken_once_the_site_enforces(tmp_path: Path) -> None:
    config, c, store = scene(tmp_path, dry_run=True)
    run_minutes(Prioritizer(config, c, store), c, tmp_path / "agents", 12)
    assert Store(store.url).utilisation_summaries()[2].verdict == "warn" and c.comments == []
    enforced = config.model_copy(
        update={"telemetry": config.telemetry.model_copy(update={"dry_run": False})}
    )
    p = Prioritizer(enforced, c, Store(store.url))
    run_minutes(p, c, tmp_path / "agents", 1)
    assert [j for j, _ in c.comments] == [2], "warned for real now"
    run_minutes(p, c, tmp_path / "agents", 3)
    assert c.cancelled == [2]
