"""GPU sharing in the simulator: tasks that ask for part of one GPU (openb's ``gpu_milli``),
placed on a fleet of nodes (openb's node list) by one of four placements, measured the way
FGD (Weng et al., USENIX ATC '23) measures fragmentation: the *inflation* experiment. Each
placement follows FGD's own simulator (hkust-adsl/kubernetes-scheduler-simulator, its
``FGDScore``, ``BestFitScore`` and ``DotProductScore`` plugins and its GPU selection), which is
what measured the paper's figures.

Placements:

``exclusive``  a task asking part of a GPU takes a whole one (what Slurm's ``--gpus=1`` does),
               nodes chosen as by ``bestfit``;
``bestfit``    FGD's Best-fit baseline: the node left with the least free resources, half the
               free CPU and half the free GPU share, each over the largest node's; a fraction
               goes onto the GPU with the least free share that fits;
``dotprod``    FGD's DotProd baseline (the one the paper's "up to 49 %" is against): the node
               whose free CPU and GPU, dotted with the task's ask (each over the largest
               node's), is the smallest; GPUs chosen as by ``bestfit``;
``fgd``        fragmentation gradient descent: the node and GPU whose choice least increases the
               node's expected fragmentation against the workload's typical tasks.

Scores are the scheduler's: an integer 0..100, the higher the better (FGD: the sigmoid of the
fall of expected fragmentation in GPUs, x 100, cut to an integer; Best-fit: (1 - score) x 100,
cut). Equal scores go to the node of the lowest rank, a random order of the nodes drawn from the
seed (the simulator's node names carry random prefixes and the scheduler takes the smallest
name). FGD's GPU for a fraction: the first GPU on the node with the node's best score.
``exact=True`` scores as floats instead: the paper's rule without the rounding, to measure
what the rounding does (a lot: see docs/results.md).

Fragmentation (FGD's definition) of node *n* for a task shape *m*: when *m* cannot run on *n*
(CPU, GPU type or GPU capacity short) every free GPU share of *n* is a fragment; when it can,
the free shares of the GPUs *m* cannot use are (a fraction *d* cannot use a GPU with less than
*d* free; a task of whole GPUs cannot use a partly taken GPU); a task without GPUs cannot use
any. The node's expected fragmentation is the sum over the *typical tasks*, each weighted by
its share: the trace's most frequent shapes (CPU, GPU share, GPU count, GPU types), as many
as make up 95 % of its tasks, CPU-only tasks included, their shares renormalised over those.
Memory is checked when a task is placed but is no part of a shape (as in FGD).

The inflation experiment (FGD's "workload tuning"): the trace's tasks arrive once each in a
random order, then tasks drawn at random (with replacement) from the trace, into an empty
fleet, and never leave; a task that fits nowhere fails and is dropped. The cluster counts as
*full* when the GPUs asked by the arrived tasks (placed or not) reach the fleet's GPU capacity
(FGD reads its figures at 100 % arrived; its runs go on to 130 %); ``unallocated_gpus`` is the
GPU capacity then held by no task (fractions summed, as FGD's allocation rate; under
``exclusive`` a GPU held by a fraction counts as allocated). Pure: no I/O beyond reading the
two CSV texts given.

The departures experiment (``depart``, ``serve``): tasks drawn from the trace with their own
durations (``read_durations``) arrive by a Poisson process at an offered load, are placed or
dropped, and leave; measured after a warm-up: time-averaged unallocated GPUs and the tasks
dropped. ``Fleet``'s ``tie`` and ``tol`` change where ties go, to measure what the integer
scores do.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Sequence

PLACEMENTS = ("exclusive", "dotprod", "bestfit", "fgd")
FULL = 1000  # milli-GPUs in one GPU


@dataclass(frozen=True, slots=True)
class Task:
    cpu: int  # milli-CPUs
    mem: int  # MiB
    gpus: int  # whole GPUs (1 for a fraction)
    milli: int  # per GPU: 1000, or 1..999 for a part of one GPU; 0 for a CPU task
    types: tuple[str, ...] = ()  # accepted GPU types (empty: any)

    @property
    def gpu_request(self) -> float:
        """GPUs asked, fractions as fractions."""
        return self.gpus * self.milli / FULL if self.gpus else 0.0


@dataclass(slots=True)
class Node:
    model: str
    cpu: int
    mem: int
    free: list[int] = field(default_factory=list)  # free milli of each GPU

    def key(self) -> tuple:
        return (self.model, self.cpu, self.mem, tuple(sorted(self.free)))


def _int(row: dict, col: str, source: str, line: int, lo: int = 0, hi: int | None = None) -> int:
    raw = (row.get(col) or "").strip()
    try:
        v = int(float(raw))
    except ValueError:
        raise ValueError(f"{source}:{line}: column {col!r}: {raw[:20]!r} is not a number") from None
    if v < lo or (hi is not None and v > hi):
        rng = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
        raise ValueError(f"{source}:{line}: column {col!r}: {v} is out of range ({rng})")
    return v


def _columns(rows: csv.DictReader, need: Sequence[str], source: str, what: str) -> None:
    missing = [c for c in need if c not in (rows.fieldnames or [])]
    if missing:
        raise ValueError(f"{source}:1: not {what}: no column(s) {', '.join(missing)}")


def read_tasks(text: str, source: str) -> list[Task]:
    """The openb pod list: ``cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec`` per task."""
    rows = csv.DictReader(io.StringIO(text))
    _columns(
        rows, ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"), source, "an openb task list"
    )
    out = []
    for row in rows:
        line = rows.line_num
        gpus = _int(row, "num_gpu", source, line)
        milli = _int(row, "gpu_milli", source, line, 0, FULL) if gpus else 0
        if gpus and milli == 0:
            raise ValueError(f"{source}:{line}: column 'gpu_milli': 0 with num_gpu {gpus}")
        if gpus > 1 and milli != FULL:
            raise ValueError(
                f"{source}:{line}: column 'gpu_milli': {milli} with num_gpu {gpus} "
                "(only a one-GPU task may ask part of a GPU)"
            )
        spec = tuple(
            dict.fromkeys(t.strip() for t in (row.get("gpu_spec") or "").split("|") if t.strip())
        )
        out.append(
            Task(
                _int(row, "cpu_milli", source, line),
                _int(row, "memory_mib", source, line),
                gpus,
                milli,
                spec,
            )
        )
    if not out:
        raise ValueError(f"{source}: no tasks")
    return out


def read_nodes(text: str, source: str) -> list[Node]:
    """The openb node list: ``cpu_milli, memory_mib, gpu, model`` per node."""
    rows = csv.DictReader(io.StringIO(text))
    _columns(
        rows,
        ("cpu_milli", "memory_mib", "gpu", "model"),
        source,
        "a fleet file with CPUs and memory",
    )
    out = []
    for row in rows:
        line = rows.line_num
        g = _int(row, "gpu", source, line)
        out.append(
            Node(
                (row.get("model") or "").strip(),
                _int(row, "cpu_milli", source, line),
                _int(row, "memory_mib", source, line),
                [FULL] * g,
            )
        )
    if not any(n.free for n in out):
        raise ValueError(f"{source}: no node has a GPU")
    return out


class Shapes:
    """FGD's *typical tasks*: the trace's task shapes (CPU, GPU share, GPU count, GPU types),
    the most frequent first, as many as make up ``popularity`` of the tasks (FGD's default,
    95 %, CPU-only tasks included), each weighted by its share of those; grouped by GPU request,
    each group with its CPU requests sorted and their cumulative weights."""

    def __init__(self, tasks: Sequence[Task], popularity: float = 0.95):
        counts = Counter((t.cpu, t.milli, t.gpus, t.types) for t in tasks)
        # the most frequent first; equal counts: the larger shape first (FGD's order)
        ranked = sorted(
            counts.items(), key=lambda kv: (kv[1], kv[0][:3], "|".join(kv[0][3])), reverse=True
        )
        kept, acc = [], 0
        for shape, c in ranked:
            if acc >= popularity * len(tasks):
                break
            kept.append((shape, c))
            acc += c
        by: dict[tuple, dict[int, float]] = {}
        for (cpu, milli, gpus, types), c in kept:
            g = by.setdefault((gpus, milli, types), {})
            g[cpu] = g.get(cpu, 0.0) + c / acc
        self.groups = []
        for (gpus, milli, types), cpus in by.items():
            cs = sorted(cpus)
            cum, w = [], 0.0
            for c in cs:
                w += cpus[c]
                cum.append(w)
            self.groups.append((gpus, milli, frozenset(types), cs, cum))
        self._cache: dict[tuple, float] = {}

    def frag(self, model: str, cpu: int, free: tuple[int, ...]) -> float:
        """Expected fragmentation (GPUs) of a node of ``model`` with ``cpu`` milli-CPUs and GPUs
        of ``free`` milli free (sorted)."""
        key = (model, cpu, free)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        total = sum(free)
        whole = sum(1 for f in free if f == FULL)
        partial = total - whole * FULL
        f_sum = 0.0
        for gpus, milli, types, cs, cum in self.groups:
            wtot = cum[-1]
            k = bisect.bisect_right(cs, cpu)
            w_fit = cum[k - 1] if k else 0.0  # shapes of the group whose CPUs fit
            if gpus == 0:
                f_sum += wtot * total
                continue
            if types and model not in types:
                f_sum += wtot * total
                continue
            if milli < FULL:
                fits = any(f >= milli for f in free)
                frag = sum(f for f in free if f < milli)
            else:
                fits = whole >= gpus
                frag = partial
            f_sum += (w_fit * frag + (wtot - w_fit) * total) if fits else wtot * total
        f_sum /= FULL
        if len(self._cache) > 500_000:
            self._cache.clear()
        self._cache[key] = f_sum
        return f_sum


def _after(free: tuple[int, ...], take: int, milli: int) -> tuple[int, ...]:
    """The sorted free shares once ``milli`` is taken from a GPU with ``take`` free."""
    rest = list(free)
    rest.remove(take)
    return tuple(sorted(rest + [take - milli]))


def _whole_after(free: tuple[int, ...], gpus: int) -> tuple[int, ...] | None:
    """The sorted free shares once ``gpus`` whole GPUs are taken; None when there are fewer."""
    if sum(1 for f in free if f == FULL) < gpus:
        return None
    rest = list(free)
    for _ in range(gpus):
        rest.remove(FULL)
    return tuple(sorted(rest + [0] * gpus))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


@dataclass
class InflationResult:
    placement: str
    gpus: int
    arrived: int = 0
    scheduled: int = 0
    arrived_gpu: float = 0.0
    allocated_gpu: float = 0.0
    used_gpu: float = 0.0  # GPUs the placed tasks asked (fractions as fractions)
    first_failure_arrived_pct: float | None = None
    unallocated_at_first_failure: float | None = None
    marks: dict = field(default_factory=dict)  # fill -> figures then (see ``inflate``)
    tie_stats: dict | None = None  # see ``Fleet``

    def summary(self) -> dict:
        return {
            "placement": self.placement,
            "gpus": self.gpus,
            "tasks_arrived": self.arrived,
            "tasks_scheduled": self.scheduled,
            "scheduled_fraction": round(self.scheduled / self.arrived, 4) if self.arrived else None,
            "arrived_gpus": round(self.arrived_gpu, 2),
            "allocated_gpus": round(self.allocated_gpu, 2),
            "unallocated_gpus": round(self.gpus - self.allocated_gpu, 2),
            "asked_gpus_placed": round(self.used_gpu, 2),
            "idle_gpus": round(self.gpus - self.used_gpu, 2),
            "first_failure_arrived_pct": self.first_failure_arrived_pct,
            "unallocated_gpus_at_first_failure": self.unallocated_at_first_failure,
        }


TIES = ("rank", "random", "float", "pack")


class Fleet:
    """Nodes being filled. Nodes in the same state (GPU model, free CPU, memory and GPU shares)
    score the same, so each state is scored once; among equal scores the node of the lowest
    ``rank`` is taken (FGD's simulator: the node names' random prefixes). ``exact``: scores as
    floats instead of the scheduler's integer 0..100 (to see what the rounding does).

    What a tie is and where it goes (to measure what the rounding does; FGD's simulator is the
    default): ``tol`` > 0 (with ``exact``) ties every node whose float score is within ``tol``
    points of the best; ``tie`` picks among tied nodes: ``rank`` the lowest rank (a fixed
    order), ``random`` a node drawn afresh from ``rng`` for each task, ``float`` the best float
    score (integer scores with this tie choose exactly as ``exact``: the integer cut is
    monotone), ``pack`` the node with the least free GPU share, then the least free CPU (then
    rank). The same rule picks FGD's GPU for a fraction on the chosen node (``rank``,
    ``random`` and ``pack``: the first tied GPU). ``stats``: count, per task placed, how often
    the tie changed the node from the float score's best (see ``tie_stats``)."""

    def __init__(
        self,
        nodes: Sequence[Node],
        placement: str,
        tasks: Sequence[Task] = (),
        rank: Sequence[int] | None = None,
        exact: bool = False,
        *,
        tie: str = "rank",
        tol: float = 0.0,
        rng: random.Random | None = None,
        stats: bool = False,
    ):
        if placement not in PLACEMENTS:
            raise ValueError(f"--placement: got {placement!r}; allowed: {', '.join(PLACEMENTS)}")
        if tie not in TIES:
            raise ValueError(f"tie: got {tie!r}; allowed: {', '.join(TIES)}")
        if tol < 0 or (tol and not exact):
            raise ValueError(f"tol: {tol} must be >= 0, and > 0 only with exact scores")
        self.placement = placement
        self.exact = exact
        self.tie = tie
        self.tol = tol
        self.rng = rng or random.Random(0)
        self.nodes = [Node(n.model, n.cpu, n.mem, list(n.free)) for n in nodes]
        self._pristine = [(n.cpu, n.mem) for n in self.nodes]
        self.rank = list(rank) if rank is not None else list(range(len(self.nodes)))
        if sorted(self.rank) != list(range(len(self.nodes))):
            raise ValueError("Fleet: rank must order every node once")
        self.gpus = sum(len(n.free) for n in self.nodes)
        self.shapes = Shapes(tasks) if placement == "fgd" else None
        self.max_cpu = max(n.cpu for n in self.nodes) or 1
        self.max_gpu = (max(len(n.free) for n in self.nodes) * FULL) or 1
        self.groups: dict[tuple, list[tuple[int, int]]] = {}  # state -> [(rank, node)], sorted
        for i, n in enumerate(self.nodes):
            bisect.insort(self.groups.setdefault(n.key(), []), (self.rank[i], i))
        self.tie_stats: Counter | None = Counter() if stats else None

    def _q(self, x: float) -> float:
        return x if self.exact else int(x)

    def empty(self, i: int) -> bool:
        """Whether node ``i`` holds no task."""
        n = self.nodes[i]
        return (n.cpu, n.mem) == self._pristine[i] and all(f == FULL for f in n.free)

    def _milli(self, t: Task) -> int:
        return FULL if self.placement == "exclusive" and t.gpus else t.milli

    def _fgd(self, model: str, cpu: int, base: float, t: Task, after: tuple) -> float:
        """FGD's score before the scheduler cuts it to an integer (see ``_q``): the sigmoid of
        the fall of expected fragmentation, in GPUs, x 100 (the higher, the better)."""
        return _sigmoid(base - self.shapes.frag(model, cpu - t.cpu, after)) * 100

    def _score(self, model: str, cpu: int, free: tuple, t: Task) -> float | None:
        """The node's score for ``t`` as a float (higher is better; the scheduler's is its
        integer part, ``_q``), or None when its GPUs cannot take it."""
        milli = self._milli(t)
        if self.shapes is not None:
            base = self.shapes.frag(model, cpu, free)
            if t.gpus == 1 and milli < FULL:  # the best of the GPUs it fits on
                best = None
                for f in set(free):
                    if f >= milli:
                        s = self._fgd(model, cpu, base, t, _after(free, f, milli))
                        best = s if best is None or s > best else best
                return best
            after = _whole_after(free, t.gpus) if t.gpus else free
            return None if after is None else self._fgd(model, cpu, base, t, after)
        if t.gpus == 1 and milli < FULL:
            if not any(f >= milli for f in free):
                return None
        elif t.gpus and _whole_after(free, t.gpus) is None:
            return None
        if self.placement == "dotprod":
            # FGD's DotProd: the dot product of the node's free CPU and GPU and the task's ask,
            # each over the largest node's, halved (the lower, the better), as 0..100
            s = (cpu / self.max_cpu) * (t.cpu / self.max_cpu)
            s += (sum(free) / self.max_gpu) * (t.gpus * milli / self.max_gpu)
            x = (1.0 - s / 2) * 100
        else:
            # FGD's Best-fit: the free CPU and GPU left, each over the largest node's, weighed
            # half and half (the lower, the better), as 0..100 with the higher the better
            s = 0.0
            s += (cpu - t.cpu) / self.max_cpu * 0.5
            s += (sum(free) - t.gpus * milli) / self.max_gpu * 0.5
            x = (1.0 - s) * 100
        return x

    def _devices(self, i: int, t: Task) -> list[int]:
        """The GPUs (indices) node ``i`` gives ``t``: the lowest-numbered whole ones for whole
        GPUs; a share: under ``fgd`` the first GPU with the node's best score, otherwise the
        one with the least free that fits (the first of equals)."""
        n = self.nodes[i]
        milli = self._milli(t)
        if not t.gpus:
            return []
        if milli == FULL:
            return [d for d, f in enumerate(n.free) if f == FULL][: t.gpus]
        fits = [d for d, f in enumerate(n.free) if f >= milli]
        if self.shapes is None:
            return [min(fits, key=lambda d: n.free[d])]
        free = tuple(sorted(n.free))
        base = self.shapes.frag(n.model, n.cpu, free)
        raw = [self._fgd(n.model, n.cpu, base, t, _after(free, n.free[d], milli)) for d in fits]
        if self.tie == "float":
            return [fits[raw.index(max(raw))]]
        if self.tol:
            top = max(raw) - self.tol
            tied = [d for d, x in zip(fits, raw) if x >= top]
        else:
            q = [self._q(x) for x in raw]
            tied = [d for d, x in zip(fits, q) if x == max(q)]
        if self.tie == "random":
            return [self.rng.choice(tied)]
        if self.tie == "pack":
            return [min(tied, key=lambda d: n.free[d])]
        return [tied[0]]

    def choose(self, t: Task) -> tuple[int, list[int]] | None:
        """The node and the GPUs on it that ``t`` takes, or None when it fits nowhere."""
        fast = self.tie == "rank" and not self.tol and self.tie_stats is None
        best = None
        cands = []
        for key, members in self.groups.items():
            model, cpu, mem, free = key
            if cpu < t.cpu or mem < t.mem or (t.gpus and t.types and model not in t.types):
                continue
            s = self._score(model, cpu, free, t)
            if s is None:
                continue
            if fast:
                cand = (-self._q(s), members[0][0])
                if best is None or cand < best[0]:
                    best = (cand, members[0][1])
            else:
                cands.append((s, key, members))
        if fast:
            return None if best is None else (best[1], self._devices(best[1], t))
        if not cands:
            return None
        i = self._pick(cands)
        return i, self._devices(i, t)

    def _pick(self, cands: list[tuple[float, tuple, list]]) -> int:
        """The node among the scored states ``cands`` (float score, state, members) by the
        tie rule; counts into ``tie_stats`` when asked."""
        top_s = max(c[0] for c in cands)
        if self.tol:
            tied = [c for c in cands if c[0] >= top_s - self.tol]
        else:
            top_q = self._q(top_s)
            tied = [c for c in cands if self._q(c[0]) == top_q]
        if self.tie == "float":
            c = min(tied, key=lambda c: (-c[0], c[2][0][0]))
            i = c[2][0][1]
        elif self.tie == "pack":
            c = min(tied, key=lambda c: (sum(c[1][3]), c[1][1], c[2][0][0]))
            i = c[2][0][1]
        elif self.tie == "random":
            k = self.rng.randrange(sum(len(c[2]) for c in tied))
            for c in tied:
                if k < len(c[2]):
                    i = c[2][k][1]
                    break
                k -= len(c[2])
        else:
            c = min(tied, key=lambda c: c[2][0][0])
            i = c[2][0][1]
        st = self.tie_stats
        if st is not None:
            f = min(cands, key=lambda c: (-c[0], c[2][0][0]))  # the float score's choice
            fi = f[2][0][1]
            st["placed"] += 1
            if len({c[0] for c in tied}) > 1:
                st["tied"] += 1  # states of different float scores share the top score
            st["tied_nodes"] += sum(len(c[2]) for c in tied)
            if c[0] < f[0]:
                st["overridden"] += 1  # the tie took a node the float score ranks lower
                st["gap_x1000"] += round(1000 * (f[0] - c[0]))
                ce, fe = self.empty(i), self.empty(fi)
                if ce and not fe:
                    st["chose_empty_over_used"] += 1
                elif fe and not ce:
                    st["chose_used_over_empty"] += 1
            if self.empty(i):
                st["chose_empty"] += 1
            if self.empty(fi):
                st["float_choice_empty"] += 1
        return i

    def _change(self, i: int, devices: Sequence[int], milli: int, t: Task, sign: int) -> None:
        n = self.nodes[i]
        old = n.key()
        members = self.groups[old]
        members.remove((self.rank[i], i))
        if not members:
            del self.groups[old]
        for d in devices:
            n.free[d] -= sign * milli
        n.cpu -= sign * t.cpu
        n.mem -= sign * t.mem
        bisect.insort(self.groups.setdefault(n.key(), []), (self.rank[i], i))

    def assign(self, t: Task) -> tuple[int, list[int], int] | None:
        """Place ``t``: (node, its GPUs, milli taken on each), or None when it fits nowhere;
        ``release`` gives the same back."""
        chosen = self.choose(t)
        if chosen is None:
            return None
        i, devices = chosen
        milli = self._milli(t)
        self._change(i, devices, milli, t, 1)
        return i, devices, milli

    def release(self, i: int, devices: Sequence[int], milli: int, t: Task) -> None:
        """Give back what ``assign`` took for ``t`` (the task ends)."""
        self._change(i, devices, milli, t, -1)

    def place(self, t: Task) -> float | None:
        """Place ``t``; the GPUs it took (a whole one for a fraction under exclusive), or None."""
        got = self.assign(t)
        return None if got is None else len(got[1]) * got[2] / FULL


