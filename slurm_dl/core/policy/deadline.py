"""Deadline boost by slack, and the admission check for infeasible deadlines.

``slack = (deadline - now) - remaining run time``: the time to spare if the job ran from now
until its work is done. The remaining run time is the job's time limit less what it has already
executed when it resumes from a checkpoint (``checkpointable``), else what is left of the limit
in the current run (the whole limit while waiting); no limit counts as 0.

Deadlines get priority lazily, as in Chronus: a deadline job that can wait does wait like any
other job, so best-effort work is not pushed back for deadlines that are far away. Three levels:

* **boosted** (score 1.0): slack fell below ``boost_slack`` and the deadline can still be made
  (slack ≥ 0); among these, earliest deadline first (EDF, the ``tiebreak``);
* **neutral** (0.5): jobs without a deadline, and deadline jobs with slack to spare;
* **waiting** (0.25): soft-deadline jobs not boosted (see below);
* **hopeless** (0.0): deadline jobs that can no longer make it (slack < 0). Boosting them would
  only make other deadlines miss too; they drop below best effort, which also means a made-up
  deadline that cannot be met costs its owner priority instead of gaining it.

A job whose deadline admission did not promise (``Job.tags[DEMOTED_TAG]``, see
:mod:`.admission`) is never boosted: it stays neutral while its deadline can still be met and
falls to hopeless after, like any deadline that is lost.

Soft deadlines (``Job.soft_deadlines``, utility steps (time, value) with values falling) aim at
the first step still reachable (from the step admission promised on). Such a job is boosted
only for the step admission promised it (any reachable step when admission is off) and only
when its slack to that step falls below ``boost_slack``; the boost's score is set by
``soft_boost`` (below). Otherwise it **waits** (score 0.25): behind best-effort work, ahead of
lost deadlines. So a soft job with time to spare, one whose step was not promised, and one past
its promised step but still able to earn a later one take no GPUs from best effort; it is
hopeless (0.0) when no step is reachable any more.

``soft_boost`` (``policy.deadline.soft_boost``): ``utility`` (the default) scores a boosted soft
job ``0.5 + 0.5 × value / top value`` (the utility still reachable; a soft job at its top step
ties a boosted strict one and EDF orders them); ``strict-first`` scores it
``0.5 + 0.49 × value / top value`` (every boosted strict deadline first, and a strict one
before a soft one at the same time); ``value-rate``
``0.5 + 0.49 × r / (r + 1)`` with ``r`` its value still reachable (share of the top) per GPU-hour
of its remaining run time (strict first, then the soft job that earns most per GPU-second).
On the soft-deadline trace the default earned the most utility (docs/results.md).

The levels are piecewise constant in time: a waiting job's slack shrinks one second per second
(boosted at ``slack = boost_slack``, hopeless at ``slack = 0``, both announced by
``next_key_change``); a running job's slack is constant. Standalone, the policy is ``firstfit``
with FIFO inside a level.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..model import Job
from .base import PolicyContext, PriorityPolicy, policy_settings


DEMOTED_TAG = "deadline_demoted"
"""Set in ``Job.tags`` (to the reason) when admission demoted the job's deadline."""
SOFT_BOOSTS = ("utility", "strict-first", "value-rate")
"""The values of ``policy.deadline.soft_boost`` (see the module docstring)."""
SOFT_FROM_TAG = "deadline_soft_from"
"""Set in ``Job.tags`` to the soft-deadline step admission promised (earlier steps given up)."""


def _settings(config):
    """The site's ``[policy.deadline]``, or its defaults without a site config."""
    return policy_settings(config).deadline


def remaining_run(job: Job, now: float) -> float | None:
    """Seconds the job still needs by its time limit; None without a limit.

    A checkpointable job resumes where it stopped, so what it has executed in all its runs
    counts; a job that restarts from scratch needs the whole limit again once it is requeued.
    """
    if job.time_limit is None:
        return None
    if job.checkpointable:
        ran = job.executed_s
        if job.running and job.start_time is not None:
            ran = max(ran, now - job.start_time)
        return max(0.0, job.time_limit - ran)
    return job.remaining_limit(now)


