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


class Fleet:
    """Nodes being filled. Nodes in the same state (GPU model, free CPU, memory and GPU shares)
    score the same, so each state is scored once; among equal scores the node of the lowest
    ``rank`` is taken (FGD's simulator: the node names' random prefixes). ``exact``: scores as
    floats instead of the scheduler's integer 0..100 (to see what the rounding does)."""

    def __init__(
        self,
        nodes: Sequence[Node],
        placement: str,
        tasks: Sequence[Task] = (),
        rank: Sequence[int] | None = None,
        exact: bool = False,
    ):
        if placement not in PLACEMENTS:
            raise ValueError(f"--placement: got {placement!r}; allowed: {', '.join(PLACEMENTS)}")
        self.placement = placement
        self.exact = exact
        self.nodes = [Node(n.model, n.cpu, n.mem, list(n.free)) for n in nodes]
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

    def _milli(self, t: Task) -> int:
        return FULL if self.placement == "exclusive" and t.gpus else t.milli

    def _fgd(self, model: str, cpu: int, base: float, t: Task, after: tuple) -> float:
        """FGD's score: the sigmoid of the fall of expected fragmentation, in GPUs, x 100,
        cut to an integer (the higher, the better)."""
        x = _sigmoid(base - self.shapes.frag(model, cpu - t.cpu, after)) * 100
        return x if self.exact else int(x)

    def _score(self, model: str, cpu: int, free: tuple, t: Task) -> float | None:
        """The node's score for ``t`` (higher is better), or None when its GPUs cannot take it."""
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
        return x if self.exact else int(x)

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
        scores = [self._fgd(n.model, n.cpu, base, t, _after(free, n.free[d], milli)) for d in fits]
        return [fits[scores.index(max(scores))]]

    def choose(self, t: Task) -> tuple[int, list[int]] | None:
        """The node and the GPUs on it that ``t`` takes, or None when it fits nowhere."""
        best = None
        for key, members in self.groups.items():
            model, cpu, mem, free = key
            if cpu < t.cpu or mem < t.mem or (t.gpus and t.types and model not in t.types):
                continue
            s = self._score(model, cpu, free, t)
            if s is None:
                continue
            cand = (-s, members[0][0])
            if best is None or cand < best[0]:
                best = (cand, members[0][1])
        if best is None:
            return None
        return best[1], self._devices(best[1], t)

    def place(self, t: Task) -> float | None:
        """Place ``t``; the GPUs it took (a whole one for a fraction under exclusive), or None."""
        chosen = self.choose(t)
        if chosen is None:
            return None
        i, devices = chosen
        n = self.nodes[i]
        old = n.key()
        members = self.groups[old]
        members.remove((self.rank[i], i))
        if not members:
            del self.groups[old]
        milli = self._milli(t)
        for d in devices:
            n.free[d] -= milli
        n.cpu -= t.cpu
        n.mem -= t.mem
        bisect.insort(self.groups.setdefault(n.key(), []), (self.rank[i], i))
        return len(devices) * milli / FULL


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
) -> InflationResult:
    """Tasks arrive (seeded; see ``arrivals``) until the GPUs they ask reach ``fill`` x the
    fleet's GPUs; each is placed by ``placement``; see the module's docstring for what is
    measured. The seed also orders the nodes for ties."""
    rng = random.Random(seed)
    rank = list(range(len(nodes)))
    rng.shuffle(rank)
    fleet = Fleet(nodes, placement, tasks, rank=rank, exact=exact)
    res = InflationResult(placement, fleet.gpus)
    target = fill * fleet.gpus
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
            continue
        res.allocated_gpu += took
        res.scheduled += 1
        res.used_gpu += t.gpu_request
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
