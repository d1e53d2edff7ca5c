"""What a new job is likely to need, learnt from the jobs that finished before it.

Pure: no I/O, no clock. A :class:`HistoryLearner` is fed one :class:`Finished` record per
finished job (the ledger keeps them in finishing order; the simulator adds a job when it
completes), so a job's own run never shapes its own prediction: it can only be learnt from
once it has finished, and by then it no longer needs one.

The keys are what Slurm accounting records for every job: user, account, job name, GPU count,
partition and the time limit asked. Job names are normalised first (:func:`normalise_name`:
lower case, hex hashes and digits stripped, separators collapsed), so ``train-bert-7f3a9c21``
and ``train_bert_12`` fall under one name. A job is looked up along a *ladder* of keys, most
specific first (:data:`DEFAULT_LADDER`); the first key that has at least ``min_jobs`` finished
jobs answers, else the next, down to the whole history. Each key keeps its ``per_key`` most
recent jobs (users' habits change).

A ``batch`` level (:func:`with_batch` puts it first) keys a job on its burst or job array
(:func:`job_batch`: the Slurm array job id, else a tag the simulator derives from submit times
for traces without arrays): once some of its siblings have finished, they answer, with
``batch_min_jobs`` of them enough. Jobs without a batch skip those levels. No named ladder has
one: the daemon's ledger does not record the batch yet.

``samples(job, above=a)`` conditions on what a running job has already shown: only finished
jobs that used more than ``a`` GPU-seconds count (a job that ran longer than every job of its
key falls back to a coarser key, whose tail is longer). Gittins builds its per-job service
distribution from these.

What is learnt per job is its GPU-seconds unless the learner is given another ``value``:
:func:`per_gpu_seconds` (its run time, so that keys mixing GPU counts pool like with like) or
:func:`limit_ratio` (run time over the time limit asked, Tsafrir's correction of users' time
limits; jobs without a limit are not learnt). :meth:`HistoryLearner.shrunk_mean` is QSSF's
estimate: each key's mean blended with the coarser keys' estimate as if that were
``shrink`` more jobs (empirical-Bayes shrinkage; 0 = the most specific key alone).
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, Sequence

FIELDS = ("user", "account", "name", "gpus", "partition", "time_limit", "batch")
"""The fields a ladder may combine (``name`` is the normalised job name; ``batch`` the burst or
job array a job belongs to, see :func:`job_batch`)."""

BATCH_TAG = "batch"
"""The job tag that names a job's batch where it has no array job id (the simulator derives it
for traces without arrays: :func:`slurm_dl.sim.workloads.traces.derive_batches`)."""

DEFAULT_LADDER: tuple[tuple[str, ...], ...] = (
    ("user", "name", "gpus", "partition", "time_limit"),
    ("user", "name", "gpus"),
    ("user", "name"),
    ("account", "name"),
    ("user", "gpus"),
    ("user",),
    ("account", "gpus"),
    ("account",),
    ("gpus",),
    (),
)
"""Most specific first; ``()`` is the whole history."""

LADDERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "full": DEFAULT_LADDER,
    "no-limit": tuple(level for level in DEFAULT_LADDER if "time_limit" not in level),
    "user-name": (("user", "name"), ("user",), ("account",)),
    "account-gpus": (("account", "gpus"), ("account",), ()),
    "account": (("account",), ()),
    "global": ((),),
}
"""Named ladders (the ``history_keys`` setting of ``gittins`` and ``qssf``); ``user-name`` is
Helios' QSSF lookup (user and job name, user, account)."""

DEFAULT_MIN_JOBS = 3
DEFAULT_PER_KEY = 50
GLOBAL_PER_KEY = 2000
"""The whole-history key keeps more jobs: it is the last resort for every job."""

_SKIP = object()  # a bin whose key has too few jobs beyond its start

_HEX = re.compile(r"(?<![a-z0-9])[0-9a-f]{6,}(?![a-z0-9])")
_DIGITS = re.compile(r"[0-9]+")
_SEPS = re.compile(r"[^a-z]+")


