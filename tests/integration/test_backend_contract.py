"""The backend contract: every read and write of ``SlurmBackend``, against the live testbed.

One suite, parametrised over the backends. The pyslurm one skips with the reason where no
pyslurm matching this Slurm is importable (true on Debian 12's Slurm 22.05).
Waiting loops have generous bounds only so a broken cluster fails instead of hanging; nothing
here asserts on time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from slurm_dl.core.errors import (
    JobNotFoundError,
    JobPendingError,
    SlurmError,
    SlurmNotInstalledError,
    SlurmUnavailableError,
)
from slurm_dl.core.model import Job, JobState
from slurm_dl.slurm import CliBackend, PendingSize, SlurmBackend, get_backend
from slurm_dl.slurm.pyslurm_backend import pyslurm_unavailable_reason
from slurm_dl.testbed import Testbed

T = TypeVar("T")
NO_SUCH_JOB = 987654321
SLEEPER = "#!/bin/bash\nsleep 300\n"


@pytest.fixture(params=["cli", "cli-json", "pyslurm"])
def backend(request: pytest.FixtureRequest, testbed: Testbed) -> SlurmBackend:
    """``cli`` reads jobs with ``squeue -O`` (default), ``cli-json`` with ``squeue --json``."""
    if request.param == "pyslurm":
        reason = pyslurm_unavailable_reason(testbed.env())
        if reason:
            pytest.skip(f"pyslurm backend: {reason}")
        try:
            return get_backend("pyslurm", env=testbed.env())
        except SlurmNotInstalledError as e:
            pytest.skip(str(e))
    if request.param == "cli-json":
        return CliBackend(testbed.env(), job_reader="json")
    return get_backend(request.param, env=testbed.env())


@pytest.fixture
def cleanup(backend: SlurmBackend):
    """Job ids to cancel after the test, whatever happened."""
    ids: list[int] = []
    yield ids
    for job_id in ids:
        try:
            backend.cancel(job_id)
        except Exception:  # already gone: fine
            pass


def wait_for(what: str, probe: Callable[[], T | None], bound_s: float = 90.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` past the bound."""
    end = time.monotonic() + bound_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.2)


def job_of(backend: SlurmBackend, job_id: int, states=None) -> Job | None:
    for job in backend.jobs(states):
        if job.job_id == job_id:
            return job
    return None


def running(backend: SlurmBackend, job_id: int) -> Job:
    return wait_for(
        f"job {job_id} to run",
        lambda: (j := job_of(backend, job_id)) and j.state is JobState.RUNNING and j,
    )


def test_snapshot_reads_jobs_nodes_partitions_topology(
    backend: SlurmBackend, cleanup: list[int]
) -> None:
    run3 = backend.submit(
        SLEEPER, ["--gpus=3", "-t", "30", "-J", "contract-run3", "--comment=hello contract"]
    )
    cleanup.append(run3)
    held = backend.submit(
        SLEEPER, ["--gres=gpu:h100:2", "-t", "10", "-H", "--nice=50", "-J", "contract-held"]
    )
    cleanup.append(held)
    later = backend.submit(
        SLEEPER, ["-N1", "--gpus-per-node=8", "-t", "10", "--begin=now+3600", "--deadline=now+7200"]
    )
    cleanup.append(later)
    running(backend, run3)

    snap = backend.snapshot(now=123.0)
    assert snap.taken_at == 123.0
    jobs = {j.job_id: j for j in snap.jobs}

    r = jobs[run3]
    assert r.state is JobState.RUNNING and r.num_gpus == 3 and r.gpu_type == "h100"
    assert (
        r.comment == "hello contract" and r.time_limit == 1800 and r.user and r.partition == "gpu"
    )
    assert (
        r.start_time and r.start_time >= r.submit_time > 0 and len(r.nodes) == 1 and r.restarts == 0
    )

    h = jobs[held]
    assert h.state is JobState.PENDING and h.state_reason.startswith("JobHeld")
    assert (h.num_gpus, h.gpus_per_node, h.gpu_type, h.nice, h.priority) == (2, 2, "h100", 50, 0)

    lt = jobs[later]
    assert lt.state_reason == "BeginTime" and lt.gpus_per_node == 8 and lt.num_gpus == 8
    assert lt.eligible_time and lt.deadline and lt.deadline > lt.eligible_time > lt.submit_time

    nodes = {n.name: n for n in snap.nodes}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert all(n.gpus == 8 and n.gpu_type == "h100" for n in nodes.values())
    assert nodes[r.nodes[0]].gpus_used >= 3
    assert {n.switch for n in nodes.values()} == {"leaf1", "leaf2"}
    assert sum(n.gpus_used for n in nodes.values()) >= 3

    (part,) = snap.partitions
    assert part.name == "gpu" and part.default and len(part.nodes) == 4
    leaves = {s.name: s for s in snap.topology.switches if s.nodes}
    assert sorted(leaves) == ["leaf1", "leaf2"] and snap.topology.leaf_of()["gpu01"] == "leaf1"


