"""Per-job GPU utilisation summaries: folded once per sample, carried across a restart, stored in
the real store (a SQLite file) and read back by a new Store on the same file."""

from __future__ import annotations

from pathlib import Path

from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.idle.decide import carried_idle_since, decide
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobState
from slurm_dl.store import CycleWrite, Store
from slurm_dl.telemetry.samples import JobGpuSample
from slurm_dl.telemetry.summary import JobUtilisationSummary, fold_samples

CFG = TelemetryConfig(
    idle_minutes=10, warn_grace_minutes=5, idle_action="cancel", sample_seconds=30
)


def sample(
    t: float, util: float, procs: int, gpu: int = 0, job: int = 7, mem: int = 1 << 30
) -> JobGpuSample:
    return JobGpuSample(job, "gpu01", gpu, util, mem, 300.0, procs, t)


def test_fold_counts_each_sample_once_and_tracks_mean_peak_and_last_busy() -> None:
    s = JobUtilisationSummary(7)
    rows = [
        sample(0, 90, 1),
        sample(0, 50, 1, gpu=1, mem=3 << 30),
        sample(30, 0, 0),
        sample(30, 0, 0, gpu=1),
    ]
    assert fold_samples(s, rows, 2.0) == 4
    assert fold_samples(s, rows, 2.0) == 0, "re-reading the same files adds nothing"
    assert fold_samples(s, [sample(30, 80, 1, job=8)], 2.0) == 0, (
        "another job's samples are not folded"
    )
    assert s.samples == 4 and s.mean_util_percent == 35.0 and s.peak_util_percent == 90.0
    assert (
        s.peak_gpu_mem_bytes == 3 << 30
        and s.last_busy_at == 0
        and (s.first_sample_at, s.last_sample_at) == (0, 30)
    )


def test_store_round_trip_upsert_and_prune(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'prio.db'}"
    store = Store(db)
    s = JobUtilisationSummary(7, updated_at=100.0)
    fold_samples(s, [sample(60, 0, 0), sample(60, 0, 0, gpu=1)], 2.0)
    s.idle_since, s.verdict, s.warned_at = 60.0, "warn", 90.0
    store.save_cycle(CycleWrite(now=100.0, cycle=1, ledger=Ledger(), utilisation={7: s}))
    again = Store(db).utilisation_summaries()
    assert again == {7: s} and again[7].gpu_seen == {"gpu01/0": 60.0, "gpu01/1": 60.0}
    s.verdict, s.action, s.action_at, s.updated_at = "cancel", "cancel", 400.0, 400.0
    store.save_cycle(CycleWrite(now=400.0, cycle=2, ledger=Ledger(), utilisation={7: s}))
    assert Store(db).utilisation_summaries([7, 8]) == {7: s}
    assert store.utilisation_summaries([8]) == {}
    assert store.prune(500.0) >= 1 and store.utilisation_summaries() == {}


def test_carried_idle_since_joins_a_short_gap_but_not_a_long_one_or_a_busy_window() -> None:
    stored = {7: JobUtilisationSummary(7, idle_since=0.0, last_sample_at=600.0)}
    window = [sample(660, 0, 0)]  # the first file read after a restart, 60 s later
    assert carried_idle_since(stored, window, CFG) == {7: 0.0}
    job = Job(7, num_gpus=1, state=JobState.RUNNING)
    [d] = decide(window, {7: job}, CFG, carried=carried_idle_since(stored, window, CFG))
    assert d.idle_since == 0.0 and round(d.idle_minutes) == 11 and d.verdict.value == "warn"
    assert carried_idle_since(stored, [sample(600 + 3600, 0, 0)], CFG) == {}, (
        "an hour without data is not idle time"
    )
    assert carried_idle_since(stored, [sample(630, 40, 1)], CFG) == {}
    assert carried_idle_since(stored, [sample(630, 0, 0), sample(630, 40, 1, gpu=1)], CFG) == {}
    [fresh] = decide(window, {7: job}, CFG)
    assert fresh.idle_minutes == 0.0 and fresh.verdict.value == "ok"
