"""How the engine orders jobs: a thin adapter over the policy core (``slurm_dl.core.policy``).

Every policy name is built by :func:`slurm_dl.core.policy.get_policy` — the same objects the
prioritizer daemon uses — and wrapped in a :class:`PolicyRanker`. The engine keeps each
:class:`SimJob`'s model ``Job`` current (state, start time, attained GPU-seconds, executed
seconds); the ranker copies the running figures up to ``now`` and calls ``policy.key`` /
``policy.next_key_change`` with a :class:`PolicyContext` whose ledger (:class:`SimLedger`)
holds what the daemon's ledger would: decayed usage per account (fair share) and the
finished-job history (Gittins, QSSF).

What the adapter adds is only what lets the engine go fast, read off the policy's known
behaviour (never a second copy of it):

* ``static``          — the key never changes (FIFO, SJF): the engine keeps a sorted queue;
* ``pending_static``  — a waiting job's key is constant (SRTF, LAS without starvation guard,
                        Gittins between history checkpoints): sorted pending queue;
* ``running_key_cached`` — a running job's key changes only at its ``next_key_change``
                        (LAS, Gittins): the engine caches it between those events;
* ``epoch()``         — changes when every key may have changed at once (Gittins' table is
                        rebuilt as the history grows): the engine re-keys then;
* ``pending_wakes``   — waiting jobs' keys change on their own (starvation guard, deadline
                        boost): the engine schedules their ``next_key_change`` too;
* ``pending_piecewise`` — … and only then (LAS with the starvation guard; ``combined`` of LAS,
                        deadline, class and FIFO): the engine keeps the pending queue sorted and
                        moves a job when its wake-up fires, instead of re-keying every job at
                        every event.

With a site config, a preemptive replay keeps the prioritizer's ``[preemption] hysteresis``: a
waiting job takes a running job's GPUs only when its score beats the victim's by that margin
(the engine's passes apply it, see :mod:`..engine.preempt`). With a site config, a running job
the prioritizer may not preempt (it has run less than
``[preemption] min_runtime_seconds`` in its current run, or was restarted ``max_restarts``
times) gets a *pinned* key that outranks every other key, so no preemptive pass takes it as a
victim; a pin for the minimum run time lifts at its end (the key's next change). The lease
decision gets the same rules (a lease at least the minimum run time; its own restart cap).
A job the prioritizer never preempts (it did not opt in, or its class may not be preempted:
:func:`~slurm_dl.core.preemption.resume_kind`) is pinned for its whole run, config or not
(:meth:`PolicyRanker.keep_unresumable`, which the engine calls with the cluster's jobs); the
lease decision asks the same question of each victim itself.
"""

from __future__ import annotations

import copy
import csv
import math
from pathlib import Path
from typing import Any, Sequence

from ...core.config import PrioritizerConfig
from ...core.preemption import RESUME_NEVER, resume_kind
from ...core.policy import PolicyContext, get_policy, policy_names
from ...core.policy.combined import CombinedPolicy
from ...core.policy.admission import DeadlineAdmission
from ...core.policy.deadline import DEMOTED_TAG, SOFT_FROM_TAG, DeadlinePolicy
from ...core.policy.fairshare import FairSharePolicy
from ...core.policy.fifo import FifoPolicy
from ...core.policy.gittins import GittinsPolicy, history_checkpoint
from ...core.policy.history import job_batch
from ...core.policy.job_class import ClassPolicy
from ...core.policy.las import LasPolicy
from ...core.policy.oracle import SjfPolicy, SrtfPolicy
from ...core.policy.qssf import QssfPolicy
from .lease import LeaseRanking
from .ledger import LazySimLedger, SimLedger  # noqa: F401 - the ranker's ledgers
from .typed import ChargedRanking
from ..engine.state import SimJob

INF = math.inf

# Simulator names that are a core policy with fixed arguments (not a registry entry of their own).
ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "deadline-las": ("combined", {"tiers": [["deadline"], ["las"]]}),
}


# Policies whose keys are piecewise constant in time, changing only at ``next_key_change``.
_PIECEWISE = (LasPolicy, DeadlinePolicy, FifoPolicy, ClassPolicy)
_GROUPABLE = (LasPolicy, DeadlinePolicy, ClassPolicy, FairSharePolicy)