def arrivals(tasks: Sequence[Task], rng: random.Random) -> Iterator[Task]:
    """FGD's workload: the trace's tasks once each in a random order, then tasks drawn at
    random (with replacement) from it for as long as more are asked."""
    order = list(tasks)
    rng.shuffle(order)
    yield from order
    while True:
        yield rng.choice(tasks)


def inflate(
    tasks: Sequence[Task],
    nodes: Sequence[Node],
    placement: str,
    *,
    seed: int = 0,
    fill: float = 1.0,
    exact: bool = False,
    tie: str = "rank",
    tol: float = 0.0,
    stats: bool = False,
    marks: Sequence[float] = (),
) -> InflationResult:
    """Tasks arrive (seeded; see ``arrivals``) until the GPUs they ask reach ``fill`` x the
    fleet's GPUs (or the largest of ``marks``, when larger); each is placed by ``placement``;
    see the module's docstring for what is measured. The seed also orders the nodes for ties
    (``tie``, ``tol``: see ``Fleet``; a ``random`` tie draws from its own seeded stream).
    ``marks``: fills (e.g. 0.95, 1.0, 1.05) at which the figures are also read, into
    ``InflationResult.marks`` (read once the arrived GPUs first reach each); ``stats``: the
    fleet's tie counts into ``InflationResult.tie_stats``."""
    rng = random.Random(seed)
    rank = list(range(len(nodes)))
    rng.shuffle(rank)
    fleet = Fleet(
        nodes,
        placement,
        tasks,
        rank=rank,
        exact=exact,
        tie=tie,
        tol=tol,
        rng=random.Random(f"ties-{seed}"),
        stats=stats,
    )
    res = InflationResult(placement, fleet.gpus)
    pending = sorted(marks)
    target = max([fill, *pending]) * fleet.gpus
    stream = arrivals(tasks, rng)
    while res.arrived_gpu < target:
        t = next(stream)
        res.arrived += 1
        res.arrived_gpu += t.gpu_request
        took = fleet.place(t)
        if took is None:
            if res.first_failure_arrived_pct is None:
                res.first_failure_arrived_pct = round(100 * res.arrived_gpu / fleet.gpus, 2)
                res.unallocated_at_first_failure = round(fleet.gpus - res.allocated_gpu, 2)
        else:
            res.allocated_gpu += took
            res.scheduled += 1
            res.used_gpu += t.gpu_request
        while pending and res.arrived_gpu >= pending[0] * fleet.gpus:
            res.marks[pending.pop(0)] = {
                "arrived_pct": round(100 * res.arrived_gpu / fleet.gpus, 3),
                "scheduled_fraction": round(res.scheduled / res.arrived, 4),
                "unallocated_gpus": round(fleet.gpus - res.allocated_gpu, 2),
            }
    if fleet.tie_stats is not None:
        res.tie_stats = dict(fleet.tie_stats)
    return res


