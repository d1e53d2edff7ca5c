"""FIFO in submit order (Slurm's default order), in three scheduling disciplines.

``fifo`` blocks at the head of the line (Helios' FIFO); ``fifo-firstfit`` skips jobs that do
not fit; ``fifo-backfill`` lets later jobs start when they do not delay the head's reservation
(Slurm's backfill, which needs time limits). The order is the same: submit time, then job id.
"""

from __future__ import annotations

from ..model import Job
from .base import PolicyContext, PriorityPolicy


class FifoPolicy(PriorityPolicy):
    name = "fifo"
    discipline = "strict"

    def __init__(self, config=None) -> None:
        self.config = config

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (job.submit_time, job.job_id)


class FifoFirstFitPolicy(FifoPolicy):
    name = "fifo-firstfit"
    discipline = "firstfit"


class FifoBackfillPolicy(FifoPolicy):
    name = "fifo-backfill"
    discipline = "backfill"
