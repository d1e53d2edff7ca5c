"""GPU placement inside one simulated cluster (pure; a list of free-GPU counts per node).

The consolidated rule (Helios ``consolidate`` placer, the fidelity semantics):

* ``g ≤ G`` (G = GPUs per node): one node, best fit — the node with the fewest free GPUs that
  still fit, lowest index on ties;
* ``g = kG``: k wholly free nodes (lowest indexes);
* ``g = kG + r``: k wholly free nodes plus r GPUs on one more node — as Helios does, the node
  with the most free GPUs among the rest (lowest index on ties).

``spread`` (optional, for placement-sensitivity studies): when the consolidated rule fails, a job
may take GPUs from any nodes, fullest-free first, so it runs spread over more nodes than needed.

slurm_dl/packing.py (the policy engineer's, topology-aware) serves the live prioritizer; this
module is the simulator's exact, allocation-free fast path for the Helios rule.
"""

from __future__ import annotations

Allocation = tuple[tuple[int, int], ...]  # (node index, GPUs) pairs


def place_consolidated(free: list[int], gpus: int, per_node: int) -> Allocation | None:
    # list.index / ``in`` scan in C: at most ``per_node`` scans instead of a Python loop
    # over every node (the replay's placements are its most frequent call)
    if gpus <= per_node:
        for v in range(gpus, per_node + 1):  # best fit: fewest free that fit, lowest index
            if v in free:
                return ((free.index(v), gpus),)
        return None
    k, r = divmod(gpus, per_node)
    whole = []
    i = -1
    try:
        for _ in range(k + (1 if r else 0)):
            i = free.index(per_node, i + 1)
            whole.append(i)
    except ValueError:
        pass
    if len(whole) < k:
        return None
    alloc = [(i, per_node) for i in whole[:k]]
    if r:  # the most free GPUs among the other nodes, lowest index on ties
        if len(whole) > k:
            alloc.append((whole[k], r))
        else:
            for v in range(per_node - 1, r - 1, -1):
                if v in free:  # not one of the whole nodes taken: those have per_node free
                    alloc.append((free.index(v), r))
                    break
            else:
                return None
    return tuple(alloc)


def place_spread(free: list[int], gpus: int, per_node: int) -> Allocation | None:
    alloc = place_consolidated(free, gpus, per_node)
    if alloc is not None or sum(free) < gpus:
        return alloc
    out = []
    need = gpus
    for i in sorted(range(len(free)), key=lambda i: (-free[i], i)):
        if need == 0:
            break
        take = min(free[i], need)
        if take:
            out.append((i, take))
            need -= take
    return tuple(out)


def min_nodes(gpus: int, per_node: int) -> int:
    return -(-gpus // per_node)


def slowdown(model_info: dict | None, model: str, gpus: int, nodes: int, per_node: int) -> float:
    """Relative speed (≤ 1) of a job spread over ``nodes`` nodes, from chronus/model_info.json.

    1.0 when the job uses the fewest nodes it can, the model is unknown, or the table lacks the
    (GPUs, nodes) entry (then the nearest smaller node count's entry is used, if any).
    """
    if nodes <= min_nodes(gpus, per_node) or not model_info or model not in model_info:
        return 1.0
    table = model_info[model].get(str(gpus))
    if not table:
        return 1.0
    known = sorted(int(n) for n in table if int(n) <= nodes)
    return float(table[str(known[-1])]) if known else 1.0


class FlatPlacer:
    """The GPUs of a cluster of ``nodes`` alike nodes of one type: free GPUs per node, the
    consolidated rule (or ``spread``), and the jobs' speed where they land (1.0, or the
    placement-sensitivity slowdown of a spread job)."""

    flat = True
    by_width = True  # whether a job places depends on its width alone

    def __init__(
        self, nodes: int, per_node: int, spread: bool = False, model_info: dict | None = None
    ) -> None:
        self.per_node = per_node
        self.total = nodes * per_node
        self.free = [per_node] * nodes
        self.free_total = self.total
        self.spread = spread
        self.model_info = model_info
        self.varied = spread  # may a job run at other than full speed here?
        self._place = place_spread if spread else place_consolidated
        # placement is a pure function of the free GPUs per node: a width that did not fit
        # stays unplaceable until a job starts or stops (wake-ups and arrivals change nothing)
        self.free_ver = 0
        self._unplaceable: dict[int, int] = {}  # GPUs -> free_ver at which placing them failed

    def prepare(self, sims: list, ranker) -> None:
        """Nothing to learn about the jobs on one type."""

    def place(self, sj, forced: bool = False) -> Allocation | None:
        """Where ``sj`` goes now, or None. (``forced``: a job GPUs were freed for; one type.)"""
        gpus = sj.gpus
        if gpus > self.free_total or self._unplaceable.get(gpus) == self.free_ver:
            return None
        alloc = self._place(self.free, gpus, self.per_node)
        if alloc is None:
            self._unplaceable[gpus] = self.free_ver
        return alloc

    def take(self, alloc: Allocation, sj) -> None:
        free = self.free
        for i, g in alloc:
            free[i] -= g
        self.free_ver += 1
        self.free_total -= sj.gpus

    def give(self, alloc: Allocation) -> None:
        free = self.free
        n = 0
        for i, g in alloc:
            free[i] += g
            n += g
        self.free_total += n
        self.free_ver += 1

    def node_view(self) -> dict:
        """The free GPUs per node and the node size, for the lease decision."""
        return {"node_free": self.free, "per_node": self.per_node}

    def speed(self, sj, alloc: Allocation) -> float:
        if self.spread:
            return slowdown(self.model_info, sj.job.name, sj.gpus, len(alloc), self.per_node)
        return 1.0