# --- departures: tasks that end (what a Slurm site has) --------------------------------------


def read_durations(text: str, source: str) -> list[float]:
    """Each task's run in seconds, ``deletion_time - creation_time``, in the order of
    ``read_tasks`` (openb: about 0.4 % of the tasks still ran when the trace ended, cut there)."""
    rows = csv.DictReader(io.StringIO(text))
    _columns(rows, ("creation_time", "deletion_time"), source, "an openb task list with times")
    out = []
    for row in rows:
        line = rows.line_num
        c = _int(row, "creation_time", source, line)
        d = _int(row, "deletion_time", source, line)
        if d < c:
            raise ValueError(f"{source}:{line}: column 'deletion_time': {d} is before {c}")
        out.append(float(d - c))
    if not out:
        raise ValueError(f"{source}: no tasks")
    return out


def kind(t: Task) -> str:
    """A task's class for the drop counts: ``cpu``, ``frac`` (part of one GPU) or ``<n>gpu``."""
    return "cpu" if not t.gpus else "frac" if t.milli < FULL else f"{t.gpus}gpu"


@dataclass
class DepartureResult:
    placement: str
    gpus: int
    warmup_s: float
    end_s: float
    load: float | None = None
    rate_per_s: float | None = None
    arrived: int = 0  # in the window (after warm-up), as the rest
    dropped: int = 0
    arrived_gpu: float = 0.0  # GPUs asked by the arrivals, fractions as fractions
    dropped_gpu: float = 0.0
    arrived_gpu_s: float = 0.0  # GPU-seconds asked (request x duration)
    dropped_gpu_s: float = 0.0
    unallocated_gpu_s: float = 0.0  # the integral of the GPUs held by no task
    idle_gpu_s: float = 0.0  # the integral of the GPUs no running task asked for
    arrived_by_kind: Counter = field(default_factory=Counter)
    dropped_by_kind: Counter = field(default_factory=Counter)

    def summary(self) -> dict:
        span = self.end_s - self.warmup_s
        return {
            "placement": self.placement,
            "gpus": self.gpus,
            "load": self.load,
            "rate_per_s": None if self.rate_per_s is None else round(self.rate_per_s, 4),
            "window_s": [self.warmup_s, self.end_s],
            "tasks_arrived": self.arrived,
            "tasks_dropped": self.dropped,
            "dropped_fraction": round(self.dropped / self.arrived, 5) if self.arrived else None,
            "dropped_gpu_fraction": round(self.dropped_gpu / self.arrived_gpu, 5)
            if self.arrived_gpu
            else None,
            "dropped_gpu_s_fraction": round(self.dropped_gpu_s / self.arrived_gpu_s, 5)
            if self.arrived_gpu_s
            else None,
            "unallocated_gpus": round(self.unallocated_gpu_s / span, 2) if span > 0 else None,
            "idle_gpus": round(self.idle_gpu_s / span, 2) if span > 0 else None,
            "dropped_fraction_by_kind": {
                k: round(self.dropped_by_kind[k] / n, 5)
                for k, n in sorted(self.arrived_by_kind.items())
            },
        }


