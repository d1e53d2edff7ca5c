"""Fair share between accounts: shares from the site config, usage (GPU-seconds) from the
ledger, decayed with the ledger's half-life (:attr:`~slurm_dl.core.ledger.Ledger.half_life_s`).

Like Slurm's classic fair-share factor: ``F = 2^(-(u/U) / (s/S))`` where ``u/U`` is the
account's fraction of all decayed usage and ``s/S`` its fraction of the shares (accounts in
the config and in the ledger; unknown accounts get ``default_share``). Accounts below their
share score near 1, accounts far above it near 0. Highest factor first, then submit time.
Non-preemptive (``firstfit``). This is ``fairshare-queue`` (and the ``fairshare`` component of
``combined``); the policy ``fairshare`` also preempts (:mod:`.fairshare_lease`).
"""

from __future__ import annotations

import math
from typing import Mapping

from ..model import Job
from .base import PolicyContext, PriorityPolicy, policy_settings


class FairSharePolicy(PriorityPolicy):
    name = "fairshare-queue"
    discipline = "firstfit"

    def __init__(
        self,
        config=None,
        *,
        shares: Mapping[str, float] | None = None,
        default_share: float | None = None,
    ) -> None:
        fs = policy_settings(config).fairshare
        self.shares = dict(shares if shares is not None else fs.shares)
        self.default_share = float(default_share if default_share is not None else fs.default_share)
        if not self.default_share > 0 or any(not s > 0 for s in self.shares.values()):
            raise ValueError("fairshare: default_share and every share must be positive")
        self.config = config
        self._cache_led = None  # the ledger, its revision and the time the cache is for
        self._cache_rev = -1
        self._cache_now = None
        self._usage: dict[str, float] = {}
        self._factors: dict[str, float] | None = None
        self._total_usage = 0.0
        self._total_shares = sum(self.shares.values())

    def share(self, account: str) -> float:
        return self.shares.get(account, self.default_share)

    def _refresh(self, ctx: PolicyContext) -> None:
        led = ctx.ledger
        rev = led.revision if led is not None else 0
        if rev == self._cache_rev and ctx.now == self._cache_now and led is self._cache_led:
            return
        self._cache_led, self._cache_rev, self._cache_now = led, rev, ctx.now
        self._usage = led.usage_all(ctx.now) if led is not None else {}
        self._total_usage = sum(self._usage.values())
        extra = [a for a in self._usage if a not in self.shares]
        self._total_shares = sum(self.shares.values()) + self.default_share * len(extra)
        self._factors = None  # see factors()

    def factors(self, ctx: PolicyContext) -> dict[str, float]:
        """The factor of every account with usage in the ledger, computed once per ledger
        state and time; every other account's is 1.0 (it used nothing: ``2^-0``)."""
        self._refresh(ctx)
        table = self._factors
        if table is None:
            total = self._total_usage
            if total <= 0.0:
                table = {}
            else:  # an account with usage counts in _total_shares already
                shares, default, total_shares, pow_ = (
                    self.shares,
                    self.default_share,
                    self._total_shares,
                    math.pow,
                )
                table = {
                    a: pow_(2.0, -(u / total) / (shares.get(a, default) / total_shares))
                    for a, u in self._usage.items()
                }
            self._factors = table
        return table

    def factor(self, account: str, ctx: PolicyContext) -> float:
        """Slurm-like fair-share factor in (0, 1]; 1 = no recent usage."""
        return self.factors(ctx).get(account, 1.0)

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (-self.factor(job.account, ctx), job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        return self.factor(job.account, ctx)

    def bind_score(self, ctx: PolicyContext):
        cls = type(self)
        if any(
            getattr(cls, m) is not getattr(FairSharePolicy, m)
            for m in ("score", "factor", "factors")
        ):
            return None
        factor = self.factors(ctx).get  # the table for this ledger state and time
        return lambda job: factor(job.account, 1.0)
