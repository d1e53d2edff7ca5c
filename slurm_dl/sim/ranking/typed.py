"""The ranker on several GPU types: service charged at each type's speed (a mixin of
:class:`~slurm_dl.sim.ranking.ranker.PolicyRanker`; see :meth:`ChargedRanking.use_charges`)."""

from __future__ import annotations

import math

from ...core.policy.combined import CombinedPolicy
from ...core.policy.fairshare import FairSharePolicy
from ...core.policy.fairshare_lease import FairShareLeasePolicy
from ...core.policy.fifo import FifoPolicy
from ...core.policy.gittins import GittinsPolicy
from ...core.policy.job_class import ClassPolicy
from ...core.policy.las import LasPolicy
from ...core.policy.oracle import SjfPolicy, SrtfPolicy
from ...core.policy.qssf import QssfPolicy
from ..engine.lease import held_milli
from ..engine.state import SimJob

INF = math.inf
# Policies whose running keys change only with attained service (with no starvation guard).
_SERVICE_ONLY = (
    LasPolicy,
    GittinsPolicy,
    QssfPolicy,
    FairSharePolicy,
    FairShareLeasePolicy,
    FifoPolicy,
    SjfPolicy,
    SrtfPolicy,
    ClassPolicy,
)


class ChargedRanking:
    """What :class:`~slurm_dl.sim.ranking.ranker.PolicyRanker` does differently on GPU types."""

    _charged = False  # service charged at type speed (use_charges)

    def use_charges(self, held_unit: float = 1.0) -> None:
        """GPU types: a job is charged service at its type's speed (``SimJob.charge``), so the
        policy sees attained service and run time normalised by type speed (the engine keeps
        ``served0``, the charged seconds). A running job's key then changes ``charge`` times as
        fast as the policy assumes: its wake-ups are rescaled exactly where only service moves
        its key (LAS without the starvation guard, Gittins, QSSF, fair share), and otherwise
        only brought forward (never late; a slower charge then wakes it early, more often).
        Fair share with leases counts GPUs held at type speed over ``held_unit`` (the cluster's
        mean type speed)."""
        self._sync = self._sync_charged
        self.held_unit = held_unit
        pol = self.policy
        comps = list(pol.components.values()) if isinstance(pol, CombinedPolicy) else [pol]
        self._service_only = all(
            isinstance(p, _SERVICE_ONLY)
            and getattr(p, "starvation_factor", None) is None
            and getattr(getattr(p, "las", None), "starvation_factor", None) is None
            for p in comps
        )
        plain_key_next, plain_next = self.key_and_next, self.next_change

        def key_and_next(sj: SimJob, now: float):
            k, t = plain_key_next(sj, now)
            return k, self._rescale(sj, now, t)

        def next_change(sj: SimJob, now: float):
            return self._rescale(sj, now, plain_next(sj, now))

        self.key_and_next, self.next_change = key_and_next, next_change
        self._charged = True

    def _rescale(self, sj: SimJob, now: float, t: float | None) -> float | None:
        c = sj.charge
        if t is None or not sj.running or c == 1.0 or t == INF:
            return t
        if c > 1.0 or self._service_only:
            return max(math.nextafter(now, INF), now + (t - now) / c)
        return t

    def _sync_charged(self, sj: SimJob, now: float):
        """``_sync`` on GPU types: attained GPU-seconds and ``norm_executed_s`` at the type's
        speed, ``executed_s`` the run time (what the prioritizer's ledger keeps)."""
        j = sj.job
        if sj.running:
            dt = now - sj.seg_start
            s = sj.served0 + dt * sj.charge
            j.executed_s = sj.executed0 + dt
        else:
            s = sj.served0
            j.executed_s = sj.executed0
        j.attained_gpu_s = round(sj.gpus * s, 6)
        j.norm_executed_s = s
        self.ctx.now = now
        return j

    def _held_at_speed(self, st: dict, running: list) -> dict:
        """GPU types: each account's GPUs held counted at their type's speed over the cluster's
        mean (``held_unit``), so an account on slow GPUs stands below its fair share of the
        cluster's capacity (normalised fair share; the sum over all GPUs is unchanged)."""
        if not self._charged:
            return st
        held: dict[str, int] = {}
        for sj in running:
            held[sj.account] = held.get(sj.account, 0) + held_milli(sj, self.held_unit)
        return {a: s._replace(held=held.get(a, 0) / 1000) for a, s in st.items()}