def _components(policy: Any) -> list:
    return list(policy.components.values()) if isinstance(policy, CombinedPolicy) else [policy]


def replay_discipline(discipline: str, config: Any) -> str:
    """How the replay applies a policy's order under ``config``. A site that turned preemption off
    (``[preemption] enabled = false``) runs the prioritizer as a queue order only: Slurm's
    backfill starts jobs in that order and no running job is ever stopped, so a preemptive
    policy (LAS, Gittins, lease fair share) is replayed as that order with backfill (what
    ``simulate --slurm-backfill`` does for every policy)."""
    pre = getattr(config, "preemption", None)
    if pre is not None and not pre.enabled and discipline in ("preemptive", "lease"):
        return "backfill"
    return discipline


class _NoScore:
    """Scores 0.0 (the fair-share part of a per-job key, whose weight there is 0)."""

    @staticmethod
    def score(job, ctx) -> float:
        return 0.0


_NO_SCORE = _NoScore()


def _splicer(i: int, n: int):
    """``splice(lk, t)``: the tuple ``lk`` (of length ``n``) with item ``i`` replaced by
    ``-(-lk[i] + t)``, unpacked by name (several times faster than slicing and joining)."""
    names = [f"k{j}" for j in range(n)]
    out = names[:i] + [f"-(-k{i} + t)"] + names[i + 1 :]
    src = f"def splice(lk, t):\n    {', '.join(names)}, = lk\n    return ({', '.join(out)},)\n"
    scope: dict = {}
    exec(src, scope)  # noqa: S102 - a fixed template over generated names
    return scope["splice"]