def normalise_name(name: str) -> str:
    """A job name with what varies between runs of the same work removed: lower case, hex
    hashes (a word of at least 6 hex digits, not all letters) and digits
    stripped, runs of other characters collapsed to one ``_``, none at the ends."""
    s = (name or "").strip().lower()
    s = _HEX.sub(lambda m: "" if not m.group(0).isalpha() else m.group(0), s)
    s = _DIGITS.sub("", s)
    return _SEPS.sub("_", s).strip("_")


class Finished(NamedTuple):
    """One finished job as the history keeps it; ``gpu_s`` is the GPU-seconds it used."""

    user: str
    account: str
    name: str
    gpus: int
    partition: str
    time_limit: float | None
    gpu_s: float
    batch: str = ""


class Features(NamedTuple):
    """A job's key fields, normalised (``time_limit`` in whole seconds, 0 when not asked)."""

    user: str
    account: str
    name: str
    gpus: int
    partition: str
    time_limit: int
    batch: str = ""


def features(
    user: str = "",
    account: str = "",
    name: str = "",
    gpus: int = 0,
    partition: str = "",
    time_limit: float | None = None,
    batch: str = "",
) -> Features:
    return Features(
        user or "",
        account or "",
        normalise_name(name),
        int(gpus or 0),
        partition or "",
        int(round(time_limit)) if time_limit else 0,
        batch or "",
    )


def job_batch(job) -> str:
    """The batch a model Job belongs to: its job array (``array:<id>``) where it has one, else
    its :data:`BATCH_TAG` tag, else ``""`` (none: ladder levels with ``batch`` are skipped)."""
    if job.array_job_id is not None:
        return f"array:{job.array_job_id}"
    tags = job.tags
    return tags.get(BATCH_TAG, "") if tags else ""


def job_features(job) -> Features:
    """The key fields of a model :class:`~slurm_dl.core.model.Job`."""
    return features(
        job.user, job.account, job.name, job.num_gpus, job.partition, job.time_limit, job_batch(job)
    )


def record_features(rec: Finished) -> Features:
    return features(
        rec.user, rec.account, rec.name, rec.gpus, rec.partition, rec.time_limit, rec.batch
    )


def has_batch(ladder: str | Sequence[Sequence[str]]) -> bool:
    """Whether a ladder has a level keyed on the batch."""
    return any("batch" in level for level in parse_ladder(ladder))


def with_batch(ladder: str | Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """A ladder with the batch as its first level (a job's finished siblings answer first)."""
    lad = parse_ladder(ladder)
    return lad if lad and lad[0] == ("batch",) else (("batch",), *lad)


def split_batch(
    ladder: str | Sequence[Sequence[str]],
) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]:
    """(the levels keyed on the batch, the others), each in ladder order."""
    lad = parse_ladder(ladder)
    return (tuple(lv for lv in lad if "batch" in lv), tuple(lv for lv in lad if "batch" not in lv))


def parse_ladder(value: str | Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """A ladder by name (:data:`LADDERS`) or as lists of field names; ValueError says why not."""
    if isinstance(value, str):
        try:
            return LADDERS[value]
        except KeyError:
            raise ValueError(
                f"unknown history keys {value!r}; allowed: {', '.join(LADDERS)}"
            ) from None
    out = []
    for level in value:
        bad = [f for f in level if f not in FIELDS]
        if bad:
            raise ValueError(f"unknown history field(s) {bad}; allowed: {', '.join(FIELDS)}")
        out.append(tuple(level))
    if not out:
        raise ValueError("history keys: at least one level is needed")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Match:
    """What the ladder answered for one job: the level (0 = most specific) and its samples
    (sorted ascending, only those above the attained service asked about)."""

    level: int
    samples: tuple[float, ...]
    below: float = 0.0
    """The largest GPU-seconds at this key not above the attained service asked about (0 when
    none): the start of the bin the job is in, where its Gittins index is evaluated."""

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)


