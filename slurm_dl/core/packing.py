"""Gang placement (pure): put a job on the fewest nodes and, with a topology, the fewest leaf
switches, by best fit — so fragments are filled first and large jobs find whole nodes.

A job of ``G`` GPUs on nodes of at most ``C`` GPUs has the shape ``k × C + r``: ``k`` parts of a
whole node and one part of ``r`` GPUs (``request_shape``; 16 on 8-GPU nodes → 2 × 8; 12 → 8 + 4).
A job that fixed its own shape (``gpus_per_node`` × ``num_nodes``) keeps it. Parts are placed
largest first, each on a distinct node with the **fewest free GPUs that fit** (lowest node index
on ties). With a topology, a placement inside one leaf switch is preferred — the switch with the
fewest free GPUs that can host it, lowest first-node index on ties — else parts go to switches
already used before new ones. ``allow_spread`` lets a job that cannot be placed that way spread
over more nodes than needed (``PackingPlan.spread``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from .model import Job, Node, Topology


@dataclass(frozen=True, slots=True)
class RequestShape:
    """How a GPU count maps onto nodes: ``per_node`` parts (whole nodes first), and the Slurm
    request that expresses it (``gpus_per_node`` is None when the count does not split evenly
    over ``num_nodes``; ask for ``--gpus=N --nodes=num_nodes`` then)."""

    num_gpus: int
    num_nodes: int
    gpus_per_node: int | None
    per_node: tuple[int, ...]


def request_shape(num_gpus: int, node_gpus: int | Iterable[int]) -> RequestShape:
    """``num_gpus`` on nodes of ``node_gpus`` GPUs (or several shapes: the largest counts)."""
    cap = node_gpus if isinstance(node_gpus, int) else max(node_gpus, default=0)
    if num_gpus <= 0:
        raise ValueError(f"a GPU job needs at least 1 GPU, got {num_gpus}")
    if cap <= 0:
        raise ValueError(f"nodes must have at least 1 GPU, got {cap}")
    k, r = divmod(num_gpus, cap)
    per_node = (cap,) * k + ((r,) if r else ())
    n = len(per_node)
    return RequestShape(num_gpus, n, num_gpus // n if num_gpus % n == 0 else None, per_node)


@dataclass(frozen=True, slots=True)
class PackingPlan:
    """Where a job goes: ``allocation`` lists (node name, GPUs) in placement order."""

    allocation: tuple[tuple[str, int], ...]
    switches: tuple[str, ...] = ()
    spread: bool = False

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.allocation)

    @property
    def num_gpus(self) -> int:
        return sum(g for _, g in self.allocation)

    def as_dict(self) -> dict[str, int]:
        return dict(self.allocation)


def job_parts(job: Job, nodes: Sequence[Node]) -> tuple[int, ...]:
    """The per-node GPU parts ``job`` needs: its own fixed shape, else ``request_shape``."""
    if job.gpus_per_node and job.num_nodes:
        return (job.gpus_per_node,) * job.num_nodes
    if job.gpus_per_node and job.num_gpus:
        return (job.gpus_per_node,) * max(1, math.ceil(job.num_gpus / job.gpus_per_node))
    return request_shape(job.num_gpus, [n.gpus for n in nodes] or [1]).per_node


def _place_parts(
    parts: Sequence[int], cands: list[tuple[int, Node]], leaf: dict[str, str]
) -> list[tuple[int, Node, int]] | None:
    """Parts largest first; each on an unused node: already-used switches first, then the
    fewest free GPUs that fit, then the lowest index."""
    used: set[int] = set()
    used_sw: set[str] = set()
    out = []
    for part in sorted(parts, reverse=True):
        best = None
        best_key = None
        for idx, node in cands:
            if idx in used:
                continue
            free = node.gpus_free
            if free < part:
                continue
            sw = leaf.get(node.name)
            k = (0 if (not used_sw or sw in used_sw) else 1, free, idx)
            if best_key is None or k < best_key:
                best, best_key = (idx, node), k
        if best is None:
            return None
        used.add(best[0])
        sw = leaf.get(best[1].name)
        if sw is not None:
            used_sw.add(sw)
        out.append((best[0], best[1], part))
    return out


def pack(
    job: Job | int,
    nodes: Sequence[Node],
    topology: Topology | None = None,
    *,
    gpu_type: str | None = None,
    allow_spread: bool = False,
) -> PackingPlan | None:
    """Place ``job`` (a :class:`Job`, or a bare GPU count) on ``nodes``; ``None`` if it does not fit."""
    if isinstance(job, Job):
        gpu_type = gpu_type or job.gpu_type
        parts = job_parts(job, nodes)
    else:
        parts = request_shape(int(job), [n.gpus for n in nodes] or [1]).per_node
    total = sum(parts)
    cands = [
        (i, n)
        for i, n in enumerate(nodes)
        if n.gpus_free > 0 and (gpu_type is None or n.gpu_type == gpu_type)
    ]
    leaf = topology.leaf_of() if topology is not None and not topology.empty else {}
    placed = None
    if leaf and len(parts) > 1:
        by_switch: dict[str, list[tuple[int, Node]]] = {}
        for i, n in cands:
            sw = leaf.get(n.name)
            if sw is not None:
                by_switch.setdefault(sw, []).append((i, n))
        best_key = None
        for sw, members in by_switch.items():
            p = _place_parts(parts, members, leaf)
            if p is not None:
                k = (sum(n.gpus_free for _, n in members), members[0][0])
                if best_key is None or k < best_key:
                    placed, best_key = p, k
    if placed is None:
        placed = _place_parts(parts, cands, leaf)
    spread = False
    if placed is None:
        if not allow_spread:
            return None
        order = sorted(cands, key=lambda c: (-c[1].gpus_free, c[0]))
        placed, need = [], total
        for idx, node in order:
            if need <= 0:
                break
            take = min(need, node.gpus_free)
            placed.append((idx, node, take))
            need -= take
        if need > 0:
            return None
        spread = len(placed) > len(request_shape(total, [n.gpus for n in nodes]).per_node)
    switches = tuple(dict.fromkeys(leaf[n.name] for _, n, _ in placed if n.name in leaf))
    return PackingPlan(tuple((n.name, g) for _, n, g in placed), switches, spread)


def job_allocation(job: Job) -> dict[str, int]:
    """The GPUs a running job holds per node (``gpus_per_node`` when known, else an even split)."""
    if not job.nodes:
        return {}
    if job.gpus_per_node:
        return {n: job.gpus_per_node for n in job.nodes}
    q, r = divmod(job.num_gpus, len(job.nodes))
    return {n: q + (1 if i < r else 0) for i, n in enumerate(job.nodes)}