class PolicyRanker(ChargedRanking, LeaseRanking):
    """One core policy object as the engine's ranker (see the module docstring)."""

    def __init__(
        self, policy: Any, name: str | None = None, config: Any = None, total_gpus: int = 0
    ):
        self.policy = policy
        self.name = name or policy.name
        self._discipline = replay_discipline(policy.discipline, config)
        self.oracle = getattr(policy, "oracle", False)
        # Gittins and QSSF learn from finished jobs: they read the history at every key
        self.ledger = (
            SimLedger
            if any(isinstance(p, (GittinsPolicy, QssfPolicy)) for p in _components(policy))
            else LazySimLedger
        ).from_config(config)
        self.ctx = PolicyContext(now=0.0, ledger=self.ledger, config=config, total_gpus=total_gpus)
        self._charged = False  # GPU types: service charged at type speed (use_charges)
        self.config = config
        pre = getattr(config, "preemption", None)
        # (minimum run time, restart cap) of a running job that may be a victim (see _pinned);
        # the lease decision applies both itself (LeaseSettings: the cap, a lease at least the
        # minimum run time)
        self._pin = None
        # a waiting job takes a running job's GPUs only when its score beats the victim's by
        # this margin (scores are ranks: see the engine's preemptive passes)
        self.hysteresis = 0.0
        if pre is not None and self.discipline == "preemptive":
            self._pin = (pre.min_runtime_seconds, pre.max_restarts)
            self.hysteresis = pre.hysteresis
        self._never: frozenset[int] = frozenset()  # ids of jobs never preempted (keep_unresumable)
        self.restart_s: float | None = None  # the engine's restart cost (the lease excludes it)
        self._lease_keys: dict[int, tuple] = {}
        self._run_keys: dict[int, tuple] = {}  # running jobs' lease keys (see lease_moves)
        self._node_sizes: tuple = (
            None,
            {},
        )  # ((nodes, GPUs per node), node -> GPUs) for lease_moves
        # a waiting job's place in the lease fill order changes only with its account's
        # standing (no starvation guard): the engine keeps the waiting jobs bucketed
        self.lease_static_pending = (
            policy.discipline == "lease"
            and getattr(getattr(policy, "las", None), "starvation_factor", 0) is None
        )
        # the lease decision runs at most this often (sim seconds): the daemon's cycle (the
        # site's prioritizer interval, 5 s by default). A slower cadence is no model of the
        # daemon: an account's job of seconds that waits for the next decision is what its
        # finish-time fairness measures
        self.decide_every_s = (
            config.prioritizer if config is not None else PrioritizerConfig()
        ).interval_seconds
        t = type(policy)
        self.static = t in (FifoPolicy, SjfPolicy) or issubclass(t, (FifoPolicy, SjfPolicy))
        comps = _components(policy)
        starving = any(isinstance(p, LasPolicy) and p.starvation_factor is not None for p in comps)
        self.pending_static = self.static or (
            not isinstance(policy, CombinedPolicy)
            and (
                isinstance(policy, (SrtfPolicy, GittinsPolicy))
                or (isinstance(policy, LasPolicy) and not starving)
            )
        )
        self.pending_piecewise = not self.pending_static and all(
            isinstance(p, _PIECEWISE) for p in comps
        )
        self.running_key_cached = (
            isinstance(policy, (LasPolicy, GittinsPolicy)) or self.pending_piecewise
        )
        self.pending_wakes = not self.pending_static
        fs = [p for p in comps if isinstance(p, FairSharePolicy)]
        self.needs_usage = bool(fs)
        self.gittins = isinstance(policy, GittinsPolicy)
        self._steps: dict = {}  # Gittins: per SimJob, its step function (see key_and_next)
        self._steps_version = -1
        # Gittins with a batch key learns a batch's finished jobs at once (not at the history
        # checkpoints): the keys of the batch's waiting and running jobs change when one of its
        # jobs finishes while others are still in the cluster; the engine asks ``touched`` for
        # them after the finishes of an event time and re-keys them
        self._batches: dict[str, dict[int, SimJob]] | None = (
            {} if self.gittins and policy.fresh_batches else None
        )
        self._moved: dict[str, None] = {}
        if self._batches is None:
            self.touched = None
        # fair share alone orders by (-factor(account), submit, id): the engine sorts with one
        # factor per account instead of one key call per job (same order, far fewer calls)
        self.account_key = self._fair_share_key if type(policy) is FairSharePolicy else None
        self._key = policy.key
        self._next = policy.next_key_change
        self._key_next = policy.key_and_next_change
        self._starving = next(
            (
                p
                for p in comps
                if isinstance(p, LasPolicy)
                and p.starvation_factor is not None
                and p.tiebreak is not None
            ),
            None,
        )
        # per-account queues (see the engine): the key is the account's fair-share standing
        # combined with a per-job key that is piecewise constant; within one account the
        # standing is the same for every job, so the per-job key alone orders the account's
        # jobs. Only for components whose scores take a few discrete values (LAS queues,
        # deadline levels, class weights), so adding the account's factor cannot merge two
        # different per-job values into one float.
        self.grouped = (
            bool(fs)
            and all(isinstance(p, _GROUPABLE) for p in comps)
            and (type(policy) is FairSharePolicy or isinstance(policy, CombinedPolicy))
        )
        self._fs_cache: tuple = (None, None, {})  # (now, ledger revision, account -> term)
        self._fs = fs[0] if fs else None
        self._local_key = None
        if self.grouped and isinstance(policy, CombinedPolicy):
            self._setup_combined_groups(policy, fs[0])
        dl = next((p for p in comps if isinstance(p, DeadlinePolicy)), None)
        self.admission: DeadlineAdmission | None = None
        if dl is not None and dl.admission:
            self.admission = DeadlineAdmission(dl.admission_share, self._remaining)
            self._by_id: dict[int, SimJob] = {}
            self._best_effort_gpus = 0  # GPUs of live jobs submitted without a deadline

    def _remaining(self, j, now: float) -> float | None:
        """A committed job's remaining requested run time: its limit less what it has run."""
        if j.time_limit is None:
            return None
        return max(0.0, j.time_limit - self._by_id[j.job_id].executed(now))

    def arrive(self, sj: SimJob, now: float, total_gpus: int) -> None:
        """A job's first arrival: admission decides its deadline (the prioritizer's first cycle)."""
        if self._batches is not None:
            b = job_batch(sj.job)
            if b:
                self._batches.setdefault(b, {})[sj.seq] = sj
        if self.admission is None:
            return
        j = sj.job
        if j.deadline is None and not j.soft_deadlines:
            self._best_effort_gpus += j.num_gpus
            return
        self._by_id[j.job_id] = sj
        why = self.admission.decide(j, now, total_gpus, self._best_effort_gpus)
        if why is not None:
            j.tags = {**j.tags, DEMOTED_TAG: why}
        elif j.deadline is None:
            j.tags = {**j.tags, SOFT_FROM_TAG: repr(self.admission.admitted[j.job_id])}
        if why is not None or self.admission.admitted.get(j.job_id) is None:
            self._by_id.pop(j.job_id, None)

    def _sync(self, sj: SimJob, now: float):
        j = sj.job
        if sj.running:
            dt = now - sj.seg_start
            # rounded to a micro GPU-second so a threshold crossing scheduled by
            # next_key_change lands on (not just below) the threshold
            j.attained_gpu_s = round(sj.attained0 + sj.gpus * dt, 6)
            j.executed_s = sj.executed0 + dt
        self.ctx.now = now
        return j

    @property
    def discipline(self) -> str:
        return self._discipline

    @discipline.setter
    def discipline(self, value: str) -> None:
        """A replay that places the order without preempting (``simulate --slurm-backfill``) has
        no victims to keep: the pins, and their wake-ups, go with preemption."""
        self._discipline = value
        if value != "preemptive":
            self._pin = None
            self.hysteresis = 0.0

    def keep_unresumable(self, jobs: Sequence) -> None:
        """Pin, in a preemptive replay, every job of ``jobs`` the prioritizer would never preempt
        (see the module docstring): a what-if must not take GPUs from work that cannot resume."""
        if self.discipline != "preemptive":
            return
        self._never = frozenset(
            j.job_id for j in jobs if resume_kind(j, self.config)[0] == RESUME_NEVER
        )
        if self._never and self._pin is None:
            self._pin = (0.0, None)

    def _pinned(self, sj: SimJob, now: float) -> float | None:
        """For a running job the site's rules keep from being preempted now: when that ends
        (``INF``: not before it stops: it cannot resume, or it reached the restart cap); else
        ``None``."""
        if self._pin is None or not sj.running:
            return None
        if sj.job.job_id in self._never:
            return INF
        if self._pin[1] is not None and sj.job.restarts >= self._pin[1]:
            return INF
        end = sj.seg_start + self._pin[0]
        return end if now < end else None

    @staticmethod
    def _pin_key(sj: SimJob) -> tuple:
        return (-INF, sj.job.job_id)

    def key(self, sj: SimJob, now: float) -> tuple:
        if self._pin is not None and self._pinned(sj, now) is not None:
            return self._pin_key(sj)
        return self._key(self._sync(sj, now), self.ctx)

    def key_and_next(self, sj: SimJob, now: float) -> tuple[tuple, float | None]:
        """``(key(sj, now), next_change(sj, now))`` in one call to the policy."""
        if self._pin is not None:
            until = self._pinned(sj, now)
            if until is not None:
                return self._pin_key(sj), (None if until == INF else until)
        if self._starving is not None:
            return self.key(sj, now), self.next_change(sj, now)
        if (
            self.gittins and self._batches is None
        ):  # the job's step function kept until the policy's table moves
            pol = self.policy
            j = self._sync(sj, now)
            pol._refresh(self.ctx)
            if pol.steps_version != self._steps_version:
                self._steps_version = pol.steps_version
                self._steps.clear()
            steps = self._steps.get(sj)
            if steps is None:
                steps = self._steps[sj] = pol._steps_of(j)
            k, t = pol.key_and_next_from(j, self.ctx, steps)
        else:
            k, t = self._key_next(self._sync(sj, now), self.ctx)
        if t is None:
            return k, None
        return k, (t if t > now else math.nextafter(now, INF))

    def next_change(self, sj: SimJob, now: float) -> float | None:
        if self._pin is not None:
            until = self._pinned(sj, now)
            if until is not None:
                return None if until == INF else until
        if sj.running and self._starving is not None and sj.executed0 == 0.0:
            now = math.nextafter(now, INF)  # see group_key: the lapse of that promotion
        j = self._sync(sj, now)
        t = self._next(j, self.ctx)
        if self._starving is not None and j.pending and j.executed_s > 0.0:
            # a waiting job already in queue 0 changes key too when the guard lifts it (its
            # tiebreak): the policy announces only promotions that change the queue
            las = self._starving
            if not las.promoted(j, now):
                lift = now + (
                    las.starvation_factor * j.executed_s - (now - j.submit_time - j.executed_s)
                )
                t = lift if t is None else min(t, lift)
        if t is None:
            return None
        return t if t > now else math.nextafter(now, INF)

    def _setup_combined_groups(self, policy: CombinedPolicy, fs: FairSharePolicy) -> None:
        """The combined key with the fair-share weight set to 0 is the per-job key: its
        fair-share tier holds ``-S`` (the other components' sum, exactly: ``x + 0.0 == x``),
        and the real value is ``-(S + w × factor)``, the same float operations as the policy's
        own sum when fair share is its tier's last term (or one of two). Otherwise the engine
        keeps the per-job path."""
        tier = next(
            i for i, parts in enumerate(policy._tier_parts) if any(p is fs for _, p in parts)
        )
        parts = policy._tier_parts[tier]
        if not (parts[-1][1] is fs or len(parts) == 2):
            self.grouped = False
            return
        local = copy.copy(policy)
        # weight 0 times the factor (a finite positive number) is 0.0, what the stand-in
        # scores: the same sum, without reading the ledger for every per-job key
        local._tier_parts = [
            [(0.0, _NO_SCORE) if p is fs else (w, p) for w, p in ps] for ps in policy._tier_parts
        ]
        local._compile()
        self._local_key = local.key
        self._fs_weight = next(w for w, p in parts if p is fs)
        self._fs_tier = tier
        self._fs_index: int | None = None  # position of that tier's value in the key tuple
        self._splice = None  # builds the real key from a per-job key and its account's term

    def group_key(self, sj: SimJob, now: float) -> tuple:
        """The job's key without its account's fair-share standing (grouped rankers)."""
        if self._pin is not None and self._pinned(sj, now) is not None:
            return self._pin_key(sj)
        if self._local_key is None:  # fair share alone: (factor, submit, id)
            return (sj.job.submit_time, sj.job.job_id)
        if sj.running and self._starving is not None and sj.executed0 == 0.0:
            # a job starting its first run is not "promoted" at the instant it starts (it has
            # executed nothing) but is an instant later, when its key is next read: cache that
            now = math.nextafter(now, INF)
        j = self._sync(sj, now)
        if self._fs_index is None:
            n = 0
            for tbs in self.policy._tier_tiebreaks[: self._fs_tier]:
                n += 1 + sum(len(tb(j, self.ctx)) for tb in tbs)
            self._fs_index = n
            k = self._local_key(j, self.ctx)
            self._splice = _splicer(n, len(k))
            return k
        return self._local_key(j, self.ctx)

    def _terms(self, now: float) -> dict:
        """Per account, what its fair-share standing adds to a per-job key (grouped rankers):
        ``-factor`` (fair share alone) or ``weight × factor`` (combined); filled as read, and
        current while neither ``now`` nor the ledger changes."""
        rev = self.ledger.revision
        if self._fs_cache[0] != now or self._fs_cache[1] != rev:
            self._fs_cache = (now, rev, {})
        return self._fs_cache[2]

    def head_keyer(self, now: float):
        """``head_key`` at ``now`` as a one-argument function, valid while the ledger does not
        change (one pass over the queues)."""
        terms = self._terms(now)
        pinned = self._pin is not None
        self.ctx.now = now
        factor = self._fs.factors(self.ctx).get  # the factor: this, or 1.0
        if self._local_key is None:

            def hk(sj: SimJob) -> tuple:
                if pinned and sj.running and sj.static_key[0] == -INF:
                    return sj.static_key  # pinned (see _pinned)
                t = terms.get(sj.account)
                if t is None:  # -factor (_fair_share_key)
                    t = terms[sj.account] = -factor(sj.account, 1.0)
                return (t, sj.job.submit_time, sj.job.job_id)

            return hk
        splice = self._splice
        w = self._fs_weight

        def hk(sj: SimJob) -> tuple:
            if sj.running:
                lk = sj.static_key
                if pinned and lk[0] == -INF:
                    return lk  # pinned (see _pinned)
            else:
                lk = sj.pend_key
            t = terms.get(sj.account)
            if t is None:  # w × -(_fair_share_key): negating twice is exact
                t = terms[sj.account] = w * factor(sj.account, 1.0)
            return splice(lk, t)

        return hk

    def head_key(self, sj: SimJob, now: float) -> tuple:
        """The real key (what ``key`` returns) from the job's cached per-job key and its
        account's factor. Only for a job whose cached key is current (in the engine's queues)."""
        return self.head_keyer(now)(sj)

    def _fair_share_key(self, account: str, now: float) -> float:
        self.ctx.now = now
        return -self._fs.factor(account, self.ctx)

    def epoch(self) -> int:
        """Changes when all keys may have changed (Gittins' table rebuilt from more history)."""
        return history_checkpoint(len(self.ledger.history)) if self.gittins else 0

    def touched(self) -> list[SimJob]:
        """The live jobs whose keys changed since the last call, other than through ``epoch``:
        the jobs still in the cluster of each batch one of whose jobs finished."""
        moved, self._moved = self._moved, {}
        live = self._batches
        return [sj for b in moved if b in live for sj in live[b].values()]

    def finished(self, sj: SimJob) -> None:
        j = sj.job
        batch = job_batch(j)
        if self._batches is not None and batch:
            live = self._batches[batch]
            del live[sj.seq]
            if live:
                self._moved[batch] = None
            else:
                del self._batches[batch]
        if self.admission is not None:
            self.admission.forget(j.job_id)
            self._by_id.pop(j.job_id, None)
            if j.deadline is None and not j.soft_deadlines:
                self._best_effort_gpus -= j.num_gpus
        service = sj.gpus * sj.served0 if self._charged else sj.attained0
        self.ledger.add_history(
            service, j.user, j.name, j.account, j.num_gpus, j.partition, j.time_limit, batch
        )

    def charge(self, account: str, gpu_s: float, now: float) -> None:
        self.ledger.charge(account, gpu_s, now)

    def charge_running(self, gpus: dict[str, int], dt: float, now: float) -> None:
        """Charge every account ``gpus[account] × dt`` (its GPUs running for ``dt``)."""
        self.ledger.charge_running(gpus, dt, now)

    def isolated_copy(self) -> "PolicyRanker":
        return self