def test_multi_node_job_shape(backend: SlurmBackend, cleanup: list[int]) -> None:
    ddp = backend.submit(SLEEPER, ["-N2", "--gpus-per-node=8", "-t", "10"])
    cleanup.append(ddp)
    job = running(backend, ddp)
    assert (job.num_gpus, job.gpus_per_node, job.num_nodes, len(job.nodes)) == (16, 8, 2, 2)


def test_submit_path_with_env(backend: SlurmBackend, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/bash\necho "var=$SLURMDL_CONTRACT_VAR"\n')
    out = tmp_path / "out.txt"
    job_id = backend.submit(
        script, [f"--output={out}", "-t", "1"], env={"SLURMDL_CONTRACT_VAR": "forty-two"}
    )
    assert job_id > 0
    wait_for(f"job {job_id} to finish", lambda: job_of(backend, job_id, [JobState.COMPLETED]))
    assert out.read_text().strip() == "var=forty-two"


def test_set_site_factor_groups_by_value(backend: SlurmBackend, cleanup: list[int]) -> None:
    ids = [backend.submit(SLEEPER, ["--gpus=1", "-t", "5", "--begin=now+3600"]) for _ in range(3)]
    cleanup.extend(ids)
    before = {j.job_id: j.priority for j in backend.jobs() if j.job_id in ids}
    result = backend.set_site_factor({ids[0]: 100, ids[1]: 100, ids[2]: 250, NO_SUCH_JOB: 100})
    assert result.missing == (NO_SUCH_JOB,) and result.updated == 3
    if backend.name == "cli":
        assert result.calls == 2  # one scontrol call per distinct value
    after = {j.job_id: j.priority for j in backend.jobs() if j.job_id in ids}
    assert [after[i] - before[i] for i in ids] == [100, 100, 250]


def test_site_factor_visible_in_snapshot(backend: SlurmBackend, cleanup: list[int]) -> None:
    # A whole-cluster job in front keeps the second one pending but eligible (sprio lists it).
    filler = backend.submit(SLEEPER, ["-N4", "--gpus-per-node=8", "-t", "5"])
    cleanup.append(filler)
    waiter = backend.submit(SLEEPER, ["-N4", "--gpus-per-node=8", "-t", "5"])
    cleanup.append(waiter)
    # The filler must hold the cluster before the push: while an earlier test's jobs still end,
    # both wait, and the raised SiteFactor would start the waiter first. A running job is no longer
    # in sprio, which is where the snapshot reads SiteFactor from, so it would read 0.
    running(backend, filler)
    backend.set_site_factor({waiter: 4321})
    assert (
        wait_for("sprio to list the waiting job", lambda: backend.site_factors().get(waiter))
        == 4321
    )
    assert backend.snapshot().job(waiter).site_factor == 4321


def test_hold_and_release(backend: SlurmBackend, cleanup: list[int]) -> None:
    job_id = backend.submit(SLEEPER, ["--gpus=1", "-t", "5", "--begin=now+3600"])
    cleanup.append(job_id)
    backend.hold(job_id)
    held = job_of(backend, job_id)
    assert held.state_reason.startswith("JobHeld") and held.priority == 0
    backend.release(job_id)
    released = job_of(backend, job_id)
    assert not released.state_reason.startswith("JobHeld") and released.priority > 0


def test_requeue_hold_resize_release_restarts_a_job_at_its_new_size(
    backend: SlurmBackend, cleanup: list[int]
) -> None:
    """The resize of a running job: requeue it held, change its size while pending, release
    it; it starts again at the new size (the same calls on 22.05, 24.11 and 26.05)."""
    job_id = backend.submit(SLEEPER, ["-N2", "--gpus-per-node=8", "-t", "5", "--requeue"])
    cleanup.append(job_id)
    assert (running(backend, job_id).num_nodes, running(backend, job_id).num_gpus) == (2, 16)
    backend.requeue_hold(job_id)
    held = wait_for(
        "the job held after its requeue",
        lambda: (j := job_of(backend, job_id)) and j.restarts == 1 and j,
    )
    assert held.priority == 0 and "held" in held.state_reason.lower()
    backend.resize_pending(job_id, PendingSize(8, nodes=1, gpus_per_node=8))
    with pytest.raises(JobPendingError):
        backend.requeue_hold(job_id)  # already requeued: Slurm says it is pending
    backend.release(job_id)
    again = wait_for(
        "the job to run again at its new size",
        lambda: (j := job_of(backend, job_id)) and j.state is JobState.RUNNING and j,
    )
    assert (again.num_nodes, again.num_gpus, again.restarts) == (1, 8, 1)


def test_resize_pending_per_job_gpus(backend: SlurmBackend, cleanup: list[int]) -> None:
    """``--gpus=N`` jobs change their TresPerJob; a pending job changes without a hold."""
    job_id = backend.submit(SLEEPER, ["--gpus=16", "-t", "5", "--begin=now+3600"])
    cleanup.append(job_id)
    backend.resize_pending(job_id, PendingSize(4))
    assert job_of(backend, job_id).num_gpus == 4


def test_resize_pending_of_a_running_job_is_refused(
    backend: SlurmBackend, cleanup: list[int]
) -> None:
    """Slurm cannot grow a running job: the call fails and the job runs on unchanged."""
    job_id = backend.submit(SLEEPER, ["-N1", "--gpus-per-node=4", "-t", "5"])
    cleanup.append(job_id)
    running(backend, job_id)
    with pytest.raises(SlurmError):
        backend.resize_pending(job_id, PendingSize(16, nodes=2, gpus_per_node=8))
    assert running(backend, job_id).num_gpus == 4


def test_signal_batch_reaches_the_batch_shell(backend: SlurmBackend, tmp_path: Path) -> None:
    out = tmp_path / "sig.txt"
    script = (
        "#!/bin/bash\n"
        "trap 'echo got-USR2; exit 0' USR2\n"
        "echo ready\n"
        "sleep 300 & wait $!\n"
        "echo no-signal\n"
    )
    job_id = backend.submit(script, [f"--output={out}", "-t", "5", "--gpus=1"])
    wait_for("the trap to be set", lambda: out.exists() and "ready" in out.read_text())
    backend.signal_batch(job_id, "USR2")
    wait_for(f"job {job_id} to finish", lambda: job_of(backend, job_id, [JobState.COMPLETED]))
    assert out.read_text().split() == ["ready", "got-USR2"]


def test_requeue_counts_a_restart(backend: SlurmBackend, cleanup: list[int]) -> None:
    job_id = backend.submit(SLEEPER, ["--gpus=1", "-t", "5"])
    cleanup.append(job_id)
    running(backend, job_id)
    backend.requeue(job_id)
    job = wait_for(
        "the requeued job", lambda: (j := job_of(backend, job_id)) and j.restarts == 1 and j
    )
    assert job.state in (JobState.PENDING, JobState.RUNNING, JobState.REQUEUED, JobState.COMPLETING)


def test_job_end_tells_how_a_job_ended_and_a_finished_job_can_be_requeued(
    backend: SlurmBackend, tmp_path: Path, cleanup: list[int]
) -> None:
    """What the preemption path reads of a victim that left the queue, and what it does then."""
    died = backend.submit(
        "#!/bin/bash\necho up\nsleep 300\n",
        ["--gpus=1", "-t", "5", "--requeue", f"--output={tmp_path / 'died.out'}"],
    )
    saved = backend.submit(
        "#!/bin/bash\ntrap 'exit 0' USR2\nsleep 300 & wait $!\n",
        ["--gpus=1", "-t", "5", "--requeue", "-o", "/dev/null"],
    )
    cleanup.extend([died, saved])
    running(backend, died)
    running(backend, saved)
    wait_for("the first job's shell", lambda: (tmp_path / "died.out").exists())
    time.sleep(1)  # the trap is set right after the shell starts
    backend.signal_batch(died, "USR2")  # no trap: the shell dies of it
    backend.signal_batch(saved, "USR2")  # a trap: it exits 0
    end = wait_for(
        "the first job to end", lambda: (e := backend.job_end(died)).state.finished and e
    )
    assert (
        end.state is JobState.FAILED
        and end.exit_signal == 12
        and end.died
        and end.end_time is not None
    )
    end = wait_for(
        "the second job to end", lambda: (e := backend.job_end(saved)).state.finished and e
    )
    assert end.state is JobState.COMPLETED and end.exit_signal == 0 and not end.died
    backend.requeue(saved)  # a finished batch job may be requeued while Slurm still holds it
    job = wait_for(
        "the job back in the queue", lambda: (j := job_of(backend, saved)) and j.restarts == 1 and j
    )
    assert job.state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING)
    with pytest.raises(JobNotFoundError):
        backend.job_end(NO_SUCH_JOB)


