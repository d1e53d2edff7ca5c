"""FIFO in submit order (Slurm's default order), in three scheduling disciplines.

``fifo`` blocks at the head of the line (Helios' FIFO); ``fifo-firstfit`` skips jobs that do
not fit; ``fifo-backfill`` lets later jobs start when they do not delay the head's reservation
(Slurm's backfill, which needs time limits). The order is the same: submit time, then job id.
"""

from __future__ import annotations

from ..model import Job
from .base import PolicyContext, PriorityPolicy

AGE_HALF_S = 86400.0


class FifoPolicy(PriorityPolicy):
    name = "fifo"
    discipline = "strict"

    def __init__(self, config=None) -> None:
        self.config = config

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        """Age as urgency: 0 at submission, 0.5 after a day, approaching 1 (combined policy)."""
        age = ctx.now - job.submit_time
        return 0.0 if age <= 0 else 1.0 - 2.0 ** (-age / AGE_HALF_S)


class FifoFirstFitPolicy(FifoPolicy):
    name = "fifo-firstfit"
    discipline = "firstfit"


class FifoBackfillPolicy(FifoPolicy):
    name = "fifo-backfill"
    discipline = "backfill"