def slack(job: Job, now: float) -> float | None:
    """Seconds to spare if the job ran its remaining time from now; None: no deadline."""
    if job.deadline is None:
        return None
    return (job.deadline - now) - (remaining_run(job, now) or 0.0)


def deadline_feasible(
    job: Job,
    now: float,
    config=None,
    *,
    user_deadline_jobs: int = 0,
    tasks: int = 1,
    waves: int = 1,
) -> tuple[bool, str]:
    """Can ``job``'s deadline be admitted at ``now``? Returns ``(ok, reason)``.

    Infeasible: a deadline in the past; a time limit that runs past the deadline even if the
    job started now; no time limit to check it with; a deadline beyond the site's quota
    (``policy.deadline.max_deadline_days``); or the user holding more than
    ``max_deadline_jobs_per_user`` deadline jobs with this one (the caller counts them).
    A job array is ``tasks`` jobs, run in ``waves`` one after another at its throttle: each
    task counts against the quota, and the last wave must end before the deadline.
    """
    if job.deadline is None:
        return True, "no deadline"
    dc = _settings(config)
    max_days, max_jobs = dc.max_deadline_days, dc.max_deadline_jobs_per_user
    to_go = job.deadline - now
    if to_go <= 0:
        return False, f"deadline is {-to_go:.0f} s in the past"
    if to_go > max_days * 86400.0:
        return (
            False,
            f"deadline is {to_go / 86400.0:.1f} days away; the site allows at most {max_days:g} days",
        )
    if job.time_limit is None:
        return False, "a deadline needs a time limit to check it against"
    needs = job.time_limit * max(1, waves)
    if needs > to_go:
        if waves > 1:
            return False, (
                f"{waves} waves of the array's tasks (its throttle) at {job.time_limit / 60:.0f} min "
                f"each run past the deadline ({to_go / 60:.0f} min away) even if started now"
            )
        return False, (
            f"time limit {job.time_limit / 60:.0f} min runs past the deadline "
            f"({to_go / 60:.0f} min away) even if the job started now"
        )
    if user_deadline_jobs + max(1, tasks) > max_jobs:
        if tasks > 1:
            return False, (
                f"user already has {user_deadline_jobs} deadline jobs and this array adds {tasks}; "
                f"the site allows {max_jobs}"
            )
        return (
            False,
            f"user already has {user_deadline_jobs} deadline jobs; the site allows {max_jobs}",
        )
    return True, f"feasible with {(to_go - needs) / 60:.0f} min of slack"


def admit_deadlines(jobs: Sequence[Job], config=None) -> dict[int, str]:
    """Which of the active jobs' deadlines the prioritizer honours; returns ``{job_id: why}``
    for the deadlines it ignores (the caller treats those jobs as having none).

    The filter checks a deadline at submission, but a deadline can also reach Slurm around it
    (``sbatch --deadline``, which job_submit.lua cannot see on 22.05) and the filter's per-user
    count lives in its memory. So the quota is enforced here again, from the jobs alone:

    * a deadline needs a time limit to compute slack with;
    * it may lie at most ``max_deadline_days`` after the job's submission;
    * a user gets at most ``max_deadline_jobs_per_user`` deadline jobs at a time (each waiting
      task of an array counts): the earliest submitted keep theirs, later ones wait without a
      deadline until an earlier one ends.

    Soft-deadline steps count as one deadline job, checked at their last step.

    Because of this, more deadlines or far-off deadlines cannot buy a user more priority.
    """
    dc = _settings(config)
    max_s, max_jobs = dc.max_deadline_days * 86400.0, dc.max_deadline_jobs_per_user
    ignored: dict[int, str] = {}
    per_user: dict[str, int] = {}
    for job in sorted(
        (j for j in jobs if j.deadline is not None or j.soft_deadlines),
        key=lambda j: (j.submit_time, j.job_id),
    ):
        last = job.deadline if job.deadline is not None else job.soft_deadlines[-1][0]
        if job.time_limit is None:
            ignored[job.job_id] = "deadline ignored: the job has no time limit to check it against"
        elif last - job.submit_time > max_s:
            ignored[job.job_id] = (
                f"deadline ignored: {(last - job.submit_time) / 86400.0:.1f} days after "
                f"submission; the site allows at most {max_s / 86400.0:g}"
            )
        else:
            n = per_user.get(job.user, 0)
            if n + job.array_tasks > max_jobs:
                ignored[job.job_id] = (
                    f"deadline ignored for now: user {job.user!r} already has {max_jobs} "
                    f"deadline jobs (the site's limit)"
                )
            else:
                per_user[job.user] = n + job.array_tasks
    return ignored