def test_set_comment_replaces_the_comment_as_one_line(
    backend: SlurmBackend, cleanup: list[int]
) -> None:
    job_id = backend.submit(SLEEPER, ["--gpus=1", "-t", "5", "--comment=dl:class=train run 7"])
    cleanup.append(job_id)
    running(backend, job_id)
    text = 'dl:class=train run 7 [slurm-dl: GPUs idle 61 min (since 2026-11-21 03:00 UTC); it\'s "idle"]'
    backend.set_comment(job_id, text)
    assert job_of(backend, job_id).comment == text
    backend.set_comment(job_id, "x" * 1024)  # Slurm's limit, exactly
    with pytest.raises(SlurmError):
        backend.set_comment(job_id, "x" * 1025)
    with pytest.raises(JobNotFoundError):
        backend.set_comment(NO_SUCH_JOB, "note")


def test_cancel(backend: SlurmBackend) -> None:
    job_id = backend.submit(SLEEPER, ["--gpus=1", "-t", "5", "--begin=now+3600"])
    backend.cancel(job_id)
    assert job_of(backend, job_id) is None
    assert job_of(backend, job_id, [JobState.CANCELLED]) is not None


@pytest.mark.parametrize(
    "action", ["cancel", "requeue", "hold", "release", "signal_batch", "requeue_hold"]
)
def test_unknown_job_id_is_job_not_found(backend: SlurmBackend, action: str) -> None:
    with pytest.raises(JobNotFoundError) as info:
        getattr(backend, action)(NO_SUCH_JOB)
    assert str(NO_SUCH_JOB) in str(info.value) or "Invalid job id" in str(info.value)