def per_gpu_seconds(rec: Finished) -> float:
    """A finished job's run time (GPU-seconds over its GPUs; a record without GPUs counts one)."""
    return rec.gpu_s / max(rec.gpus, 1)


def limit_ratio(rec: Finished) -> float | None:
    """A finished job's run time over the time limit it asked; None without a limit."""
    if not rec.time_limit or rec.time_limit <= 0:
        return None
    return per_gpu_seconds(rec) / rec.time_limit


def without_limit(ladder: str | Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """A ladder with the levels that key on the time limit left out (at least the whole
    history remains)."""
    out: list[tuple[str, ...]] = []
    for level in parse_ladder(ladder):
        if "time_limit" not in level and level not in out:
            out.append(level)
    return tuple(out) or ((),)


class HistoryLearner:
    """Finished jobs grouped under every key of a ladder (see the module docstring)."""

    def __init__(
        self,
        ladder: str | Sequence[Sequence[str]] = DEFAULT_LADDER,
        *,
        min_jobs: int = DEFAULT_MIN_JOBS,
        per_key: int = DEFAULT_PER_KEY,
        value: Callable[[Finished], float | None] | None = None,
        batch_min_jobs: int | None = None,
    ) -> None:
        self.ladder = parse_ladder(ladder)
        self.value = value
        if min_jobs < 1 or per_key < 1 or per_key < min_jobs:
            raise ValueError(f"history: need 1 <= min_jobs <= per_key, got {min_jobs}, {per_key}")
        self.min_jobs = int(min_jobs)
        self.batch_min_jobs = self.min_jobs if batch_min_jobs is None else int(batch_min_jobs)
        if not 1 <= self.batch_min_jobs <= per_key:
            raise ValueError(f"history: need 1 <= batch_min_jobs <= per_key, got {batch_min_jobs}")
        self.per_key = int(per_key)
        self._idx = [tuple(FIELDS.index(f) for f in level) for level in self.ladder]
        # a job without a batch is not looked up (nor learnt) under a batch level: all such
        # jobs would share the empty batch
        self._batch_level = ["batch" in level for level in self.ladder]
        # finished jobs a key needs, per level (a batch's siblings may count from fewer)
        self._mins = [self.batch_min_jobs if b else self.min_jobs for b in self._batch_level]
        self._by_key: dict[tuple, deque] = {}
        self._sorted: dict[tuple, tuple[float, ...]] = {}
        self._prefix: dict[tuple, list[float]] = {}
        self._kcache: dict[Features, list[tuple]] = {}
        # per (key, bins): [samples, bin edges, per-bin Gittins index or _SKIP / None (not yet
        # computed)], dropped when the key learns a job; per (features, bins): the levels with
        # enough jobs, as of ``count``
        self._tables: dict[tuple, list] = {}
        self._plans: dict[tuple, tuple[int, list]] = {}
        self._bins: set[int] = set()
        self.count = 0

    def _keys(self, f: Features) -> list[tuple]:
        ks = self._kcache.get(f)
        if ks is None:
            if len(self._kcache) > 100_000:
                self._kcache.clear()
            ks = self._kcache[f] = [
                (lvl, *(f[i] for i in idx))
                for lvl, idx in enumerate(self._idx)
                if f.batch or not self._batch_level[lvl]
            ]
        return ks

    def add(self, rec: Finished) -> None:
        """Learn from one finished job (call in finishing order)."""
        f = record_features(rec)
        v = rec.gpu_s if self.value is None else self.value(rec)
        if v is None:
            self.count += 1
            return
        x = round(max(0.0, float(v)), 6)  # on the grid the simulator's wake-ups land on
        for k in self._keys(f):
            q = self._by_key.get(k)
            if q is None:
                cap = GLOBAL_PER_KEY if len(k) == 1 else self.per_key
                q = self._by_key[k] = deque(maxlen=max(cap, self.per_key))
            q.append(x)
            self._sorted.pop(k, None)
            self._prefix.pop(k, None)
            for b in self._bins:
                self._tables.pop((k, b), None)
        self.count += 1

    def extend(self, recs: Iterable[Finished]) -> None:
        for r in recs:
            self.add(r)

    def _samples(self, k: tuple) -> tuple[float, ...]:
        s = self._sorted.get(k)
        if s is None:
            q = self._by_key.get(k)
            s = self._sorted[k] = tuple(sorted(q)) if q else ()
        return s

    def match(self, f: Features, above: float = 0.0) -> Match | None:
        """The most specific key with at least ``min_jobs`` finished jobs that used more than
        ``above`` GPU-seconds, and those jobs' GPU-seconds; None when no key has enough."""
        for k in self._keys(f):
            s = self._samples(k)
            need = self._mins[k[0]]
            if len(s) < need:
                continue
            below = 0.0
            if above > 0.0 and s[0] <= above:
                i = bisect.bisect_right(s, above)
                if len(s) - i < need:
                    continue
                below = s[i - 1]
                s = s[i:]
            return Match(k[0], s, below)
        return None

    def gittins(self, f: Features, attained: float, bins: int = 32) -> tuple[float, float] | None:
        """(Gittins index, next bin edge) of a job that has attained ``attained`` GPU-seconds,
        from the most specific key with at least ``min_jobs`` finished jobs beyond the start of
        its bin; None when no key has enough. A key's bin edges are ``bins`` quantiles of its
        finished jobs (all of them when fewer), so the index changes at most ``bins`` times."""
        # within a micro GPU-second of an edge counts as past it (a wake-up scheduled for
        # the edge lands on it up to rounding)
        return self.gittins_at(self.gittins_tables(f, bins), attained + 1e-6)

    def gittins_tables(self, f: Features, bins: int = 32) -> list:
        """The tables :meth:`gittins` reads for features ``f`` (as of ``count``): a list of
        ``[samples, bin edges, per-bin index]``, most specific key first. Its answer changes
        only where ``x`` passes one of their bin edges (:meth:`gittins_at`)."""
        plan = self._plans.get((f, bins))
        if plan is None or plan[0] != self.count:
            plan = self._plan(f, bins)
        return plan[1]

    def gittins_at(self, tables: list, x: float) -> tuple[float, float] | None:
        """What :meth:`gittins` answers from ``tables`` at ``x`` (attained service plus the
        micro GPU-second of tolerance)."""
        for tab in tables:
            pts = tab[1]
            i = bisect.bisect_right(pts, x)
            if i >= len(pts):
                continue  # beyond every job of this key
            g = tab[2][i]
            if g is None:
                g = tab[2][i] = self._bin_index(tab[0], pts, i, tab[3])
            if g is _SKIP:
                continue
            return g, pts[i]
        return None

    def _plan(self, f: Features, bins: int) -> tuple[int, list]:
        """The tables of ``f``'s keys that have at least ``min_jobs`` jobs, most specific first."""
        self._bins.add(bins)
        tabs = []
        for k in self._keys(f):
            tab = self._tables.get((k, bins))
            if tab is None:
                s = self._samples(k)
                need = self._mins[k[0]]
                if len(s) < need:
                    continue
                n = len(s)
                pts = (
                    s
                    if n <= bins
                    else tuple(sorted({s[(i * (n - 1)) // (bins - 1)] for i in range(bins)}))
                )
                tab = self._tables[(k, bins)] = [s, pts, [None] * len(pts), need]
            tabs.append(tab)
        if len(self._plans) > 100_000:
            self._plans.clear()
        plan = self._plans[(f, bins)] = (self.count, tabs)
        return plan

    def _bin_index(self, s: tuple[float, ...], pts: tuple[float, ...], i: int, need: int):
        """The index for bin ``i`` (from ``pts[i-1]`` to ``pts[i]``), or _SKIP when fewer than
        ``need`` (the key's ``min_jobs``) of the key's jobs lie beyond the bin's start."""
        lo = pts[i - 1] if i > 0 else 0.0
        j = bisect.bisect_right(s, lo)
        if len(s) - j < need:
            return _SKIP
        return gittins_from_samples(s[j:], lo)

    def predict(self, f: Features, above: float = 0.0) -> float | None:
        """Mean GPU-seconds of the matching finished jobs (those beyond ``above``), or None."""
        m = self.match(f, above)
        return m.mean if m is not None else None

    def shrunk_mean(self, f: Features, above: float = 0.0, shrink: float = 0.0) -> float | None:
        """The learnt value expected of a job with features ``f`` that has shown ``above``:
        from the coarsest key up, every key with at least ``min_jobs`` finished jobs beyond
        ``above`` moves the estimate to ``(their sum + shrink × estimate) / (their count +
        shrink)``; the first such key sets it. ``shrink`` 0: the most specific key's mean (what
        :meth:`predict` answers). None when no key has enough jobs."""
        est = None
        for k in reversed(self._keys(f)):
            s = self._samples(k)
            n = len(s)
            need = self._mins[k[0]]
            if n < need:
                continue
            i = bisect.bisect_right(s, above) if above > 0.0 and s[0] <= above else 0
            if n - i < need:
                continue
            pre = self._prefix.get(k)
            if pre is None:
                pre = [0.0]
                for x in s:
                    pre.append(pre[-1] + x)
                self._prefix[k] = pre
            total = pre[n] - pre[i]
            if est is None or shrink <= 0.0:
                est = total / (n - i)
            else:
                est = (total + shrink * est) / (n - i + shrink)
        return est


class HistoryView:
    """A learner kept in step with a ledger's ``finished`` log (read incrementally).

    ``sync(ledger, upto)`` learns every record whose position in the log (counting dropped
    ones) is below ``upto`` (all when None); a policy that wants its view to change only at
    fixed points (Gittins: at history checkpoints) passes those. A withdrawn record (a job
    reopened) makes it start over."""

    def __init__(self, make: "callable") -> None:
        self._make = make
        self.learner: HistoryLearner = make()
        self._src: tuple[int, int] | None = None
        self._done = 0

    def sync(self, ledger, upto: int | None = None) -> HistoryLearner:
        if ledger is None:
            return self.learner
        log = ledger.finished
        dropped = getattr(ledger, "finished_dropped", 0)
        total = dropped + len(log)
        upto = total if upto is None else min(upto, total)
        src = (id(ledger), getattr(ledger, "finished_withdrawn", 0))
        if src != self._src or upto < self._done:
            self.learner = self._make()
            self._src = src
            self._done = dropped
        if upto > self._done:
            start = max(self._done, dropped)
            self.learner.extend(log[start - dropped : upto - dropped])
            self._done = upto
        return self.learner


def gittins_from_samples(samples: Sequence[float], a: float) -> float:
    """The Gittins index (sup over quanta ending at a sample) of the empirical distribution
    ``samples`` (sorted ascending, all above ``a``) for a job that has attained ``a``."""
    m = len(samples)
    best = 0.0
    acc = 0.0
    for k, s in enumerate(samples, 1):
        acc += s - a
        expected = acc + (m - k) * (s - a)
        if expected > 0.0:
            g = k / expected
            if g > best:
                best = g
    return best


__all__ = [
    "DEFAULT_LADDER",
    "FIELDS",
    "Features",
    "Finished",
    "HistoryLearner",
    "HistoryView",
    "LADDERS",
    "Match",
    "BATCH_TAG",
    "features",
    "gittins_from_samples",
    "has_batch",
    "job_batch",
    "job_features",
    "split_batch",
    "with_batch",
    "limit_ratio",
    "normalise_name",
    "parse_ladder",
    "per_gpu_seconds",
    "record_features",
    "without_limit",
]