def serve(
    fleet: Fleet,
    stream: Iterator[tuple[float, Task, float]],
    warmup_s: float,
    end_s: float,
) -> DepartureResult:
    """Tasks arrive (``stream``: (time, task, duration), times not decreasing), each placed by
    ``fleet`` at once or dropped (no queue: a loss system), and leave after their duration; a
    task leaving at the time another arrives has left. Measured over [``warmup_s``,
    ``end_s``]: the time-averaged GPUs held by no task, and the tasks (and GPUs, GPU-seconds
    asked) that arrive then and are dropped. Stops at ``end_s`` or when ``stream`` ends."""
    import heapq

    res = DepartureResult(fleet.placement, fleet.gpus, warmup_s, end_s)
    alloc = used = 0.0  # GPUs held, GPUs asked by the running tasks
    last = 0.0
    running: list = []  # (end, seq, node, devices, milli, task)
    seq = 0

    def advance(x: float) -> None:
        nonlocal last
        a, b = max(last, warmup_s), min(x, end_s)
        if b > a:
            res.unallocated_gpu_s += (fleet.gpus - alloc) * (b - a)
            res.idle_gpu_s += (fleet.gpus - used) * (b - a)
        last = max(last, x)

    def leave_until(x: float) -> None:
        """The running tasks that end by ``x`` leave, in end order."""
        nonlocal alloc, used
        while running and running[0][0] <= x:
            e, _, i, devices, milli, done = heapq.heappop(running)
            advance(e)
            fleet.release(i, devices, milli, done)
            alloc -= len(devices) * milli / FULL
            used -= done.gpu_request

    for now, t, dur in stream:
        if now >= end_s:
            break
        leave_until(now)
        advance(now)
        got = fleet.assign(t)
        if now >= warmup_s:
            k = kind(t)
            res.arrived += 1
            res.arrived_gpu += t.gpu_request
            res.arrived_gpu_s += t.gpu_request * dur
            res.arrived_by_kind[k] += 1
            if got is None:
                res.dropped += 1
                res.dropped_gpu += t.gpu_request
                res.dropped_gpu_s += t.gpu_request * dur
                res.dropped_by_kind[k] += 1
        if got is not None:
            i, devices, milli = got
            alloc += len(devices) * milli / FULL
            used += t.gpu_request
            seq += 1
            heapq.heappush(running, (now + dur, seq, i, devices, milli, t))
    leave_until(end_s)
    advance(end_s)
    return res


