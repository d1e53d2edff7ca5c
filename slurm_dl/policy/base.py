"""The one interface every priority policy implements.

A policy is pure: given jobs, a :class:`PolicyContext` (``now``, the ledger, the site config,
cluster size) it returns an order (first = should run first) and scores in ``[0, 1]``
(higher = more urgent). The daemon maps scores onto SiteFactor levels; the simulator uses the
order; the combined policy sums weighted scores within tiers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from ..model import Job

if TYPE_CHECKING:
    from ..config import SiteConfig
    from ..ledger import Ledger


@dataclass(slots=True)
class PolicyContext:
    """Everything a policy may look at besides the jobs themselves."""

    now: float
    ledger: "Ledger | None" = None
    config: "SiteConfig | None" = None
    total_gpus: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class PriorityPolicy(ABC):
    """Orders or scores jobs. Subclasses set ``name`` and say whether they preempt.

    ``preemptive``: a running job may be displaced by a pending job that orders before it.
    ``oracle``: the policy reads ``Job.duration`` (true run time) — simulator only.
    """

    name: ClassVar[str]
    preemptive: ClassVar[bool] = False
    oracle: ClassVar[bool] = False

    @abstractmethod
    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        """Sort key; smaller runs first. Must end in a deterministic tie-break (submit, id)."""

    def order(self, jobs: Sequence[Job], ctx: PolicyContext) -> list[Job]:
        return sorted(jobs, key=lambda j: self.key(j, ctx))

    def scores(self, jobs: Sequence[Job], ctx: PolicyContext) -> dict[int, float]:
        """Urgency in [0, 1] per job id (1 = most urgent). Default: rank-based from ``order``."""
        ordered = self.order(jobs, ctx)
        n = len(ordered)
        if n == 0:
            return {}
        if n == 1:
            return {ordered[0].job_id: 1.0}
        return {j.job_id: 1.0 - i / (n - 1) for i, j in enumerate(ordered)}
