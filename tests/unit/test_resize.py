"""The resize executor: signal -> checkpoint wait -> requeuehold -> size -> release, each step
an intent row written before its Slurm call; a daemon killed between any two steps finishes on
restart; refused sizes roll back and back off; rigid jobs are never touched. Against a small
scripted cluster that changes as Slurm does (the live contract is tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prioritizer.resize import ResizeDecision, ResizeReport, advance_open, retry_after, start
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.elastic_sizes import ElasticSizes
from slurm_dl.core.errors import JobPendingError, SlurmError
from slurm_dl.core.model import ClusterSnapshot, Job, JobState
from slurm_dl.store import Store
from slurm_dl.store.resizes import resizes

ROOT = Path(__file__).resolve().parents[2]


class Slurm:
    """Jobs as Slurm keeps them, and the calls made on them, in order."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.calls: list[tuple] = []
        self.refuse_size = False
        self.crash_before: str | None = None  # the daemon dies before this call

    def _crash(self, name: str) -> None:
        if self.crash_before == name:
            self.crash_before = None
            raise KeyboardInterrupt(name)  # stands in for kill -9: nothing after it runs

    def signal_batch(self, job_id, signal):
        self.calls.append(("signal", job_id, signal))

    signal_steps = signal_batch

    def requeue_hold(self, job_id):
        self._crash("requeue_hold")
        j = self.jobs[job_id]
        if j.state is JobState.PENDING:
            raise JobPendingError("Job is pending execution")
        self.calls.append(("requeuehold", job_id))
        j.state, j.state_reason, j.restarts = JobState.PENDING, "JobHeldAdmin", j.restarts + 1

    def hold(self, job_id):
        self.calls.append(("hold", job_id))
        self.jobs[job_id].state_reason = "JobHeldAdmin"

    def resize_pending(self, job_id, size):
        self._crash("resize_pending")
        self.calls.append(("resize", job_id, size.gpus))
        if self.refuse_size:
            raise SlurmError("Requested node configuration is not available")
        self.jobs[job_id].num_gpus = size.gpus

    def release(self, job_id):
        self._crash("release")
        self.calls.append(("release", job_id))
        self.jobs[job_id].state_reason = "None"

    def snap(self, now: float) -> ClusterSnapshot:
        return ClusterSnapshot(now, list(self.jobs.values()))


@pytest.fixture
def config():
    return load_config(ROOT / "site-configs" / "testbed.toml")


@pytest.fixture
def store(tmp_path):
    return Store(f"sqlite:///{tmp_path / 'prio.db'}")


def elastic_job(job_id=1, gpus=32, state=JobState.RUNNING, elastic=ElasticSizes(8, 32)):
    return Job(job_id, user="alice", num_gpus=gpus, state=state, elastic=elastic, lead_s=30.0)


def cycle(store, slurm, config, now, decisions=()):
    report = ResizeReport()
    advance_open(store, slurm, slurm.snap(now), config, report)
    start(store, slurm, slurm.snap(now), decisions, config, report)
    return report


SHRINK = ResizeDecision(1, 16, "a rigid 16-GPU job waits")


def test_a_running_job_shrinks_by_signal_wait_requeuehold_resize_release(store, config):
    s = Slurm()
    s.jobs[1] = elastic_job()
    cycle(store, s, config, 1000.0, [SHRINK])
    assert s.calls == [("signal", 1, "USR2")]
    cycle(store, s, config, 1010.0)  # within its 30 s lead: it saves
    assert len(s.calls) == 1
    cycle(store, s, config, 1031.0)
    assert s.calls[1:] == [("requeuehold", 1), ("resize", 1, 16), ("release", 1)]
    assert s.jobs[1].num_gpus == 16 and s.jobs[1].state_reason == "None"
    (row,) = resizes(store)
    assert row.state == "done" and row.reason.startswith("runs at 16 of 32 GPUs: a rigid")


def test_a_pending_job_is_just_updated_never_held_or_released(store, config):
    s = Slurm()
    s.jobs[1] = elastic_job(state=JobState.PENDING)
    s.jobs[1].state_reason = "JobHeldUser"  # the user's own hold stays
    cycle(store, s, config, 1000.0, [SHRINK])
    assert s.calls == [("resize", 1, 16)] and s.jobs[1].state_reason == "JobHeldUser"


@pytest.mark.parametrize("crash", ["requeue_hold", "resize_pending", "release"])
def test_a_daemon_killed_between_steps_finishes_on_restart_and_leaves_no_job_held(
    store, config, crash
):
    s = Slurm()
    s.jobs[1] = elastic_job()
    cycle(store, s, config, 1000.0, [SHRINK])
    s.crash_before = crash
    with pytest.raises(KeyboardInterrupt):
        cycle(store, s, config, 1031.0)
    cycle(store, s, config, 1040.0)  # the restarted daemon: the row is open in the store
    assert s.jobs[1].state_reason == "None" and s.jobs[1].num_gpus == 16
    assert [c[0] for c in s.calls].count("requeuehold") == 1
    assert resizes(store)[0].state == "done"


def test_a_refused_size_releases_at_the_old_size_and_backs_off(store, config):
    s = Slurm()
    s.jobs[1] = elastic_job(state=JobState.PENDING)
    s.refuse_size = True
    cycle(store, s, config, 1000.0, [SHRINK])
    assert s.jobs[1].num_gpus == 32 and resizes(store)[0].state == "refused"
    report = cycle(store, s, config, 1030.0, [SHRINK])
    assert report.skipped and "tried again in" in report.skipped[0][1]
    s.refuse_size = False
    cycle(store, s, config, 1000.0 + retry_after(1) + 1, [SHRINK])
    assert s.jobs[1].num_gpus == 16 and retry_after(2) == 2 * retry_after(1)


def test_a_refusal_of_a_held_job_still_releases_it(store, config):
    s = Slurm()
    s.jobs[1] = elastic_job()
    cycle(store, s, config, 1000.0, [SHRINK])
    s.refuse_size = True
    cycle(store, s, config, 1031.0)
    assert s.calls[-1] == ("release", 1) and s.jobs[1].num_gpus == 32
    assert resizes(store)[0].state == "refused"


def test_rigid_jobs_and_sizes_outside_the_range_are_never_resized(store, config):
    s = Slurm()
    s.jobs[1] = elastic_job()
    s.jobs[2] = Job(2, num_gpus=16, state=JobState.RUNNING)  # rigid
    s.jobs[3] = elastic_job(3, elastic=ElasticSizes(8, 32, (8, 32)))
    r = cycle(
        store,
        s,
        config,
        1000.0,
        [ResizeDecision(2, 8, "x"), ResizeDecision(3, 16, "x"), ResizeDecision(1, 12, "x")],
    )
    assert s.calls == [] and resizes(store) == []
    assert [why for _, why in r.skipped] == [
        "not elastic: never resized",
        "16 GPUs is not one of its sizes (8,32)",
        "12 GPUs fit no node shape",
    ]