def test_slurmctld_down_is_unavailable(
    backend: SlurmBackend, make_testbed: Callable[..., Testbed]
) -> None:
    """A private 1-node testbed, stopped under the backend: reads and writes raise the retryable type."""
    tb = make_testbed()
    tb.up()
    if backend.name == "pyslurm":
        _pyslurm_cluster_down_in_new_process(tb)
        return
    private = get_backend(backend.name, env=tb.env())
    assert [n.name for n in private.nodes()] == ["gpu01"]
    tb.down()
    with pytest.raises(SlurmUnavailableError, match="slurmctld|controller"):
        private.snapshot()
    with pytest.raises(SlurmUnavailableError):
        private.set_site_factor({1: 5})


PYSLURM_DOWN = """
import sys
from slurm_dl.core.errors import SlurmUnavailableError
from slurm_dl.slurm import get_backend
b = get_backend("pyslurm")
print(",".join(n.name for n in b.nodes()), flush=True)
sys.stdin.readline()  # the test stops the cluster
for call in (b.snapshot, lambda: b.set_site_factor({1: 5})):
    try:
        call()
        print("no error", flush=True)
    except SlurmUnavailableError as e:
        print("unavailable", "slurmctld" in str(e) or "controller" in str(e), flush=True)
"""


def _pyslurm_cluster_down_in_new_process(tb: Testbed) -> None:
    """libslurm keeps the first slurm.conf of a process: the private cluster gets its own."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PYSLURM_DOWN],
        env=tb.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "gpu01"
    tb.down()
    out, err = proc.communicate("down\n", timeout=120)
    lines = out.splitlines()
    assert (
        len(lines) == 2 and lines[0] == "unavailable True" and lines[1].startswith("unavailable")
    ), (out, err)


def test_missing_slurm_commands_are_not_installed(tmp_path: Path) -> None:
    cli = get_backend("cli", env={"PATH": str(tmp_path), "SLURM_CONF": "/nonexistent"})
    with pytest.raises(SlurmNotInstalledError, match="slurm-client"):
        cli.jobs()