class DeadlinePolicy(PriorityPolicy):
    name = "deadline"
    discipline = "firstfit"

    def __init__(
        self,
        config=None,
        *,
        boost_slack_s: float | None = None,
        admission: bool | None = None,
        admission_share: float | None = None,
        soft_boost: str | None = None,
    ) -> None:
        dc = _settings(config)
        self.soft_boost = dc.soft_boost if soft_boost is None else soft_boost
        if self.soft_boost not in SOFT_BOOSTS:
            raise ValueError(
                f"deadline: soft_boost must be one of {', '.join(SOFT_BOOSTS)}, got {self.soft_boost!r}"
            )
        if boost_slack_s is None:
            boost_slack_s = 60.0 * dc.boost_slack_minutes
        self.admission = dc.admission if admission is None else bool(admission)
        self.admission_share = (
            dc.admission_share if admission_share is None else float(admission_share)
        )
        if not 0.0 < self.admission_share <= 1.0:
            raise ValueError(
                f"deadline: admission_share must be in (0, 1], got {self.admission_share}"
            )
        if not boost_slack_s > 0 or not math.isfinite(boost_slack_s):
            raise ValueError(f"deadline: boost_slack_s must be positive, got {boost_slack_s}")
        self.boost_slack_s = float(boost_slack_s)
        self.config = config

    BOOSTED, NEUTRAL, WAITING, HOPELESS = 0, 1, 2, 3
    _SCORES = (1.0, 0.5, 0.25, 0.0)

    def target(self, job: Job, now: float) -> tuple[float, float] | None:
        """The deadline the job aims at now and the share of its utility it is worth there:
        ``(deadline, 1.0)`` for a hard deadline; for soft deadlines the first step still
        reachable from now (by the remaining run time), at or after the step admission
        promised; None when the job has no deadline or no step is reachable any more."""
        if job.deadline is not None or not job.soft_deadlines:
            return None if job.deadline is None else (job.deadline, 1.0)
        steps = job.soft_deadlines
        top = max(v for _, v in steps)
        if top <= 0:
            return None
        start = float(job.tags.get(SOFT_FROM_TAG, "-inf")) if job.tags else float("-inf")
        end = now + (remaining_run(job, now) or 0.0)
        for t, v in steps:
            if t >= start and t >= end and v > 0:
                return t, v / top
        return None

    def level(self, job: Job, now: float) -> int:
        """``BOOSTED``, ``NEUTRAL`` or ``HOPELESS`` (see the module docstring)."""
        if job.deadline is None and not job.soft_deadlines:
            return self.NEUTRAL
        if job.tags and job.tags.get(DEMOTED_TAG):
            if job.deadline is None:  # a soft job admission did not promise: it waits, or is lost
                return self.WAITING if self.target(job, now) is not None else self.HOPELESS
            return self.NEUTRAL if (slack(job, now) or 0.0) >= 0.0 else self.HOPELESS
        tgt = self.target(job, now)
        if tgt is None:
            return self.HOPELESS
        s = tgt[0] - now - (remaining_run(job, now) or 0.0)
        if s < 0.0:
            return self.HOPELESS
        if job.deadline is not None:
            return self.BOOSTED if s < self.boost_slack_s else self.NEUTRAL
        promised = job.tags.get(SOFT_FROM_TAG) if job.tags else None
        if s < self.boost_slack_s and (promised is None or tgt[0] == float(promised)):
            return self.BOOSTED
        return self.WAITING  # soft: not promised this step, or time to spare: behind best effort

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        lv = self.level(job, ctx.now)
        boosted = lv == self.BOOSTED
        return (
            lv,
            self._boost_tb(job, ctx.now) if boosted else 0.0,
            self._soft_after(job) if boosted else 0.0,
            job.submit_time,
            job.job_id,
        )

    def _boost_tb(self, job: Job, now: float) -> float:
        tgt = self.target(job, now)
        return tgt[0] if tgt is not None else 0.0

    def score(self, job: Job, ctx: PolicyContext) -> float:
        lv = self.level(job, ctx.now)
        if lv == self.BOOSTED and job.deadline is None:
            tgt = self.target(job, ctx.now)
            share = tgt[1] if tgt is not None else 0.0
            if self.soft_boost == "utility":  # the utility still reachable
                return 0.5 + 0.5 * share
            if self.soft_boost == "strict-first":
                return 0.5 + 0.49 * share
            work_h = max(1, job.num_gpus) * max(60.0, remaining_run(job, ctx.now) or 0.0) / 3600.0
            r = share / work_h  # value-rate: the share of the top value per GPU-hour still to run
            return 0.5 + 0.49 * r / (r + 1.0)
        return self._SCORES[lv]

    def tiebreak(self, job: Job, ctx: PolicyContext) -> tuple:
        """EDF among boosted jobs; with ``soft_boost`` other than ``utility``, a strict deadline
        before a soft one at the same time."""
        if self.level(job, ctx.now) != self.BOOSTED:
            return (0.0, 0.0)
        return (self._boost_tb(job, ctx.now), self._soft_after(job))

    def score_and_tiebreak(self):
        """Score and tiebreak from one look at the job's level (not for a subclass that changes
        either): most jobs are not boosted, and then both are fixed by the level."""
        cls = type(self)
        if any(
            getattr(cls, m) is not getattr(DeadlinePolicy, m)
            for m in ("score", "tiebreak", "level")
        ):
            return None
        level, boosted, scores, score, tiebreak = (
            self.level,
            self.BOOSTED,
            self._SCORES,
            self.score,
            self.tiebreak,
        )

        def both(job: Job, ctx: PolicyContext) -> tuple[float, tuple]:
            lv = level(job, ctx.now)
            if lv != boosted:
                return scores[lv], (0.0, 0.0)
            return score(job, ctx), tiebreak(job, ctx)

        return both

    def bind_score_and_tiebreak(self, ctx: PolicyContext):
        """``score_and_tiebreak`` for one context: a job without deadlines is neutral."""
        both = self.score_and_tiebreak()
        if both is None:
            return None
        neutral = (self._SCORES[self.NEUTRAL], (0.0, 0.0))

        def bound(job: Job) -> tuple[float, tuple]:
            if job.deadline is None and not job.soft_deadlines:
                return neutral
            return both(job, ctx)

        return bound

    def _soft_after(self, job: Job) -> float:
        return 1.0 if job.deadline is None and self.soft_boost != "utility" else 0.0

    def next_key_change(self, job: Job, ctx: PolicyContext) -> float | None:
        """A waiting job's slack shrinks one second per second: boosted when it falls below
        ``boost_slack``, hopeless (or, soft, aiming at its next step) when it falls below 0.
        A running job's slack is constant."""
        if not job.pending:
            return None
        if job.tags and job.tags.get(DEMOTED_TAG):
            s = slack(job, ctx.now)
            if job.deadline is None and job.soft_deadlines:  # waits until its last step is lost
                s = job.soft_deadlines[-1][0] - ctx.now - (remaining_run(job, ctx.now) or 0.0)
            return None if s is None or s < 0.0 else ctx.now + s + 1e-6
        tgt = self.target(job, ctx.now)
        if tgt is None:
            return None
        s = tgt[0] - ctx.now - (remaining_run(job, ctx.now) or 0.0)
        if s < 0.0:
            return None
        if s >= self.boost_slack_s:
            return ctx.now + (s - self.boost_slack_s) + 1e-6
        return ctx.now + s + 1e-6
