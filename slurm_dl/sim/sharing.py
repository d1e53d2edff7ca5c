"""GPU sharing in the simulator: tasks that ask for part of one GPU (openb's ``gpu_milli``),
placed on a fleet of nodes (openb's node list) by one of three placements, measured the way
FGD (Weng et al., USENIX ATC '23) measures fragmentation: the *inflation* experiment.

Placements:

``exclusive``  a task asking part of a GPU takes a whole one (what Slurm's ``--gpus=1`` does);
``bestfit``    a fraction is packed onto the GPU with the least free share that fits, on the node
               left with the least free resources: FGD's Best-fit baseline, half the free CPU
               and half the free GPU share, each over the largest node's;
``fgd``        fragmentation gradient descent: the node and GPU(s) whose choice least increases
               the node's expected fragmentation against the workload's task shapes.

Fragmentation (FGD's definition) of node *n* for a task shape *m*: when *m* cannot run on *n*
(CPU, GPU type or GPU capacity short) every free GPU share of *n* is a fragment; when it can,
the free shares of the GPUs *m* cannot use are (a fraction *d* cannot use a GPU with less than
*d* free; a task of whole GPUs cannot use a partly taken GPU); a task without GPUs cannot use
any. The node's expected fragmentation is the sum over shapes weighted by their share of the
trace. Memory is checked when a task is placed but left out of the shapes' fit (as the shapes
are grouped by CPU and GPU request).

The inflation experiment: tasks drawn at random (seeded, with replacement) from the trace
arrive one after another into an empty fleet and never leave; a task that fits nowhere fails
and is dropped. The cluster counts as *full* when the GPUs asked by the arrived tasks (placed
or not) reach the fleet's GPU capacity; ``unallocated_gpus`` is the GPU capacity then held by
no task (fractions summed; under ``exclusive`` a GPU held by a fraction counts as allocated).
Pure: no I/O beyond reading the two CSV texts given.
"""

from __future__ import annotations

import bisect
import csv
import io
import random
from dataclasses import dataclass, field
from typing import Sequence

PLACEMENTS = ("exclusive", "bestfit", "fgd")
FULL = 1000  # milli-GPUs in one GPU


