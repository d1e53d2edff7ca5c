"""Deadline boost by slack, and the admission check for infeasible deadlines.

``slack = (deadline - now) - remaining time limit`` (for a pending job the whole limit; for a
running one what is left of it; no limit counts as 0). The order, in tiers:

0. **boosted**: deadline jobs whose slack fell below ``boost_slack`` and that can still make it
   (slack ≥ 0), earliest deadline first (EDF);
1. other deadline jobs that can still make it, EDF;
2. jobs without a deadline, FIFO;
3. deadline jobs that can no longer make it (slack < 0), FIFO — boosting them would only
   make other deadlines miss too (Chronus drops them to best effort the same way).

Non-preemptive (``firstfit``). The score is 1.0 .. 0.75 in the boosted tier (less slack,
higher), 0.5 for other feasible deadline jobs, 0 otherwise.
"""

from __future__ import annotations

import math

from ..model import Job
from .base import PolicyContext, PriorityPolicy


def slack(job: Job, now: float) -> float | None:
    """Seconds to spare if the job used its whole remaining limit from now; None: no deadline."""
    if job.deadline is None:
        return None
    remaining = job.remaining_limit(now)
    return (job.deadline - now) - (remaining or 0.0)


def deadline_feasible(job: Job, now: float, config=None, *, user_deadline_jobs: int = 0) -> tuple[bool, str]:
    """Can ``job``'s deadline be admitted at ``now``? Returns ``(ok, reason)``.

    Infeasible: a deadline in the past; a time limit that runs past the deadline even if the
    job started now; no time limit to check it with; a deadline beyond the site's quota
    (``policy.deadline.max_deadline_days``); or the user already holding
    ``max_deadline_jobs_per_user`` deadline jobs (the caller counts them).
    """
    if job.deadline is None:
        return True, "no deadline"
    dc = config.policy.deadline if config is not None else None
    max_days = dc.max_deadline_days if dc is not None else 7.0
    max_jobs = dc.max_deadline_jobs_per_user if dc is not None else 4
    to_go = job.deadline - now
    if to_go <= 0:
        return False, f"deadline is {-to_go:.0f} s in the past"
    if to_go > max_days * 86400.0:
        return False, f"deadline is {to_go / 86400.0:.1f} days away; the site allows at most {max_days:g} days"
    if job.time_limit is None:
        return False, "a deadline needs a time limit to check it against"
    if job.time_limit > to_go:
        return False, (
            f"time limit {job.time_limit / 60:.0f} min runs past the deadline "
            f"({to_go / 60:.0f} min away) even if the job started now"
        )
    if user_deadline_jobs >= max_jobs:
        return False, f"user already has {user_deadline_jobs} deadline jobs; the site allows {max_jobs}"
    return True, f"feasible with {(to_go - job.time_limit) / 60:.0f} min of slack"


class DeadlinePolicy(PriorityPolicy):
    name = "deadline"
    discipline = "firstfit"

    def __init__(self, config=None, *, boost_slack_s: float | None = None) -> None:
        if boost_slack_s is None:
            boost_slack_s = 60.0 * (config.policy.deadline.boost_slack_minutes if config is not None else 60.0)
        if not boost_slack_s > 0 or not math.isfinite(boost_slack_s):
            raise ValueError(f"deadline: boost_slack_s must be positive, got {boost_slack_s}")
        self.boost_slack_s = float(boost_slack_s)
        self.config = config

    def tier(self, job: Job, now: float) -> int:
        s = slack(job, now)
        if s is None:
            return 2
        if s < 0.0:
            return 3
        return 0 if s < self.boost_slack_s else 1

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        t = self.tier(job, ctx.now)
        edf = job.deadline if t < 2 else 0.0
        return (t, edf, job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        s = slack(job, ctx.now)
        if s is None or s < 0.0:
            return 0.0
        if s < self.boost_slack_s:
            return 0.75 + 0.25 * (1.0 - s / self.boost_slack_s)
        return 0.5

    def next_key_change(self, job: Job, ctx: PolicyContext) -> float | None:
        """A pending job's slack shrinks one second per second: boosted when it falls below
        ``boost_slack``, hopeless when it falls below 0. A running job's slack is constant."""
        if not job.pending:
            return None
        s = slack(job, ctx.now)
        if s is None or s < 0.0:
            return None
        if s >= self.boost_slack_s:
            return ctx.now + (s - self.boost_slack_s) + 1e-6
        return ctx.now + s + 1e-6
