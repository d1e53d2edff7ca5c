"""Repeated whole-GPU jobs that use a small part of their GPU are told a shard would do: the pure
rule on recorded runs, then the prioritizer over an in-memory cluster (runs remembered in the
store across a restart, the hint in the explanation, the job's comment and dlsubmit status)."""

from __future__ import annotations

from pathlib import Path

from prioritizer import Prioritizer
from slurm_dl.dlsubmit.status import describe_jobs, detail_lines, status_table
from slurm_dl.core.config import SharingConfig, SharingGroup
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.explain import utilisation_lines
from slurm_dl.core.share_hint import RunUse, share_hint, small_run
from slurm_dl.core.idle.notice import share_tip
from slurm_dl.slurm.gpu_alloc import GpuAllocation
from slurm_dl.store import Store
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import write_atomically
from slurm_dl.telemetry.attribution import attribute
from slurm_dl.telemetry.samples import GpuSample
from test_telemetry_prioritizer import CancellingCluster

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
GPU = 80 * GIB


def run(
    job_id: int,
    util: float = 5.0,
    mem_gib: float = 3.0,
    *,
    user: str = "ann",
    name: str = "nb",
    gpus: int = 1,
    shared: bool = False,
    samples: int = 10,
) -> RunUse:
    return RunUse(
        job_id, user, name, gpus, shared, int(mem_gib * GIB), util, samples, float(job_id)
    )


def hint(history, user="ann", name="nb", runs=3):
    return share_hint(history, user, name, runs=runs, gpu_mem_bytes=GPU, max_fraction=0.25)


def test_a_small_run_is_one_whole_gpu_barely_used() -> None:
    assert small_run(run(1), GPU, 0.25)
    assert not small_run(run(1, util=40.0), GPU, 0.25), "compute over a quarter"
    assert not small_run(run(1, mem_gib=30.0), GPU, 0.25), "memory over a quarter"
    assert not small_run(run(1, gpus=2), GPU, 0.25), "several GPUs never share"
    assert not small_run(run(1, shared=True), GPU, 0.25), "already on a shard"
    assert not small_run(run(1, samples=2), GPU, 0.25), "too few samples to say"


def test_the_last_runs_of_the_same_user_and_name_decide() -> None:
    three = [run(1), run(2, util=12.0), run(3, mem_gib=6.5)]
    assert hint(three) == (
        "its last 3 runs used at most 12% of their GPU and 6.5 GiB: a GPU shard would do "
        "(dlsubmit --share)"
    )
    assert hint(three[:2]) is None, "two runs are not yet a habit"
    assert hint([*three, run(4, util=90.0)]) is None, "the latest run used its GPU"
    assert hint([run(0, util=90.0), *three]) is not None, "an older busy run is past"
    assert hint(three, user="bob") is None and hint(three, name="train") is None
    assert hint([run(1), run(2, user="bob"), run(3, name="other"), run(4)]) is None
    assert hint(three, runs=0) is None, "0: never"


def test_a_run_record_survives_its_row_and_a_foreign_row_is_ignored() -> None:
    r = run(7, util=4.25)
    assert RunUse.from_reason(r.to_reason()) == r
    assert RunUse.from_reason("not json") is None and RunUse.from_reason('{"job_id": 1}') is None


def agent_writes(directory: Path, now: float, jobs: list[int]) -> None:
    """gpu01's agent: each job on its own whole GPU at 5% with 3 GiB."""
    samples = [
        GpuSample("gpu01", i, i, 5.0, 3 * GIB, 80 * GIB, 80.0, (100 + i,), now)
        for i in range(len(jobs))
    ]
    allocs = [GpuAllocation(j, "u", "gpu01", (i,)) for i, j in enumerate(jobs)]
    write_atomically(directory / "gpu01.prom", exposition.render(attribute(samples, allocs)))


def test_the_prioritizer_remembers_small_runs_and_hints_the_next_one(tmp_path: Path) -> None:
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    t = config.telemetry.model_copy(
        update={"exposition_dir": str(tmp_path / "agents"), "idle_minutes": 600.0}
    )
    sharing = SharingConfig(
        groups=[SharingGroup(node_group=config.node_groups[0].name, shards_per_gpu=8)]
    )
    config = config.model_copy(update={"telemetry": t, "sharing": sharing})
    c = CancellingCluster()
    store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
    p = Prioritizer(config, c, store)
    for n, job_id in enumerate((1, 2, 3)):
        c.add(job_id, 1, running_on="gpu01", comment="").name = "nb"
        for minute in range(4):
            agent_writes(tmp_path / "agents", c.now, [job_id])
            p.run_cycle()
            c.now += 60
            if (
                n == 1 and minute == 1
            ):  # the daemon restarts while job 2 runs: its summary comes from the store
                p = Prioritizer(config, c, Store(store.url))
        del c.jobs[job_id]  # it ended: the next cycle records its use
    p.run_cycle()
    assert [d.kind for d in store.decisions(2)].count("gpu-use") == 1
    assert [d.kind for d in store.decisions(3)].count("gpu-use") == 1
    p = Prioritizer(config, c, Store(store.url))
    c.add(4, 1, running_on="gpu01", comment="").name = "nb"
    c.add(5, 1, running_on="gpu01", comment="").name = "other"
    for _ in range(2):
        agent_writes(tmp_path / "agents", c.now, [4, 5])
        p.run_cycle()
        c.now += 60
    entry = store.explanation(4)["gpu_utilisation"]
    assert entry["share_hint"].startswith(
        "its last 3 runs used at most 5% of their GPU and 3.0 GiB"
    )
    assert any(
        line.startswith("  GPU share tip: its last 3 runs") for line in utilisation_lines(entry)
    )
    assert "share_hint" not in store.explanation(5)["gpu_utilisation"], (
        "another name has no history"
    )
    assert [j for j, _ in c.comments] == [4], "one note, once"
    assert share_tip(c.jobs[4].comment) == entry["share_hint"]
    assert [d.kind for d in store.decisions(4)].count("share-hint") == 1
    [row] = describe_jobs([c.jobs[4]], 4)
    assert (
        "  tip:         its last 3 runs used at most 5% of their GPU and 3.0 GiB: a GPU"
        in detail_lines(row)
    )
    assert status_table([row])[-1].strip() == "tip: a GPU shard would do (dlsubmit --share)"


def test_the_daemon_remembers_a_bounded_history(monkeypatch) -> None:
    import prioritizer.idle_watch as iw
    from slurm_dl.core.config import TelemetryConfig

    monkeypatch.setattr(iw, "NAMES_KEPT", 3)
    w = iw.IdleWatcher(TelemetryConfig())
    for i in range(150):
        w._remember(run(i))
    assert len(w.runs[("ann", "nb")]) == iw.RUNS_KEPT and w.runs[("ann", "nb")][-1].job_id == 149
    for name in ("a", "b", "c"):
        w._remember(run(200, name=name))
    assert list(w.runs) == [("ann", "a"), ("ann", "b"), ("ann", "c")], (
        "the oldest name forgotten first"
    )