@dataclass(frozen=True, slots=True)
class Task:
    cpu: int            # milli-CPUs
    mem: int            # MiB
    gpus: int           # whole GPUs (1 for a fraction)
    milli: int          # per GPU: 1000, or 1..999 for a part of one GPU; 0 for a CPU task
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
    _columns(rows, ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"), source, "an openb task list")
    out = []
    for row in rows:
        line = rows.line_num
        gpus = _int(row, "num_gpu", source, line)
        milli = _int(row, "gpu_milli", source, line, 0, FULL) if gpus else 0
        if gpus and milli == 0:
            raise ValueError(f"{source}:{line}: column 'gpu_milli': 0 with num_gpu {gpus}")
        if gpus > 1 and milli != FULL:
            raise ValueError(f"{source}:{line}: column 'gpu_milli': {milli} with num_gpu {gpus} "
                             "(only a one-GPU task may ask part of a GPU)")
        spec = tuple(dict.fromkeys(t.strip() for t in (row.get("gpu_spec") or "").split("|") if t.strip()))
        out.append(Task(_int(row, "cpu_milli", source, line), _int(row, "memory_mib", source, line),
                        gpus, milli, spec))
    if not out:
        raise ValueError(f"{source}: no tasks")
    return out


def read_nodes(text: str, source: str) -> list[Node]:
    """The openb node list: ``cpu_milli, memory_mib, gpu, model`` per node."""
    rows = csv.DictReader(io.StringIO(text))
    _columns(rows, ("cpu_milli", "memory_mib", "gpu", "model"), source, "a fleet file with CPUs and memory")
    out = []
    for row in rows:
        line = rows.line_num
        g = _int(row, "gpu", source, line)
        out.append(Node((row.get("model") or "").strip(), _int(row, "cpu_milli", source, line),
                        _int(row, "memory_mib", source, line), [FULL] * g))
    if not any(n.free for n in out):
        raise ValueError(f"{source}: no node has a GPU")
    return out


class Shapes:
    """The trace's task shapes, grouped by GPU request (count, milli, types), each group with
    its CPU requests sorted and their cumulative weights (share of tasks)."""

    def __init__(self, tasks: Sequence[Task]):
        by: dict[tuple, dict[int, int]] = {}
        for t in tasks:
            g = by.setdefault((t.gpus, t.milli, t.types), {})
            g[t.cpu] = g.get(t.cpu, 0) + 1
        n = len(tasks)
        self.groups = []
        for (gpus, milli, types), cpus in by.items():
            cs = sorted(cpus)
            cum, acc = [], 0.0
            for c in cs:
                acc += cpus[c] / n
                cum.append(acc)
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


def _choices(node_free: tuple[int, ...], task: Task, exclusive: bool) -> list[tuple[int, ...]]:
    """The GPU states the node can be left in (sorted free tuples); empty when it cannot fit."""
    if task.gpus == 0:
        return [node_free]
    milli = FULL if exclusive else task.milli
    if milli == FULL:
        if sum(1 for f in node_free if f == FULL) < task.gpus:
            return []
        rest = list(node_free)
        for _ in range(task.gpus):
            rest.remove(FULL)
        return [tuple(sorted(rest + [0] * task.gpus))]
    out = []
    for f in sorted(set(node_free)):
        if f >= milli:
            rest = list(node_free)
            rest.remove(f)
            out.append(tuple(sorted(rest + [f - milli])))
    return out


@dataclass
class InflationResult:
    placement: str
    gpus: int
    arrived: int = 0
    scheduled: int = 0
    arrived_gpu: float = 0.0
    allocated_gpu: float = 0.0
    used_gpu: float = 0.0      # GPUs the placed tasks asked (fractions as fractions)
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
    """Nodes being filled, grouped by state (nodes of one state make the same choice; the
    lowest-numbered of them is taken)."""

    def __init__(self, nodes: Sequence[Node], placement: str, tasks: Sequence[Task] = ()):
        if placement not in PLACEMENTS:
            raise ValueError(f"--placement: got {placement!r}; allowed: {', '.join(PLACEMENTS)}")
        self.placement = placement
        self.nodes = [Node(n.model, n.cpu, n.mem, list(n.free)) for n in nodes]
        self.gpus = sum(len(n.free) for n in self.nodes)
        self.shapes = Shapes(tasks) if placement == "fgd" else None
        self.max_cpu = max(n.cpu for n in self.nodes) or 1
        self.max_gpu = (max(len(n.free) for n in self.nodes) * FULL) or 1
        self.groups: dict[tuple, list[int]] = {}
        for i, n in enumerate(self.nodes):
            self.groups.setdefault(n.key(), []).append(i)

    def _score(self, model: str, cpu: int, free: tuple, t: Task, after: tuple) -> tuple:
        if self.shapes is not None:  # the smallest rise of expected fragmentation
            return (self.shapes.frag(model, cpu - t.cpu, after) - self.shapes.frag(model, cpu, free),)
        return (0.5 * (cpu - t.cpu) / self.max_cpu + 0.5 * sum(after) / self.max_gpu,)

    def choose(self, t: Task) -> tuple[int, tuple[int, ...]] | None:
        """The node and the free GPU shares it is left with, or None when the task fits nowhere."""
        best = None
        exclusive = self.placement == "exclusive"
        for key, members in self.groups.items():
            model, cpu, mem, free = key
            if cpu < t.cpu or mem < t.mem or (t.gpus and t.types and model not in t.types):
                continue
            for after in _choices(free, t, exclusive):  # a fraction: least free GPU first
                cand = (self._score(model, cpu, free, t, after), members[0], after)
                if best is None or cand[:2] < best[:2]:
                    best = cand
        return None if best is None else (best[1], best[2])

    def place(self, t: Task) -> float | None:
        """Place ``t``; the GPUs it took (a whole one for a fraction under exclusive), or None."""
        chosen = self.choose(t)
        if chosen is None:
            return None
        i, after = chosen
        n = self.nodes[i]
        old = n.key()
        members = self.groups[old]
        members.remove(i)
        if not members:
            del self.groups[old]
        took = (sum(n.free) - sum(after)) / FULL
        n.free = list(after)
        n.cpu -= t.cpu
        n.mem -= t.mem
        bisect.insort(self.groups.setdefault(n.key(), []), i)
        return took


def inflate(tasks: Sequence[Task], nodes: Sequence[Node], placement: str, *, seed: int = 0,
            fill: float = 1.0) -> InflationResult:
    """Draw tasks (seeded) until the GPUs asked reach ``fill`` x the fleet's GPUs; place each by
    ``placement``; see the module's docstring for what is measured."""
    fleet = Fleet(nodes, placement, tasks)
    res = InflationResult(placement, fleet.gpus)
    rng = random.Random(seed)
    target = fill * fleet.gpus
    while res.arrived_gpu < target:
        t = rng.choice(tasks)
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
        raise ValueError(f"throughputs: no GPU type {gpu_type!r} (has {', '.join(sorted(throughputs))})")
    out = []
    for key, row in table.items():
        if not key.endswith(", 1)") or not isinstance(row, dict) or not row.get("null"):
            continue
        alone = float(row["null"])
        for other, pair in row.items():
            if other != "null" and other.endswith(", 1)") and isinstance(pair, list) and pair and pair[0] > 0:
                out.append(float(pair[0]) / alone)  # 0: the pair does not fit one GPU
    if not out:
        raise ValueError(f"throughputs: no 1-GPU pairs measured on {gpu_type}")
    return out


def inference_like(job, max_s: float = 3600.0) -> bool:
    """The rule for a trace that names no job kind: one GPU and a run of at most ``max_s``
    (evaluation, inference, debugging and notebook-sized runs)."""
    return job.num_gpus == 1 and job.duration is not None and job.duration <= max_s


def share_jobs(jobs: Sequence, per_gpu: int, factor: float, rule=inference_like) -> tuple[list, int]:
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
            out.append(replace(j, num_gpus=j.num_gpus * per_gpu,
                               gpus_per_node=None if j.gpus_per_node is None else j.gpus_per_node * per_gpu))
    return out, shared
