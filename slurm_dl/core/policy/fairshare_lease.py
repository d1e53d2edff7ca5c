"""Preemptive finish-time fair share (``fairshare``): accounts below their max-min fair share
of the GPUs get them back from accounts above it, through leases (see
:mod:`slurm_dl.core.fairness`, the decision the simulator and the prioritizer share).

Order: LAS queue first (the site's ``[policy.las]`` queues: short work first), then jobs of
accounts below their fair share (the account whose finish-time fairness estimate is worst
first), then the LAS key (submit time). Fairness itself comes from the lease moves. Within an account LAS also demotes: a waiting job in a lower LAS
queue may take the GPUs of a running job of its own account once that job's lease is over.
The queue-order-only variant is ``fairshare-queue``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..fairness import LeaseSettings, Standing, standings
from ..model import Job
from .base import PolicyContext, PriorityPolicy
from .las import LasPolicy


class FairShareLeasePolicy(PriorityPolicy):
    name = "fairshare"
    discipline = "lease"
    leases = True

    def __init__(
        self,
        config=None,
        *,
        shares: Mapping[str, float] | None = None,
        lease_seconds: float | None = None,
        hysteresis: float | None = None,
        restart_seconds: float | None = None,
        thresholds_gpu_s=None,
    ) -> None:
        ov: dict = {}
        if shares is not None:
            ov["shares"] = dict(shares)
        if lease_seconds is not None:
            ov["lease_s"] = float(lease_seconds)
        if hysteresis is not None:
            ov["hysteresis"] = float(hysteresis)
        if restart_seconds is not None:
            ov["restart_s"] = float(restart_seconds)
        self.settings = LeaseSettings.from_config(config, **ov)
        s = self.settings
        if (
            not s.lease_s >= 0
            or not 0 <= s.hysteresis < 1
            or any(not v > 0 for v in s.shares.values())
        ):
            raise ValueError(
                "fairshare: lease must be >= 0, hysteresis in [0, 1), every share positive"
            )
        self.las = LasPolicy(config, thresholds_gpu_s=thresholds_gpu_s)
        self.config = config

    def level(self, job: Job, ctx: PolicyContext) -> int:
        """The job's LAS queue (what within-account demotion compares): ``within_key(...)[0]``."""
        return self.las.queue(job, ctx)

    def within_key(self, job: Job, ctx: PolicyContext) -> tuple:
        """The within-account order: the LAS key, whose first item is :meth:`level`."""
        return self.las.key(job, ctx)

    def standings_of(self, jobs: Sequence[Job], ctx: PolicyContext) -> dict[str, Standing]:
        pending = [j for j in jobs if j.pending and not j.held]  # a held job asks for nothing now
        running = [j for j in jobs if j.running]
        total = ctx.total_gpus or sum(j.num_gpus for j in running)
        return standings(pending, running, total, ctx.now, self.settings)

    def fill_key(self, job: Job, st: Mapping[str, Standing], ctx: PolicyContext) -> tuple:
        """LAS queue first (short work first keeps the mean JCT near LAS's), then accounts below
        their fair share (worst finish-time fairness first), then the LAS key."""
        s = st.get(job.account)
        under = s is not None and s.held < s.fair
        k = self.las.key(job, ctx)
        return (k[0], (0, -s.rho) if under else (1, 0.0), k)

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        st = ctx.extra.get("fair_standings") or {}
        return self.fill_key(job, st, ctx)

    def order(self, jobs: Sequence[Job], ctx: PolicyContext) -> list[Job]:
        st = self.standings_of(jobs, ctx)
        return sorted(jobs, key=lambda j: self.fill_key(j, st, ctx))

    def next_key_change(self, job: Job, ctx: PolicyContext) -> float | None:
        return self.las.next_key_change(job, ctx)
