"""Slurm failures -> the project's error types (pure mapping, plus the runner on real processes)."""

from __future__ import annotations

import os

import pytest

from slurm_dl.core.errors import (
    JobBusyError,
    JobNotFoundError,
    JobPendingError,
    SlurmError,
    SlurmNotInstalledError,
    SlurmUnavailableError,
)
from slurm_dl.slurm.cli_backend import split_gone_jobs
from slurm_dl.slurm.protocol import chunked, group_by_value
from slurm_dl.slurm.runner import classify_failure, run_slurm


def test_success_is_none():
    assert classify_failure(["squeue"], 0, "") is None
    assert classify_failure(["sbatch"], 0, "sbatch: warning: something harmless") is None
    # a filter notice that happens to say "error:" does not turn an accepted submission into a failure
    assert (
        classify_failure(["sbatch", "--parsable"], 0, "note: error: budget low, job accepted")
        is None
    )


@pytest.mark.parametrize(
    "stderr",
    [
        "squeue: error: Unable to contact slurm controller (connect failure)",
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
        "scontrol: error: Connection refused",
        "Socket timed out on send/recv operation",
    ],
)
def test_unreachable_controller(stderr):
    err = classify_failure(["squeue", "--json"], 1, stderr)
    assert isinstance(err, SlurmUnavailableError) and isinstance(err, ConnectionError)
    assert "Unable" in str(err) or "refused" in str(err) or "timed out" in str(err)


def test_invalid_job_id_recorded_messages():
    err = classify_failure(
        ["scontrol", "requeue", "99999"], 1, "Invalid job id specified for job 99999\n"
    )
    assert isinstance(err, JobNotFoundError) and "99999" in str(err) and err.returncode == 1
    # scancel -v exits 0 but reports the unknown id on stderr
    err = classify_failure(
        ["scancel", "-v", "99999"],
        0,
        "scancel: Terminating job 99999\nscancel: error: Kill job error on job id 99999: Invalid job id specified\n",
    )
    assert isinstance(err, JobNotFoundError)


def test_other_failures_keep_slurms_message():
    err = classify_failure(
        ["scontrol", "update", "JobId=6", "SiteFactor=1"],
        1,
        "Requested operation is presently disabled for job 6",
    )
    assert (
        type(err) is SlurmError
        and "presently disabled" in str(err)
        and err.command[0] == "scontrol"
    )


def test_refusals_for_now_are_told_apart():
    """A job between states, or already pending: the caller tries later, it does not give up."""
    err = classify_failure(
        ["scancel", "--batch", "--signal=USR2", "6"],
        228,
        "scancel: error: Kill job error on job id 6: Job can not be altered now, try again later",
    )
    assert (
        isinstance(err, JobBusyError)
        and "can not be altered" in str(err)
        and err.command[0] == "scancel"
    )
    err = classify_failure(["scontrol", "requeue", "6"], 1, "Job is pending execution for job 6")
    assert isinstance(err, JobPendingError)


def test_scancel_retrying_a_job_between_states_is_cut_short(tmp_path, monkeypatch):
    """scancel retries a job in a transitional state 10 times with pauses of 5 s and more; a
    short timeout and its verbose line make that a JobBusyError, not a minute-long wait."""
    fake = tmp_path / "scancel"
    fake.write_text(
        "#!/bin/sh\necho 'scancel: Job is in transitional state, retrying' >&2\nsleep 30\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(JobBusyError, match="between states"):
        run_slurm(["scancel", "-v", "--signal=USR2", "6"], timeout=1.0)


def test_split_gone_jobs():
    gone, other = split_gone_jobs(
        "Invalid job id specified for job 999\nJob has already finished for job 6\n"
    )
    assert gone == [6, 999] and other == []
    gone, other = split_gone_jobs("Access/permission denied for job 5")
    assert gone == [] and other == ["Access/permission denied for job 5"]


def test_group_by_value_and_chunks():
    groups = group_by_value({5: 10, 3: 10, 4: -7, 1: 0})
    assert groups == {-7: [4], 0: [1], 10: [3, 5]}
    assert chunked(list(range(5)), 2) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="out of range"):
        group_by_value({1: 2**31})


def test_runner_missing_command_is_not_installed():
    with pytest.raises(SlurmNotInstalledError, match="command not found"):
        run_slurm(["slurm-dl-no-such-command-xyz"])


def test_runner_maps_real_process_failures():
    with pytest.raises(JobNotFoundError):
        run_slurm(["sh", "-c", "echo 'Invalid job id specified for job 7' >&2; exit 1"])
    with pytest.raises(SlurmUnavailableError, match="no answer from Slurm within"):
        run_slurm(["sleep", "5"], timeout=0.2)
    assert run_slurm(["sh", "-c", "echo 42"]).stdout.strip() == "42"