def poisson_arrivals(
    tasks: Sequence[Task], durations: Sequence[float], rate: float, rng: random.Random
) -> Iterator[tuple[float, Task, float]]:
    """A Poisson process of ``rate`` per second; each arrival a task drawn at random (with
    replacement) from the trace, with its own duration."""
    now = 0.0
    while True:
        now += rng.expovariate(rate)
        k = rng.randrange(len(tasks))
        yield now, tasks[k], durations[k]


def depart(
    tasks: Sequence[Task],
    durations: Sequence[float],
    nodes: Sequence[Node],
    placement: str,
    *,
    load: float = 1.0,
    seed: int = 0,
    cap_s: float = 86400.0,
    warmup_s: float | None = None,
    horizon_s: float = 2 * 86400.0,
    exact: bool = False,
) -> DepartureResult:
    """The departures experiment: tasks of the trace (each with its own duration, at least 1 s,
    at most ``cap_s`` when ``cap_s`` > 0) arrive into the empty fleet by a Poisson process
    whose rate makes the offered load ``load`` x the fleet's GPUs (rate = load x GPUs / the
    trace's mean GPUs x duration), are placed by ``placement`` or dropped, and leave; measured
    after ``warmup_s`` (default: the cap, the longest a task runs) for ``horizon_s``. The seed
    orders the nodes for ties (as ``inflate``) and then draws the arrivals."""
    if len(durations) != len(tasks):
        raise ValueError(f"depart: {len(durations)} durations for {len(tasks)} tasks")
    if load <= 0 or horizon_s <= 0 or cap_s < 0:
        raise ValueError(f"depart: load {load}, horizon {horizon_s} must be > 0, cap {cap_s} >= 0")
    d = [max(1.0, x) for x in durations]
    if cap_s:
        d = [min(x, cap_s) for x in d]
    mean_gd = sum(t.gpu_request * x for t, x in zip(tasks, d)) / len(tasks)
    if mean_gd <= 0:
        raise ValueError("depart: the tasks ask no GPU time")
    rng = random.Random(seed)
    rank = list(range(len(nodes)))
    rng.shuffle(rank)
    fleet = Fleet(nodes, placement, tasks, rank=rank, exact=exact)
    rate = load * fleet.gpus / mean_gd
    warm = (cap_s or max(d)) if warmup_s is None else warmup_s
    res = serve(fleet, poisson_arrivals(tasks, d, rate, rng), warm, warm + horizon_s)
    res.load, res.rate_per_s = load, rate
    return res


