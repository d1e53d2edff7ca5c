"""The few Slurm client calls the testbed itself needs: node states while starting, and
submit-and-wait helpers for integration tests, benchmarks and the quick start.

Every command goes through ``slurm_dl.slurm.runner.run_slurm``, the one place slurm-dl runs
Slurm commands, so failures map to the same error types everywhere.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Iterable, Mapping

from ..core.errors import SlurmError, TestbedError
from ..slurm.runner import run_slurm


def run_client(
    argv: list[str], env: Mapping[str, str], *, timeout: float = 30.0, input: str | None = None
) -> str:
    """Run a Slurm client command through the backend's runner (one error mapping for all)."""
    return run_slurm(argv, env=env, timeout=timeout, input=input).stdout


def node_states(env: Mapping[str, str]) -> dict[str, str]:
    """Node name -> lower-case state as sinfo prints it (``idle``, ``down*``, ``mixed`` …)."""
    out = run_client(["sinfo", "-h", "-N", "-o", "%N %T"], env, timeout=10)
    states: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1].lower()
    return states


def submit(
    script: str,
    env: Mapping[str, str],
    args: Iterable[str] = (),
    *,
    workdir: Path | None = None,
) -> int:
    """``sbatch --parsable`` a script text; returns the job id."""
    argv = ["sbatch", "--parsable", *args]
    if workdir is not None:
        argv.append(f"--chdir={workdir}")
    out = run_client(argv, env, input=script).strip()
    try:
        return int(out.split(";")[0])
    except ValueError:
        raise SlurmError(f"sbatch printed no job id: {out!r}", command=argv) from None


_FIELD = re.compile(r"(\w+)=(\S*)")


def job_fields(job_id: int, env: Mapping[str, str]) -> dict[str, str]:
    """``scontrol -o show job`` as a dict (JobState, NodeList, TresPerJob, StdOut …)."""
    out = run_client(["scontrol", "-o", "show", "job", str(job_id)], env, timeout=10)
    return dict(_FIELD.findall(out))


def wait_for_job_state(
    job_id: int,
    env: Mapping[str, str],
    states: Iterable[str] = ("COMPLETED",),
    *,
    timeout: float = 60.0,
    poll: float = 0.2,
) -> dict[str, str]:
    """Poll until the job is in one of ``states``; returns its fields. A job that ends in another
    final state, or does not get there in ``timeout`` seconds, raises TestbedError with its fields."""
    wanted = {s.upper() for s in states}
    final = {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
    deadline = time.monotonic() + timeout
    fields: dict[str, str] = {}
    while True:
        fields = job_fields(job_id, env)
        state = fields.get("JobState", "")
        if state in wanted:
            return fields
        if state in final:
            raise TestbedError(
                f"job {job_id} ended {state} (reason {fields.get('Reason')}, exit {fields.get('ExitCode')}) "
                f"while waiting for {'/'.join(sorted(wanted))}"
            )
        if time.monotonic() > deadline:
            raise TestbedError(
                f"job {job_id} still {state} (reason {fields.get('Reason')}) after {timeout:.0f} s; "
                f"wanted {'/'.join(sorted(wanted))}"
            )
        time.sleep(poll)
