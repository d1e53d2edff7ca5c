"""Perfect-knowledge references for the simulator: SJF and SRTF (they read ``Job.duration``).

These are lower bounds to compare real policies against; the daemon refuses them.

* ``sjf``  — shortest trace duration first, non-preemptive, strict head-of-line blocking.
* ``srtf`` — shortest remaining time (``duration - executed_s``) first, pending and running
  jobs ranked together, preemptive; on equal remaining time a pending job ranks first.
"""

from __future__ import annotations

import math

from ..model import Job
from .base import PolicyContext, PriorityPolicy


def _duration(job: Job) -> float:
    return math.inf if job.duration is None else float(job.duration)


class SjfPolicy(PriorityPolicy):
    name = "sjf"
    discipline = "strict"
    oracle = True

    def __init__(self, config=None) -> None:
        self.config = config

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (_duration(job), job.submit_time, job.job_id)


class SrtfPolicy(PriorityPolicy):
    name = "srtf"
    discipline = "preemptive"
    preemptive = True
    oracle = True

    def __init__(self, config=None) -> None:
        self.config = config

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        remaining = _duration(job) - job.executed_s
        if remaining < 0.0:
            remaining = 0.0
        return (remaining, 0 if job.pending else 1, job.submit_time, job.job_id)
