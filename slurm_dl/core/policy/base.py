"""The one interface every priority policy implements.

A policy is pure: given jobs, a :class:`PolicyContext` (``now``, the ledger, the site config,
cluster size) it returns an order (first = should run first) and scores in ``[0, 1]``
(higher = more urgent). The daemon maps scores onto SiteFactor levels; the simulator uses the
order; the combined policy sums weighted scores within tiers.

``discipline`` tells a scheduler how to apply the order:

* ``"strict"``     — head-of-line blocking: the pass stops at the first job that does not fit;
* ``"firstfit"``   — jobs that do not fit are skipped, later ones may start;
* ``"backfill"``   — Slurm-like EASY backfill: later jobs may start if they do not delay the
  head job's reservation (computed from time limits);
* ``"preemptive"`` — pending and running jobs are ranked together; running jobs that are not
  selected are preempted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

from ..model import Job

_job_id = attrgetter("job_id")

if TYPE_CHECKING:
    from ..config import SiteConfig
    from ..ledger import Ledger

DISCIPLINES = ("strict", "firstfit", "backfill", "preemptive", "lease")


def policy_settings(config: "SiteConfig | None") -> Any:
    """The ``[policy]`` section a policy reads: the site config's, or the default config's when
    there is none (the config models own every default; no policy keeps a second set)."""
    if config is not None:
        return config.policy
    from ..config import PolicyConfig

    return PolicyConfig()


@dataclass(slots=True)
class PolicyContext:
    """Everything a policy may look at besides the jobs themselves."""

    now: float
    ledger: "Ledger | None" = None
    config: "SiteConfig | None" = None
    total_gpus: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class PriorityPolicy(ABC):
    """Orders or scores jobs. Subclasses set ``name`` and ``discipline``.

    ``preemptive``: a running job may be displaced by a pending job that orders before it
    (true exactly when ``discipline == "preemptive"``).
    ``oracle``: the policy reads ``Job.duration`` (true run time) — simulator only.
    """

    name: ClassVar[str]
    discipline: ClassVar[str] = "strict"
    preemptive: ClassVar[bool] = False
    oracle: ClassVar[bool] = False

    @abstractmethod
    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        """Sort key; smaller runs first. Must end in a deterministic tie-break (submit, id)."""

    def score(self, job: Job, ctx: PolicyContext) -> float:
        """Absolute urgency of one job in [0, 1] (1 = most urgent), comparable across calls at
        the same ``now``; the combined policy sums these with weights. Policies whose order has
        no natural absolute scale do not define it."""
        raise NotImplementedError(f"policy {self.name!r} has no absolute per-job score")

    def tiebreak(self, job: Job, ctx: PolicyContext) -> tuple:
        """How jobs with equal ``score`` are ordered before the combined policy's next tier
        (e.g. EDF among boosted deadline jobs). Empty: no opinion."""
        return ()

    def score_and_tiebreak(self) -> Callable[[Job, PolicyContext], tuple[float, tuple]] | None:
        """A function giving ``(score(job), tiebreak(job))`` in one call, for a policy whose two
        share their work (the combined policy calls both per job each cycle); None: none."""
        return None

    def bind_score(self, ctx: PolicyContext) -> Callable[[Job], float] | None:
        """``score`` at one context as a function of the job alone, the same value for every
        job (what the combined policy calls per job while it sorts a queue: what depends on
        the context alone is looked up once); None: none cheaper than ``score``."""
        return None

    def bind_score_and_tiebreak(
        self, ctx: PolicyContext
    ) -> Callable[[Job], tuple[float, tuple]] | None:
        """``score_and_tiebreak()`` at one context as a function of the job alone; None: none."""
        return None

    def next_key_change(self, job: Job, ctx: PolicyContext) -> float | None:
        """Earliest time after ``ctx.now`` at which ``key(job)`` can change on its own.

        For a running job this is e.g. when its attained service crosses the next LAS
        threshold; for a pending job, e.g. when the starvation guard promotes it. The
        event-driven simulator schedules these as events. ``None`` = never (the key only
        changes when the job's state changes).
        """
        return None

    def key_and_next_change(self, job: Job, ctx: PolicyContext) -> tuple[tuple, float | None]:
        """``(key(job), next_key_change(job))`` in one call; a policy may share the work."""
        return self.key(job, ctx), self.next_key_change(job, ctx)

    def order(self, jobs: Sequence[Job], ctx: PolicyContext) -> list[Job]:
        key = self.key
        return sorted(jobs, key=lambda j: key(j, ctx))

    def scores(self, jobs: Sequence[Job], ctx: PolicyContext) -> dict[int, float]:
        """Urgency in [0, 1] per job id (1 = most urgent). Default: rank-based from ``order``."""
        return rank_scores(self.order(jobs, ctx))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.discipline}>"


def rank_scores(ordered: Sequence[Job]) -> dict[int, float]:
    """Scores from an order: first job 1.0, last 0.0, evenly spaced."""
    n = len(ordered)
    if n == 0:
        return {}
    if n == 1:
        return {ordered[0].job_id: 1.0}
    last = n - 1  # (ids read at C level: run over every waiting job each cycle)
    return dict(zip(map(_job_id, ordered), [1.0 - i / last for i in range(n)]))


def tie_break(job: Job) -> tuple[float, int]:
    """The shared last word of every key: submit time, then job id (trace row order)."""
    return (job.submit_time, job.job_id)


def in_order_of(jobs: Sequence[Job], job_ids: Sequence[int]) -> list[Job]:
    """``jobs`` in the order their ids have in ``job_ids`` (an earlier ranking), those not in
    it after them in their own order; ``jobs`` as given when two share an id.

    A policy's order does not depend on the order it is given (every key ends with the job
    id), but Python's sort is adaptive: a queue handed over as it was ranked a cycle earlier,
    where little has moved, sorts in a fraction of the comparisons (at 110,000 jobs about
    0.2 s instead of 0.4-0.6 s: measured)."""
    by_id = dict(zip(map(_job_id, jobs), jobs))
    if len(by_id) != len(jobs):
        return list(jobs)
    out = list(filter(None, map(by_id.pop, job_ids, repeat(None))))  # a Job is always true
    out.extend(by_id.values())
    return out
