"""The job record an array task (``27_1``) or a hetjob component (``27+1``) is in Slurm.

An array task that has started has a job id of its own (``27_1`` may be job 31); a pending task
waits in the array's own record (job 27) until it starts; a hetjob component is a job of its own
(``27+1`` is job 28). ``squeue -j`` matches loosely (``-j 27+1`` lists every component of 27), so
the rows it prints are matched here exactly, and nothing else is ever taken for the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..core.errors import JobNotFoundError, SlurmError
from ..core.jobid import JobRef
from .runner import DEFAULT_TIMEOUT_S, run_slurm
from .squeue_format import SEP

FIELDS = ("JobID", "ArrayJobID", "ArrayTaskID", "HetJobID", "HetJobOffset", "State")


@dataclass(frozen=True, slots=True)
class FoundJob:
    """The job id Slurm keeps ``ref`` under; ``note`` says when that record is not the task's own."""

    job_id: int
    note: str | None = None


def lookup_argv(ref: JobRef) -> list[str]:
    """``squeue`` for the rows of ``ref`` (one per array task, finished ones too while listed)."""
    fields = ",".join(f"{name}:0{SEP}" for name in FIELDS)
    return ["squeue", "-h", "-r", "-t", "all", "-j", str(ref), "-O", fields]


def _number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def pick_job(ref: JobRef, text: str) -> FoundJob:
    """The row of :func:`lookup_argv`'s output that is exactly ``ref``; JobNotFoundError without one."""
    if ref.task is None and ref.het_offset is None:
        raise ValueError(f"{ref}: only an array task or a hetjob component is looked up")
    found: dict[int, str] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(SEP)]
        if len(parts) < len(FIELDS):
            continue
        job, array_job, task, het_job, offset = (_number(p) for p in parts[:5])
        if job is None:
            continue
        if ref.task is not None and (array_job, task) == (ref.job_id, ref.task):
            found[job] = parts[5]
        elif ref.het_offset is not None and (het_job, offset) == (ref.job_id, ref.het_offset):
            found[job] = parts[5]
    if not found:
        raise JobNotFoundError(
            f"job {ref}: Slurm does not know it (ended a while ago, or never submitted)"
        )
    if len(found) > 1:
        raise SlurmError(
            f"job {ref}: Slurm lists it as several jobs ({', '.join(map(str, sorted(found)))})"
        )
    job_id, state = found.popitem()
    note = None
    if ref.task is not None and job_id == ref.job_id and state == "PENDING":
        note = f"{ref} is pending in the array's own record, job {job_id} (shown here)"
    return FoundJob(job_id, note)


def find_job(
    ref: JobRef, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT_S
) -> FoundJob:
    """The job id of ``ref`` in Slurm: a plain job id as it is; an array task or hetjob
    component as Slurm lists it (``squeue``)."""
    if ref.plain:
        return FoundJob(ref.job_id)
    if ref.spans:
        raise ValueError(f"{ref}: names several array tasks, not one job")
    argv = lookup_argv(ref)
    try:
        out = run_slurm(argv, env=env, timeout=timeout).stdout
    except JobNotFoundError:
        out = ""
    return pick_job(ref, out)


def known_to_slurm(
    job_id: int, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT_S
) -> bool | None:
    """Whether Slurm lists job ``job_id`` (waiting, running, or ended within MinJobAge);
    None when Slurm cannot be asked."""
    try:
        out = run_slurm(
            ["squeue", "-h", "-r", "-t", "all", "-j", str(job_id), "-o", "%i"],
            env=env,
            timeout=timeout,
        ).stdout
    except JobNotFoundError:
        return False
    except (
        SlurmError
    ) as e:  # squeue refuses an id beyond those it has handed out: "Invalid job id: N"
        return False if "Invalid job id" in str(e) else None
    return any(line.strip() for line in out.splitlines())


def output_file(
    job_id: int, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT_S
) -> str | None:
    """The job's output file as Slurm recorded it (``scontrol show job``'s ``StdOut``), None when
    Slurm does not list the job or recorded none."""
    try:
        out = run_slurm(
            ["scontrol", "-o", "show", "job", str(job_id)], env=env, timeout=timeout
        ).stdout
    except SlurmError:
        return None
    for word in out.split():
        if word.startswith("StdOut="):
            return word.removeprefix("StdOut=") or None
    return None