# --- co-location on a replay: jobs that share a GPU, slowed by measured interference --------


def colocation_factors(throughputs: dict, gpu_type: str = "v100") -> list[float]:
    """Each 1-GPU model's speed when it shares its GPU with another 1-GPU model, over its speed
    alone, for every measured pair on ``gpu_type`` (Gavel's ``simulation_throughputs.json``:
    ``d[type]["('MODEL', 1)"]`` has ``null`` alone and ``"('OTHER', 1)": [this, other]``)."""
    table = throughputs.get(gpu_type)
    if not isinstance(table, dict):
        raise ValueError(
            f"throughputs: no GPU type {gpu_type!r} (has {', '.join(sorted(throughputs))})"
        )
    out = []
    for key, row in table.items():
        if not key.endswith(", 1)") or not isinstance(row, dict) or not row.get("null"):
            continue
        alone = float(row["null"])
        for other, pair in row.items():
            if (
                other != "null"
                and other.endswith(", 1)")
                and isinstance(pair, list)
                and pair
                and pair[0] > 0
            ):
                out.append(float(pair[0]) / alone)  # 0: the pair does not fit one GPU
    if not out:
        raise ValueError(f"throughputs: no 1-GPU pairs measured on {gpu_type}")
    return out


def inference_like(job, max_s: float = 3600.0) -> bool:
    """The rule for a trace that names no job kind: one GPU and a run of at most ``max_s``
    (evaluation, inference, debugging and notebook-sized runs)."""
    return job.num_gpus == 1 and job.duration is not None and job.duration <= max_s


def share_jobs(
    jobs: Sequence, per_gpu: int, factor: float, rule=inference_like
) -> tuple[list, int]:
    """The jobs as a replay on GPUs cut into ``per_gpu`` slots: a job ``rule`` picks takes one
    slot and runs ``1/factor`` times as long (as if it always had a neighbour); every other job
    takes ``per_gpu`` slots per GPU. Returns (jobs, how many share); the caller multiplies the
    cluster's GPUs per node (and GPU-second thresholds) by ``per_gpu``."""
    from dataclasses import replace

    if per_gpu < 1 or not 0 < factor <= 1:
        raise ValueError(f"share_jobs: per_gpu {per_gpu} must be ≥ 1 and factor {factor} in (0, 1]")
    out, shared = [], 0
    for j in jobs:
        if per_gpu > 1 and rule(j):
            out.append(replace(j, num_gpus=1, duration=j.duration / factor))
            shared += 1
        else:
            out.append(
                replace(
                    j,
                    num_gpus=j.num_gpus * per_gpu,
                    gpus_per_node=None if j.gpus_per_node is None else j.gpus_per_node * per_gpu,
                )
            )
    return out, shared