Ranker = PolicyRanker


def load_prior(path: str | Path | None) -> list[float]:
    """GPU-second samples (a CSV with a ``duration`` column, e.g. tiresias/yarn-gput1000.csv)."""
    if path is None:
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return sorted(float(r["duration"]) for r in csv.DictReader(fh) if r.get("duration"))


def sim_policy_names() -> list[str]:
    return policy_names() + list(ALIASES)


def policy_overrides(
    name: str,
    *,
    las_thresholds: Sequence[float] | None = None,
    starvation: float | None = None,
    prior: Sequence[float] = (),
    gittins_bins: int | None = None,
    boost_s: float | None = None,
    shares: dict[str, float] | None = None,
    admission: bool | None = None,
    admission_share: float | None = None,
    soft_boost: str | None = None,
    lease_s: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """The core registry name and ``get_policy`` overrides for a simulator policy name and the
    simulator's options (only options that apply to that policy; ``None`` = from the config)."""
    las: dict[str, Any] = {}
    if las_thresholds:
        las["thresholds_gpu_s"] = list(las_thresholds)
    if starvation is not None:
        las["starvation_factor"] = starvation or None
    deadline: dict[str, Any] = {"boost_slack_s": boost_s} if boost_s else {}
    if admission is not None:
        deadline["admission"] = admission
    if admission_share is not None:
        deadline["admission_share"] = admission_share
    if soft_boost is not None:
        deadline["soft_boost"] = soft_boost
    lease = {"lease_seconds": lease_s} if lease_s is not None else {}
    if name in ALIASES:
        core, fixed = ALIASES[name]
        return core, {**fixed, "component_overrides": {"las": las, "deadline": deadline}}
    if name == "las":
        return name, las
    if name == "gittins":
        ov: dict[str, Any] = {"prior_samples": list(prior)} if prior else {}
        if gittins_bins is not None:
            ov["bins"] = gittins_bins
        return name, ov
    if name == "deadline":
        return name, deadline
    if name == "fairshare-queue":
        return name, ({"shares": dict(shares)} if shares else {})
    if name == "fairshare":
        ov = {"shares": dict(shares)} if shares else {}
        if las_thresholds:
            ov["thresholds_gpu_s"] = list(las_thresholds)
        return name, {**ov, **lease}
    return name, {}


def make_ranker(
    name: str, *, config: Any = None, total_gpus: int = 0, **options: Any
) -> PolicyRanker:
    """The core policy called ``name`` (with the simulator's options as overrides), wrapped.
    Raises ValueError naming the allowed names."""
    if name not in ALIASES and name not in policy_names():
        raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(sim_policy_names())}")
    core, overrides = policy_overrides(name, **options)
    return PolicyRanker(get_policy(core, config, **overrides), name, config, total_gpus)
