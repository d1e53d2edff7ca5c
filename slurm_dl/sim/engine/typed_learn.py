"""The aware type choice on learnt speeds (``simulate --speeds learned``): it chooses by what
the prioritizer would know of each job's speeds, not by the speeds the run times come from.

A job has two sets of rates (its speed on each node group over its speed on its fastest type):

* its **true** rates (``SimJob.rates``, from the replay's throughput model): how fast it runs;
* its **known** rates, from the prior (the site's per-type speeds and the matrix rows it has,
  :class:`~slurm_dl.core.throughput.ThroughputModel`) with what
  :meth:`~slurm_dl.core.throughput.ThroughputModel.learn` makes of the runs that finished by
  now: per user and job name, the median run time on each type (from ``min_samples`` runs on
  two types or more). The type choice, its "wait for a faster type" and the fair-share moves
  read these.

Each finished job adds the run the prioritizer's ledger records: (user, name, the type of its
last run, the seconds it ran in all, restarts included); the latest :data:`MAX_RUNS` are kept,
as in the ledger. A job's name is its own, else its model (a trace without job names, given a
model per job: a real user's job script is named after what it trains). The comparative
advantage of a type is a job's known rate there over the mean known rate there of the jobs
submitted so far, the means refreshed at most every :data:`MEANS_EVERY_S` of replay time.

Cheap on long traces: the jobs with the same user, name, prior row, groups allowed and
reference types share their rates and orders ("profiles"), and a finished run re-learns its
own (user, name) alone (:meth:`~slurm_dl.core.throughput.ThroughputModel.relearn`); only the
profiles of that name are worked out again, when a job of theirs is next placed.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from ...core.ledger import MAX_RUNS
from ...core.steering import comparative_order, declines
from ...core.throughput import RunRecord, ThroughputModel
from .fleet import NodeGroupSpec
from .typed import TypedPlacer
from .typed_jobs import rate_pool

MEANS_EVERY_S = 3600.0
"""The means of the known rates (comparative advantage) are refreshed at most this often."""


@dataclass(frozen=True, slots=True)
class Named:
    """What the throughput model reads of a job, with the name it is learnt under."""

    user: str
    name: str
    model: str | None
    num_gpus: int
    job_class: object


def named(job) -> Named:
    """``job`` as the throughput model learns it: its name, else its model."""
    return Named(job.user, job.name or job.model or "", job.model, job.num_gpus, job.job_class)


class LearnedSpeeds:
    """The throughput model the prioritizer would have now: ``prior`` and the latest ``keep``
    finished runs, re-learnt one (user, name) at a time as runs come and go."""

    def __init__(self, prior: ThroughputModel, keep: int = MAX_RUNS) -> None:
        self.prior = prior
        self.model = prior
        self.keep = keep
        self.window: deque[RunRecord] = deque()
        # (user, name) -> GPU type -> its run times in the window, oldest first
        self.times: dict[tuple[str, str], dict[str, deque[float]]] = {}

    def add(self, run: RunRecord) -> set[tuple[str, str]]:
        """Record a finished run; the (user, name) whose speedups changed."""
        rt = run.run_time_s
        if run.gpu_type not in self.prior.types or not (0 < rt < math.inf):
            return set()  # (the ledger keeps only runs on a known type that ran)
        self.window.append(run)
        key = (run.user, run.name)
        self.times.setdefault(key, {}).setdefault(run.gpu_type, deque()).append(float(rt))
        touched = {key}
        if len(self.window) > self.keep:
            old = self.window.popleft()
            key = (old.user, old.name)
            self.times[key][old.gpu_type].popleft()  # its oldest there is the window's oldest
            touched.add(key)
        changed = set()
        for key in touched:
            model = self.model.relearn(key[0], key[1], self.times[key])
            if model is not self.model:
                self.model = model
                changed.add(key)
        return changed


class LearningPlacer(TypedPlacer):
    """The aware choice's placer on known rates (see the module docstring); a job still runs
    at its true rate wherever it goes."""

    learns = True

    def __init__(
        self,
        groups: Sequence[NodeGroupSpec],
        model: ThroughputModel,
        prior: ThroughputModel,
        recorded: bool = False,
    ) -> None:
        super().__init__(groups, "aware", model, recorded)
        self.learnt = LearnedSpeeds(prior)
        self._means: dict[int, float] = {}
        self._means_at = -float("inf")

    def prepare(self, sims: list, ranker) -> None:
        super().prepare(sims, ranker)  # true rates, the groups each job may use
        index: dict[tuple, int] = {}
        self._pid = pid_of = [0] * (max((sj.seq for sj in sims), default=-1) + 1)
        self._views: list[Named] = []
        self._allowed: list[tuple[int, ...]] = []
        self._pools: list[tuple[str, ...]] = []
        by_name: dict[tuple[str, str], list[int]] = {}
        prior = self.learnt.prior
        for sj in sims:
            view = named(sj.job)
            allowed = tuple(sorted(self._order[sj.seq]))
            pool = tuple(rate_pool(sj.job, self, allowed))
            key = (view.user, view.name, prior.row_of(view), allowed, pool)
            p = index.get(key)
            if p is None:
                p = index[key] = len(self._views)
                self._views.append(view)
                self._allowed.append(allowed)
                self._pools.append(pool)
                by_name.setdefault((view.user, view.name), []).append(p)
            pid_of[sj.seq] = p
        self._by_name = by_name
        n = len(self._views)
        self._rates: list[tuple[float, ...]] = [()] * n
        self._orders: list[tuple[tuple[int, ...], tuple[int, ...]]] = [((), ())] * n
        self._stale = [True] * n  # rates and orders to work out again
        self._submitted = [0] * n  # jobs of each profile submitted so far

    # --- what the choice knows -------------------------------------------------------------
    def _known(self, p: int) -> tuple[float, ...]:
        sp = self.learnt.model.speeds(self._views[p])
        top = max(sp[t].value for t in self._pools[p])
        return tuple(sp[g.gpu_type].value / top for g in self.groups)

    def _refresh(self, p: int) -> None:
        rates = self._rates[p] = self._known(p)
        allowed = self._allowed[p]
        fastest = tuple(sorted(allowed, key=lambda g: (-rates[g], g)))
        order = tuple(
            comparative_order({g: rates[g] for g in allowed}, self._means, range(len(self.groups)))
        )
        self._orders[p] = (order, fastest)
        self._stale[p] = False

    def _profile(self, sj) -> int:
        p = self._pid[sj.seq]
        if self._stale[p]:
            self._refresh(p)
        return p

    def seen(self, sj) -> tuple[float, ...]:
        return self._rates[self._profile(sj)]

    def allowed(self, sj) -> tuple[int, ...]:
        return self._orders[self._profile(sj)][0]

    # --- the replay tells it ---------------------------------------------------------------
    def arrived(self, sj, now: float) -> None:
        """``sj`` was submitted (it counts in the means from the next refresh)."""
        self._submitted[self._pid[sj.seq]] += 1
        if now >= self._means_at + MEANS_EVERY_S:
            self._refresh_means(now)

    def ran(self, sj, seconds: float) -> None:
        super().ran(sj, seconds)
        self._last_type = self.groups[self.node_group[sj.alloc[0][0]]].gpu_type

    def finished(self, sj, now: float) -> None:
        """``sj`` finished at ``now`` (after the engine stopped it: its last run's type was
        just given to :meth:`ran`): its run is learnt from."""
        view = self._views[self._pid[sj.seq]]
        run = RunRecord(view.user, view.name, self._last_type, sj.executed0)
        for key in self.learnt.add(run):
            for p in self._by_name.get(key, ()):
                self._stale[p] = True

    def _refresh_means(self, now: float) -> None:
        n = len(self.groups)
        sums = [0.0] * n
        total = 0
        for p, k in enumerate(self._submitted):
            if k:
                if self._stale[p]:
                    self._refresh(p)
                total += k
                for g, r in enumerate(self._rates[p]):
                    sums[g] += k * r
        self._means = {g: s / max(1, total) or 1.0 for g, s in enumerate(sums)}
        self._means_at = now
        self._stale = [True] * len(self._stale)

    # --- placing (as TypedPlacer's, on the known rates) -------------------------------------
    def place(self, sj, forced: bool = False):
        gpus = sj.gpus
        if gpus > self.free_total:
            return None
        order, fastest = self._orders[self._profile(sj)]
        for g in order if self.crowded else fastest:
            alloc = self.place_in(g, gpus)
            if alloc is not None:
                return alloc
        return None

    def choose(self, sj, cap: list[int], free: list[int], strict: bool) -> int | None:
        gpus = sj.gpus
        crowded = self.crowded
        p = self._profile(sj)
        rates = self._rates[p]
        order = self._orders[p][0 if crowded else 1]
        for room in (free, cap):
            for g in order:
                if room[g] >= gpus and cap[g] >= gpus:
                    if strict and crowded and declines(rates[g], self._means[g]):
                        break
                    return g
        return None
