"""How the engine orders jobs: a *ranker* per policy name (pure functions of job state and now).

A ranker has ``name``, ``discipline`` (``strict`` | ``firstfit`` | ``backfill`` | ``preemptive``),
``static`` (the key never changes while a job waits — lets the engine keep a sorted queue),
``key(sj, now)`` (smaller runs first; ends in a deterministic tie-break: submit time, trace row)
and ``next_change(sj, now)`` (the next time a *running* job's key can change, e.g. a LAS
threshold crossing; the engine schedules a pass then — no per-second ticks).

The simulator's fast-path keys for the policy names below are written against :class:`SimJob`
(no object copies per event). Any other name is looked up in the policy core
(``slurm_dl.policy.get_policy``) and wrapped by :class:`PolicyRanker`.
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .state import SimJob

INF = math.inf
TIRESIAS_THRESHOLDS = (3250.0, 7200.0, 18000.0)
EPS_GPU_S = 1e-3  # attained service within this of a threshold counts as past it (float safety)


class Ranker:
    name = "base"
    discipline = "strict"
    static = True
    oracle = False

    def key(self, sj: SimJob, now: float) -> tuple:
        raise NotImplementedError

    def next_change(self, sj: SimJob, now: float) -> float | None:
        return None

    def isolated_copy(self) -> "Ranker":
        return self


class Fifo(Ranker):
    """Submit order, trace row order on ties."""

    def __init__(self, discipline: str = "strict", name: str = "fifo"):
        self.discipline = discipline
        self.name = name

    def key(self, sj, now):
        return (sj.submit, sj.seq)


class Sjf(Ranker):
    """Oracle: shortest trace duration first, non-preemptive (simulator only)."""

    name = "sjf"
    oracle = True

    def key(self, sj, now):
        return (sj.duration, sj.submit, sj.seq)


class Srtf(Ranker):
    """Oracle: least remaining work first; pending before running on ties (Helios)."""

    name = "srtf"
    discipline = "preemptive"
    static = False
    pending_static = True
    oracle = True

    def key(self, sj, now):
        return (sj.remaining_at(now), 1 if sj.running else 0, sj.submit, sj.seq)


@dataclass
class Las(Ranker):
    """Tiresias 2D-LAS: queue k = number of thresholds ≤ attained GPU-seconds; FIFO within a queue.

    ``starvation``: a waiting job whose wait exceeds S × its executed time (and at least
    ``S × 60`` s) is promoted to queue 0 (Tiresias's guard).
    """

    thresholds: Sequence[float] = TIRESIAS_THRESHOLDS
    starvation: float | None = None
    name: str = "las"
    discipline: str = "preemptive"
    static: bool = False
    running_key_cached: bool = True

    @property
    def pending_static(self) -> bool:
        return not self.starvation

    def level(self, attained: float) -> int:
        return bisect.bisect_right(self.thresholds, attained + EPS_GPU_S)

    def key(self, sj, now):
        q = self.level(sj.attained(now))
        if self.starvation and not sj.running and q:
            if now - sj.pend_since > self.starvation * max(sj.executed0, 60.0):
                q = 0
        return (q, sj.submit, sj.seq)

    def next_change(self, sj, now):
        a = sj.attained(now)
        i = bisect.bisect_right(self.thresholds, a + EPS_GPU_S)
        if i >= len(self.thresholds):
            return None
        return now + (self.thresholds[i] - a) / sj.gpus


def load_prior(path: str | Path | None) -> list[float]:
    """GPU-second samples (a CSV with a ``duration`` column, e.g. tiresias/yarn-gput1000.csv)."""
    if path is None:
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return sorted(float(r["duration"]) for r in csv.DictReader(fh) if r.get("duration"))


def gittins_index(samples: Sequence[float], attained: float, quanta: Sequence[float]) -> float:
    """Gittins index at ``attained`` for service-time ``samples``: max over quanta Δ of
    P(S ≤ a+Δ | S > a) / E[min(S, a+Δ) − a | S > a]. Higher = run first."""
    alive = [s for s in samples if s > attained]
    if not alive:
        return INF
    best = 0.0
    n = len(alive)
    for d in quanta:
        lim = attained + d
        done = sum(1 for s in alive if s <= lim)
        spent = sum(min(s, lim) - attained for s in alive)
        if spent > 0:
            best = max(best, (done / n) / (spent / n))
    return best


@dataclass
class Gittins(Ranker):
    """Gittins index over a GPU-time prior, evaluated at bin edges of attained service.

    Bins are the prior's quantiles (``bins`` of them); the index is constant inside a bin, so a
    running job's key changes only when it crosses an edge (scheduled as an event)."""

    samples: Sequence[float] = ()
    bins: int = 32
    name: str = "gittins"
    discipline: str = "preemptive"
    static: bool = False
    pending_static: bool = True
    running_key_cached: bool = True
    edges: list[float] = field(default_factory=list)
    index: list[float] = field(default_factory=list)

    def __post_init__(self):
        s = sorted(self.samples) or [3600.0]
        qs = sorted({s[min(len(s) - 1, int(len(s) * i / self.bins))] for i in range(1, self.bins)})
        self.edges = qs
        quanta = sorted({max(1.0, e) for e in qs} | {s[-1]})
        starts = [0.0] + qs
        self.index = [gittins_index(s, a, [q - a for q in quanta if q > a] or [1.0]) for a in starts]

    def key(self, sj, now):
        b = bisect.bisect_right(self.edges, sj.attained(now) + EPS_GPU_S)
        return (-self.index[b], sj.submit, sj.seq)

    def next_change(self, sj, now):
        a = sj.attained(now)
        i = bisect.bisect_right(self.edges, a + EPS_GPU_S)
        if i >= len(self.edges):
            return None
        return now + (self.edges[i] - a) / sj.gpus


@dataclass
class DeadlineLas(Ranker):
    """Deadline boost by slack, then LAS: a strict-deadline job whose slack (deadline − now −
    remaining *time limit estimate*) is below ``boost_s`` jumps ahead, earliest deadline first;
    a job whose deadline can no longer be met drops behind everyone (admission of the hopeless).

    The remaining-time estimate is the job's time limit when set, else ``limit_factor`` × its
    trace duration (a user-declared limit)."""

    las: Las = field(default_factory=Las)
    boost_s: float = 3600.0
    limit_factor: float = 1.0
    name: str = "deadline-las"
    discipline: str = "preemptive"
    static: bool = False

    def _est_left(self, sj: SimJob, now: float) -> float:
        limit = sj.job.time_limit if sj.job.time_limit else self.limit_factor * sj.duration
        return max(0.0, limit - sj.executed(now))

    def key(self, sj, now):
        base = self.las.key(sj, now)
        if sj.deadline is None:
            return (1, 0.0) + base
        slack = sj.deadline - now - self._est_left(sj, now)
        if slack < 0:
            return (2, 0.0) + base
        if slack <= self.boost_s:
            return (0, sj.deadline) + base
        return (1, 0.0) + base

    def next_change(self, sj, now):
        t = self.las.next_change(sj, now)
        if sj.deadline is not None:
            # slack shrinks only while waiting; for a running job it is constant — nothing to add.
            pass
        return t


@dataclass
class FairShareLas(Ranker):
    """Fair share between accounts on top of LAS: within a LAS queue, the account with the least
    attained GPU-time per share (running and finished work, decayed with ``half_life_s``) first.
    The engine feeds ``usage`` (account → GPU-seconds); shares default to equal."""

    las: Las = field(default_factory=Las)
    shares: dict[str, float] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    weight: float = 1.0
    name: str = "fairshare"
    discipline: str = "preemptive"
    static: bool = False
    needs_usage: bool = True

    def key(self, sj, now):
        q, submit, seq = self.las.key(sj, now)
        u = self.usage.get(sj.account, 0.0) / self.shares.get(sj.account, 1.0)
        return (q, round(u / 3600.0 * self.weight), submit, seq)

    def next_change(self, sj, now):
        return self.las.next_change(sj, now)

    def isolated_copy(self):
        return FairShareLas(las=self.las, shares=self.shares, weight=self.weight, name=self.name)


class PolicyRanker(Ranker):
    """Any :class:`slurm_dl.policy.base.PriorityPolicy` from the policy core, on model Jobs."""

    def __init__(self, policy: Any, ctx: Any):
        self.policy = policy
        self.ctx = ctx
        self.name = policy.name
        self.oracle = getattr(policy, "oracle", False)
        self.discipline = getattr(policy, "discipline", "preemptive" if policy.preemptive else "strict")
        self.static = False

    def key(self, sj, now):
        self.ctx.now = now
        return (self.policy.key(sj.sync_job(now), self.ctx), sj.seq)

    def next_change(self, sj, now):
        fn = getattr(self.policy, "next_key_change", None)
        if fn is None:
            return None
        self.ctx.now = now
        return fn(sj.sync_job(now), self.ctx)


BUILTIN = ("fifo", "fifo-firstfit", "fifo-backfill", "sjf", "srtf", "las", "las-tiresias", "gittins",
           "deadline-las", "fairshare")


def make_ranker(name: str, *, las_thresholds: Sequence[float] | None = None, starvation: float | None = None,
                prior: Sequence[float] = (), gittins_bins: int = 32, boost_s: float = 3600.0,
                shares: dict[str, float] | None = None, config: Any = None) -> Ranker:
    """A ranker for a policy name; raises ValueError naming the allowed names."""
    thr = tuple(las_thresholds) if las_thresholds else TIRESIAS_THRESHOLDS
    if name == "fifo":
        return Fifo("strict")
    if name == "fifo-firstfit":
        return Fifo("firstfit", name)
    if name == "fifo-backfill":
        return Fifo("backfill", name)
    if name == "sjf":
        return Sjf()
    if name == "srtf":
        return Srtf()
    if name == "las":
        return Las(thr, starvation)
    if name == "las-tiresias":
        return Las(TIRESIAS_THRESHOLDS, None, name="las-tiresias")
    if name == "gittins":
        return Gittins(prior, gittins_bins)
    if name == "deadline-las":
        return DeadlineLas(Las(thr, starvation), boost_s)
    if name == "fairshare":
        return FairShareLas(Las(thr, starvation), dict(shares or {}))
    try:
        from ..policy import get_policy  # the policy core's registry, when present
        from ..policy.base import PolicyContext
    except ImportError:
        get_policy = None
    if get_policy is not None:
        try:
            pol = get_policy(name, config)
        except (KeyError, ValueError):
            pol = None
        if pol is not None:
            return PolicyRanker(pol, PolicyContext(now=0.0, config=config))
    raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(BUILTIN)}")
