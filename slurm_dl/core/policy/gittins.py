"""Gittins index over a job-size distribution, discretised into bins (Tiresias' Discretised
Gittins / 2D-Gittins).

Job size S is in GPU-seconds; attained service ``a`` is ``Job.attained_gpu_s``. For a service
quantum Δ the index is

    G(a, Δ) = P(S - a ≤ Δ | S > a) / E[min(S - a, Δ) | S > a]

and the job with the **highest** index runs first. As in Tiresias the index is evaluated on a
grid of attained-service bins (bin edges at quantiles of the distribution) and held constant
within a bin, so a job's priority only changes when it crosses a bin edge. By default the index
is the Gittins index proper, the supremum over Δ, with Δ taken on the bin grid (every quantum
that ends on a later bin edge or at the largest known size). ``delta_gpu_s="bin"`` uses one bin
as the quantum (Δ = next edge − a); a number fixes Δ in GPU-seconds (with a fixed Δ smaller than
the gaps between tail quantiles the tail bins get index 0 and fall back to FIFO).
``edges_gpu_s`` fixes the bin edges (e.g. the LAS thresholds: Gittins-ordered queues as in
Tiresias' 2D-Gittins).

The distribution is the prior (Tiresias' ``yarn-gput1000`` sample, shipped as percentiles in
:mod:`slurm_dl.core.policy.tiresias_prior`, or caller-given samples) weighted by ``prior_weight`` (1.0 =
the prior counts as its 1,001 samples; the default 0.1, as about 100) plus every finished job in
``ledger.history``. The prior is another cluster's sample: at full weight it outweighs a small
cluster's own history for months, and where that cluster's jobs are 100× longer (heavy Philly's
8-GPU VCs) the index falls at the prior's typical sizes and new jobs preempt old ones all the
time, which in an overloaded cluster shares the GPUs round-robin. The table
is rebuilt as the history grows, at lengths fixed in advance (×1.1 steps past 64 jobs), so the
result is a pure function of the history and cheap to keep current.

With ``history_keys`` (a ladder of :mod:`slurm_dl.core.policy.history`) a job's distribution is
conditional on what is known of it: the finished jobs of the most specific key (user, job
name, GPU count, …) with at least ``min_jobs`` of them beyond the job's attained service. Its
index is then the Gittins index of those jobs' GPU-seconds, held constant between their values
(bins whose edges are the key's own samples); a job beyond every key's samples falls back to
the global table. The learnt view, like the table, moves only at the history checkpoints,
except the levels keyed on a job's batch (burst or job array), asked first: they learn every
finished job at once (a sibling's finish changes the keys of its batch's jobs alone; the
simulator re-keys those).

Restart-aware hold (``hold_factor`` H, default from the site config): a *running* job's key
uses H × its index, so a waiting job takes its GPUs only with an index at least H times higher.
Every preemption costs the victim a restart, and the discretised index moves up and down
between neighbouring bins (an empirical distribution is lumpy): with H = 1, jobs of a burst pass
the GPUs round and round at each bin edge, each pass a restart. Waiting jobs are ordered by the
plain index, so H only decides when a running job is stopped. H = 1 is plain Gittins.
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from operator import mul
from typing import Sequence

from .tiresias_prior import PERCENTILES_GPU_S, SAMPLE_COUNT
from ..model import Job
from .base import PolicyContext, PriorityPolicy, policy_settings
from .history import BATCH_TAG, HistoryLearner, HistoryView, job_features, split_batch


EDGE_TOLERANCE_GPU_S = 1e-6
"""Attained service this close below a bin edge counts as past it: service adds up in floating
point, so a job woken at an edge can sit a hair below it and would be woken again and again."""


def gittins_index(
    values: Sequence[float], weights: Sequence[float], a: float, delta: float
) -> float:
    """G(a, Δ) for the weighted empirical distribution (``values`` sorted ascending)."""
    return _Dist(values, weights).index(a, delta)


_MISS = object()


class _Dist:
    __slots__ = ("v", "W", "WV")

    def __init__(self, values: Sequence[float], weights: Sequence[float]) -> None:
        self.v = list(values)
        # running sums, added left to right (the same floats as a loop of appends)
        self.W = list(accumulate(weights, initial=0.0))
        self.WV = list(accumulate(map(mul, weights, values), initial=0.0))

    def index(self, a: float, delta: float) -> float:
        i = bisect.bisect_right(self.v, a)
        total = self.W[-1] - self.W[i]
        if total <= 0.0:
            return 0.0
        j = bisect.bisect_right(self.v, a + delta)
        done = self.W[j] - self.W[i]
        expected = (self.WV[j] - self.WV[i]) - a * done + delta * (self.W[-1] - self.W[j])
        return done / expected if expected > 0.0 else 0.0

    def quantile(self, q: float) -> float:
        target = q * self.W[-1]
        k = bisect.bisect_left(self.W, target, 1)
        return self.v[min(k, len(self.v)) - 1]


_CHECKPOINTS = [64]  # 64, 70, 77, … (×1.1), extended as needed


def history_checkpoint(n: int) -> int:
    """How much of a history of length ``n`` the table uses: all of it up to 64, then the
    largest of 64, 70, 77, … (×1.1) not above ``n``."""
    if n <= 64:
        return n
    cps = _CHECKPOINTS
    while cps[-1] <= n:
        cps.append(max(cps[-1] + 1, int(cps[-1] * 1.1)))
    return cps[bisect.bisect_right(cps, n) - 1]


class GittinsPolicy(PriorityPolicy):
    name = "gittins"
    discipline = "preemptive"
    preemptive = True

    def __init__(
        self,
        config=None,
        *,
        delta_gpu_s: float | str | None = None,
        bins: int | None = None,
        prior_weight: float | None = None,
        prior_samples: Sequence[float] | None = None,
        edges_gpu_s: Sequence[float] | None = None,
        history_keys: str | Sequence[Sequence[str]] | None = "config",
        min_jobs: int | None = None,
        hold_factor: float | None = None,
        batch_min_jobs: int | None = None,
    ) -> None:
        g = policy_settings(config).gittins
        if history_keys == "config":
            history_keys = _config_default(g, "history_keys")
        if min_jobs is None:
            min_jobs = _config_default(g, "min_jobs")
        self._view: HistoryView | None = None
        self._bview: HistoryView | None = None
        if history_keys not in ("none", None):
            n, bn = int(min_jobs), batch_min_jobs
            HistoryLearner(
                history_keys, min_jobs=n, batch_min_jobs=bn
            )  # fail early on bad settings
            # the batch levels learn every finished job at once (a burst's siblings), the
            # others at the history checkpoints; the batch levels are asked first
            bl, rest = split_batch(history_keys)
            if bl:
                self._bview = HistoryView(lambda: HistoryLearner(bl, min_jobs=n, batch_min_jobs=bn))
            if rest:
                self._view = HistoryView(lambda: HistoryLearner(rest, min_jobs=n))
        self.history_keys = history_keys
        self.fresh_batches = self._bview is not None
        if hold_factor is None:
            hold_factor = _config_default(g, "hold_factor")
        self.hold_factor = float(hold_factor)
        if not (self.hold_factor >= 1.0 and self.hold_factor < float("inf")):
            raise ValueError(
                f"gittins: hold_factor must be a finite number >= 1, got {hold_factor}"
            )
        self._feat: dict[int, tuple] = {}
        self._memo: tuple = (None, None, None, {})
        self._steps: dict = {}  # features -> step function (see _steps_of)
        self._steps_stamp: tuple = (None, None, -1)
        self.steps_version = 0  # moves when every step function may have changed
        self.delta = delta_gpu_s if delta_gpu_s in (None, "bin") else float(delta_gpu_s)
        self.bins = int(bins if bins is not None else g.bins)
        if prior_weight is None:
            prior_weight = _config_default(g, "prior_weight")
        self.prior_weight = float(prior_weight)
        if (
            (isinstance(self.delta, float) and not self.delta > 0)
            or self.bins < 2
            or self.prior_weight < 0
        ):
            raise ValueError(
                f"gittins: need delta_gpu_s > 0, bins >= 2, prior_weight >= 0; "
                f"got {self.delta}, {self.bins}, {self.prior_weight}"
            )
        if prior_samples is None and g is not None and g.prior != "tiresias":
            prior_samples = g.prior_samples  # read from the file when the config was loaded
            if prior_samples is None:
                raise ValueError(
                    f"gittins: prior {g.prior!r} was not read; load the config with load_config"
                )
        if prior_samples is None:
            pts = list(PERCENTILES_GPU_S)
            self._prior = [(x, self.prior_weight * SAMPLE_COUNT / len(pts)) for x in pts]
        else:
            self._prior = [(float(x), self.prior_weight) for x in prior_samples]
        if edges_gpu_s is not None:
            fixed = sorted({0.0, *(float(e) for e in edges_gpu_s)})
            if any(e < 0 for e in fixed):
                raise ValueError(
                    f"gittins: edges_gpu_s must be non-negative, got {list(edges_gpu_s)}"
                )
        self._fixed_edges = fixed if edges_gpu_s is not None else None
        self.config = config
        self._cache_key: tuple[int, int] | None = None
        self._seen: tuple[int, int] | None = None
        self._edges: list[float] = []
        self._index: list[float] = []
        self._max_index = 1.0
        self._rebuild([])

    # --- the table -----------------------------------------------------------------------
    def _rebuild(self, history: Sequence[float]) -> None:
        # the prior's and the history's (value, weight) pairs in order: each part is sorted on
        # its own (the history as plain floats, which is quicker), then one sort merges the two
        # runs; the same list as sorting every pair at once
        pairs = sorted(p for p in self._prior if p[1] > 0.0)
        pairs += [(x, 1.0) for x in sorted(map(float, history))]
        if not pairs:  # no prior and no history: every job equal (FIFO by the tie-break)
            self._edges, self._index, self._max_index = [0.0], [1.0], 1.0
            return
        pairs.sort()
        dist = _Dist([p[0] for p in pairs], [p[1] for p in pairs])
        if self._fixed_edges is not None:
            edges = list(self._fixed_edges)
        else:
            edges = [0.0]
            for k in range(1, self.bins):
                e = dist.quantile(k / self.bins)
                if e > edges[-1]:
                    edges.append(e)
        self._edges = edges
        if self.delta is None:  # sup over quanta that end on a later edge or the largest size
            ends = edges[1:] + [max(dist.v[-1], edges[-1])]
            self._index = [
                max(dist.index(e, end - e) for end in ends[i:] if end > e) if ends[-1] > e else 0.0
                for i, e in enumerate(edges)
            ]
        elif self.delta == "bin":
            nxt = edges[1:] + [max(dist.v[-1], edges[-1])]
            self._index = [dist.index(e, max(n - e, 1e-9)) for e, n in zip(edges, nxt)]
        else:
            self._index = [dist.index(e, self.delta) for e in edges]
        self._max_index = max(self._index) or 1.0

    def _refresh(self, ctx: PolicyContext) -> None:
        led = ctx.ledger
        hist = led.history if led is not None else ()
        seen = self._seen
        if seen is not None and seen[0] == id(hist) and seen[1] == len(hist):
            return
        seen = (id(hist), len(hist))
        self._seen = seen
        n = history_checkpoint(len(hist))
        key = (id(hist), n)
        if key != self._cache_key:
            self._rebuild(hist[:n])
            self._cache_key = key
        if self._view is not None:
            self._view.sync(led, n)
        learner = self._view.learner if self._view is not None else None
        stamp = (self._edges, learner, learner.count if learner is not None else 0)
        old = self._steps_stamp
        if old[0] is not stamp[0] or old[1] is not stamp[1] or old[2] != stamp[2]:
            self._steps_stamp = stamp
            self._steps = {}
            self.steps_version += 1
        if self._bview is not None:
            self._bview.sync(led)

    def _learnt(self, job: Job) -> tuple[float, float] | None:
        """(index, next bin edge) from the job's learnt conditional distribution, or None."""
        if self._view is None and self._bview is None:
            return None
        learner = self._view.learner if self._view is not None else None
        blearner = self._bview.learner if self._bview is not None else None
        f, a = self._features(job), job.attained_gpu_s
        count = (
            learner.count if learner is not None else 0,
            blearner.count if blearner is not None else 0,
        )
        # answers per (features, attained) while the learners stay the same: key() and
        # next_key_change() ask the same question in turn, and re-keying the waiting jobs asks
        # it for many jobs alike (same features, nothing attained yet)
        m = self._memo
        if m[0] is not learner or m[1] is not blearner or m[2] != count or len(m[3]) > 100_000:
            m = self._memo = (learner, blearner, count, {})
        q = (f, a)
        got = m[3].get(q, _MISS)
        if got is _MISS:
            got = None
            if blearner is not None and f.batch:
                got = blearner.gittins(f, a, self.bins)
            if got is None and learner is not None:
                got = learner.gittins(f, a, self.bins)
            m[3][q] = got
        return got

    def _features(self, job: Job):
        """The job's history features (cached per job id while its key fields stay the same)."""
        raw = (
            job.user,
            job.account,
            job.name,
            job.num_gpus,
            job.partition,
            job.time_limit,
            job.array_job_id,
            job.tags.get(BATCH_TAG) if job.tags else None,
        )
        hit = self._feat.get(job.job_id)
        if hit is None or hit[0] != raw:
            if len(self._feat) > 100_000:
                self._feat.clear()
            hit = self._feat[job.job_id] = (raw, job_features(job))
        return hit[1]

    def _steps_of(self, job: Job) -> list:
        """What the job's (index, next edge) is as a step function of ``x`` (its attained
        service plus the tolerance), while the table and the learnt view stay the same:
        ``[points, answers, tables]``, where for ``x`` in ``[points[k-1], points[k])`` the
        answer is ``answers[k]`` (filled as read, see :meth:`_step`). The points are the
        global table's edges and the bin edges of every learnt table the job's features
        read, so neither answer changes between two of them. Valid after :meth:`_refresh`
        until ``steps_version`` moves."""
        learner = self._steps_stamp[1]
        if len(self._steps) > 100_000:
            self._steps = {}
        f = self._features(job) if learner is not None else None
        got = self._steps.get(f)
        if got is None:
            tables = learner.gittins_tables(f, self.bins) if learner is not None else []
            pts = sorted({*self._edges, *(p for tab in tables for p in tab[1])})
            got = self._steps[f] = [pts, [None] * (len(pts) + 1), tables]
        return got

    def _step(self, steps: list, k: int) -> tuple:
        """``steps``' answer ``k`` (see :meth:`_steps_of`): (index, next edge or None, whether
        it is learnt), what :meth:`_learnt` or the table gives anywhere in that step."""
        pts, answers, tables = steps
        x = pts[k - 1] if k else -float("inf")
        got = self._view.learner.gittins_at(tables, x) if tables else None
        if got is not None:
            out = (got[0], got[1], True)
        else:
            edges = self._edges
            i = bisect.bisect_right(edges, x)
            out = (self._index[i - 1], edges[i] if i < len(edges) else None, False)
        answers[k] = out
        return out

    def job_index(self, job: Job, ctx: PolicyContext) -> float:
        """The job's index: from its learnt distribution when it has one, else the table."""
        self._refresh(ctx)
        got = self._learnt(job)
        if got is not None:
            return got[0]
        return self._index[self._bin(job.attained_gpu_s) - 1]

    def _bin(self, attained_gpu_s: float) -> int:
        """The number of bin edges at or below ``attained_gpu_s`` (within the tolerance)."""
        return bisect.bisect_right(self._edges, attained_gpu_s + EDGE_TOLERANCE_GPU_S)

    def next_edge(self, attained_gpu_s: float, ctx: PolicyContext) -> float | None:
        """The first bin edge above ``attained_gpu_s`` (where the index next changes), or None."""
        self._refresh(ctx)
        i = self._bin(attained_gpu_s)
        return self._edges[i] if i < len(self._edges) else None

    def index_at(self, attained_gpu_s: float, ctx: PolicyContext) -> float:
        self._refresh(ctx)
        return self._index[self._bin(attained_gpu_s) - 1]

    def held(self, index: float, job: Job) -> float:
        """The index a job's key uses: ``hold_factor`` × ``index`` while it runs (see the module
        docstring), the index itself while it waits."""
        return index * self.hold_factor if job.running else index

    # --- the interface -------------------------------------------------------------------
    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (-self.held(self.job_index(job, ctx), job), job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        return min(1.0, self.job_index(job, ctx) / self._max_index)

    def next_key_change(self, job: Job, ctx: PolicyContext) -> float | None:
        if not job.running or job.num_gpus <= 0:
            return None
        self._refresh(ctx)
        got = self._learnt(job)
        if got is not None:
            return ctx.now + max(0.0, got[1] - job.attained_gpu_s) / job.num_gpus
        i = self._bin(job.attained_gpu_s)
        if i >= len(self._edges):
            return None
        return ctx.now + (self._edges[i] - job.attained_gpu_s) / job.num_gpus

    def key_and_next_change(self, job: Job, ctx: PolicyContext) -> tuple[tuple, float | None]:
        """What ``key`` and ``next_key_change`` return, from one look-up in the job's step
        function (:meth:`_steps_of`; the same answers as :meth:`_learnt` and the table).
        With a batch key the answers also move with each finished sibling: asked directly."""
        if self._bview is not None:
            return self.key(job, ctx), self.next_key_change(job, ctx)
        return self.key_and_next_from(job, ctx, self.steps(job, ctx))

    def steps(self, job: Job, ctx: PolicyContext) -> list:
        """The job's step function now (:meth:`_steps_of`): a caller may keep it for the job
        while ``steps_version`` stays the same and hand it to :meth:`key_and_next_from`."""
        self._refresh(ctx)
        return self._steps_of(job)

    def key_and_next_from(
        self, job: Job, ctx: PolicyContext, steps: list
    ) -> tuple[tuple, float | None]:
        """:meth:`key_and_next_change` from the job's current step function ``steps``."""
        a = job.attained_gpu_s
        k = bisect.bisect_right(steps[0], a + EDGE_TOLERANCE_GPU_S)
        index, edge, learnt = steps[1][k] or self._step(steps, k)
        gpus = job.num_gpus
        running = job.running
        moving = gpus > 0 and running
        if learnt:
            nxt = ctx.now + max(0.0, edge - a) / gpus if moving else None
        else:
            nxt = ctx.now + (edge - a) / gpus if moving and edge is not None else None
        # what held() gives, without reading the job's state again
        return (-(index * self.hold_factor if running else index), job.submit_time, job.job_id), nxt

    @property
    def edges(self) -> list[float]:
        return list(self._edges)


def _config_default(g, field: str):
    """A setting from the site config, or the config model's default without one."""
    if g is not None:
        return getattr(g, field)
    from ..config import GittinsConfig

    return GittinsConfig.model_fields[field].default


__all__ = ["GittinsPolicy", "gittins_index", "history_checkpoint"]
