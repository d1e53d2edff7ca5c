"""Slurm's own estimate of when pending jobs start (``squeue --start``'s StartTime).

The backfill scheduler sets it for pending jobs it has planned, from the time limits of the
running jobs; ``N/A`` (no estimate) for the others. The CLI backend's job reader keeps start
times only for running jobs, so ``slurm-dl explain`` asks here.
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from .runner import run_slurm


def parse_start_lines(text: str) -> dict[int, float]:
    """``JOBID|2026-11-23T13:05:00`` lines (local time, as squeue prints it) -> {job: epoch}."""
    out: dict[int, float] = {}
    for line in text.splitlines():
        jid, _, when = line.strip().partition("|")
        if not jid.isdigit() or not when or when in ("N/A", "Unknown", "None"):
            continue
        try:
            out[int(jid)] = time.mktime(time.strptime(when, "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            continue
    return out


def expected_starts(
    job_ids: Iterable[int], env: Mapping[str, str] | None = None
) -> dict[int, float]:
    """Slurm's expected start time of each pending job that has one."""
    ids = ",".join(str(int(j)) for j in job_ids)
    if not ids:
        return {}
    result = run_slurm(["squeue", "-h", "-t", "PD", "-j", ids, "-o", "%i|%S"], env=env)
    return parse_start_lines(result.stdout)
