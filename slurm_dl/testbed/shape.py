"""The testbed's shape: node groups, one GPU type each, and how Slurm sees them. Pure.

``parse_gpus("h100:2x8,v100:2x8")`` gives two :class:`GpuGroup` (TYPE:NODESxGPUS, comma
separated). One group is the classic testbed (``nodes``/``gpus_per_node``/``gpu_type``) and
renders exactly as it always has. Several groups make a *mixed* testbed, laid out as a
university centre with several GPU generations side by side lays out its cluster:

- **Node names** run on across the groups in the order given: ``h100:2x8,v100:2x8`` is
  ``gpu[01-02]`` (h100) and ``gpu[03-04]`` (v100). Every group, every partition and the whole
  cluster is then one contiguous hostlist, the one-type names and the site config's
  ``gpu[01-04]`` stay as they are, and slurmd's socket paths (``spool/<node>/<node>_<job>.<step>``,
  107 bytes at most) keep their length. Slurm selects by GRES type, feature and partition, never
  by name, and so do slurm-dl's filter and prioritizer.
- **GRES** are typed (``Gres=gpu:v100:8``; gres.conf ``NodeName=gpu[03-04] Name=gpu Type=v100``),
  so ``--gres=gpu:v100:1`` / ``--gpus=v100:1`` pick a type.
- **Features** are the bare type name (``Features=v100``), as most centres spell them, so
  ``--constraint=v100`` and ``--constraint='h100|a100'`` select a type while ``--gpus=N`` stays
  untyped (the GRES type cannot express "any of these types"; a constraint can).
- **Partitions**: one per type, named after it (``h100``, ``v100``), plus the default ``gpu`` over
  every GPU node. A job names several with ``-p h100,v100``: Slurm starts it in whichever offers
  the earliest start (higher PriorityTier first, list order ignored) and puts that partition
  first in the job's record; ``scontrol update JobId=N Partition=v100`` (or a list) re-targets a
  job while it is pending (refused once it runs). That list is the lever a prioritizer has to
  steer a waiting job to the type where it runs fastest, without touching what the user asked.
  Jobs that name none land in ``gpu`` and take any type. All partitions share one tier, so the
  partition factor ranks no job above another.
- **Topology**: one leaf switch per group under one spine (each generation bought, racked and
  cabled at its own time); a single group keeps its two halves.
- CPUs and memory per node are the testbed defaults for every group.

A type may not be called ``gpu`` in a mixed testbed (the default partition has that name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

# slurmd processes share the host (Slurm's multiple-slurmd mode): each costs memory and a port,
# so the count is capped where one machine still carries them (docs/releases.md gives the figures).
MAX_NODES = 512
MAX_GPUS_PER_NODE = 64
DEFAULT_PARTITION = "gpu"
SPEC_EXAMPLE = "h100:2x8,v100:2x8"

# Relative throughput per GPU type written into a mixed testbed's site.toml (``[[gpu_types]]
# speed``, v100 = 1.0). PLACEHOLDERS, roughly the ratios of published mixed-precision training
# benchmarks; a site measures its own. Unknown types get 1.0.
DEFAULT_SPEEDS = {
    "b200": 5.0,
    "h200": 3.5,
    "h100": 3.0,
    "a100": 2.0,
    "l40s": 1.5,
    "a40": 1.2,
    "a10": 0.8,
    "l4": 0.7,
    "v100": 1.0,
    "t4": 0.4,
}
# GPU memory per type (GB), where the type name says it.
DEFAULT_MEMORY_GB = {
    "b200": 192,
    "h200": 141,
    "h100": 80,
    "a100": 80,
    "l40s": 48,
    "a40": 48,
    "a10": 24,
    "l4": 24,
    "v100": 32,
    "t4": 16,
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GROUP = re.compile(r"^(?P<type>[^:\s]+):(?P<nodes>\d+)[xX](?P<gpus>\d+)$")


@dataclass(frozen=True)
class GpuGroup:
    """``nodes`` nodes with ``gpus_per_node`` GPUs of ``gpu_type`` each."""

    gpu_type: str
    nodes: int
    gpus_per_node: int

    def spec(self) -> str:
        return f"{self.gpu_type}:{self.nodes}x{self.gpus_per_node}"

    def to_dict(self) -> dict:
        return {"gpu_type": self.gpu_type, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node}

    @classmethod
    def from_dict(cls, d: dict) -> "GpuGroup":
        return cls(str(d["gpu_type"]), int(d["nodes"]), int(d["gpus_per_node"]))


def parse_gpus(spec: str) -> tuple[GpuGroup, ...]:
    """``"h100:2x8,v100:2x8"`` -> the groups. A ValueError of one line says what is wrong."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty GPU spec; give TYPE:NODESxGPUS[,…], e.g. {SPEC_EXAMPLE}")
    groups = []
    for item in (part.strip() for part in spec.split(",")):
        m = _GROUP.match(item)
        if m is None:
            what = f"bad GPU group {item!r}" if item else f"empty GPU group in {spec!r}"
            raise ValueError(
                f"{what}: expected TYPE:NODESxGPUS, comma-separated, e.g. {SPEC_EXAMPLE}"
            )
        groups.append(GpuGroup(m["type"], int(m["nodes"]), int(m["gpus"])))
    check_groups(groups, zero_gpus_ok=False)
    return tuple(groups)


def check_groups(groups: Sequence[GpuGroup], *, zero_gpus_ok: bool = True) -> None:
    """The limits every testbed shape keeps: a ValueError of one line for the first breach.
    ``zero_gpus_ok``: a single group may have no GPUs (a CPU-only testbed, ``--gpus-per-node 0``)."""
    if not groups:
        raise ValueError("a testbed needs at least one node group")
    seen: dict[str, str] = {}
    for g in groups:
        if not isinstance(g, GpuGroup):
            raise ValueError(f"a node group must be a GpuGroup, got {g!r}")
        if not (isinstance(g.gpu_type, str) and _NAME.match(g.gpu_type)):
            raise ValueError(
                f"GPU type {g.gpu_type!r} is not a plain name (letters, digits and _, like h100)"
            )
        if g.nodes < 1:
            raise ValueError(f"GPU group {g.spec()}: needs at least 1 node")
        floor = 0 if zero_gpus_ok and len(groups) == 1 else 1
        if not floor <= g.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise ValueError(
                f"GPU group {g.spec()}: GPUs per node must be {floor}..{MAX_GPUS_PER_NODE}, "
                f"got {g.gpus_per_node}"
            )
        key = g.gpu_type.lower()
        if key in seen:
            raise ValueError(
                f"GPU type {g.gpu_type} appears twice ({seen[key]}, {g.spec()}): one group per type"
            )
        seen[key] = g.spec()
        if len(groups) > 1 and key == DEFAULT_PARTITION:
            raise ValueError(
                f"GPU type {g.gpu_type!r} would clash with the default partition "
                f"{DEFAULT_PARTITION!r}: choose another name"
            )
    total = total_nodes(groups)
    if total > MAX_NODES:
        raise ValueError(
            f"{total} nodes in all ({', '.join(g.spec() for g in groups)}); "
            f"a testbed has at most {MAX_NODES}"
        )


def as_groups(gpus: str | Iterable[GpuGroup]) -> tuple[GpuGroup, ...]:
    """A spec string or node groups, checked."""
    if isinstance(gpus, str):
        return parse_gpus(gpus)
    groups = tuple(gpus)
    check_groups(groups)
    return groups


def total_nodes(groups: Sequence[GpuGroup]) -> int:
    return sum(g.nodes for g in groups)


def is_mixed(groups: Sequence[GpuGroup]) -> bool:
    """Several GPU types: per-type features, partitions and leaf switches."""
    return len(groups) > 1


def spec_of(groups: Sequence[GpuGroup]) -> str:
    return ",".join(g.spec() for g in groups)


def describe(groups: Sequence[GpuGroup]) -> str:
    """``4 nodes x 8 h100 GPUs``; mixed: ``4 nodes (2 x 8 h100, 2 x 8 v100 GPUs)``."""
    if not is_mixed(groups):
        g = groups[0]
        return f"{g.nodes} nodes x {g.gpus_per_node} {g.gpu_type} GPUs"
    return f"{total_nodes(groups)} nodes ({', '.join(f'{g.nodes} x {g.gpus_per_node} {g.gpu_type}' for g in groups)} GPUs)"


def name_digits(total: int) -> int:
    """Digits in node names: two (gpu01, as in site-configs/testbed.toml) up to 99 nodes, three
    (gpu001) above, so that names sort and compress to one range either way."""
    return 2 if total <= 99 else 3


def node_names(count: int, start: int = 1, digits: int = 2) -> list[str]:
    """gpu01, gpu02, … (``digits`` digits)."""
    return [f"gpu{i:0{digits}d}" for i in range(start, start + count)]


def group_node_names(groups: Sequence[GpuGroup]) -> list[list[str]]:
    """Each group's node names, numbered on across the groups."""
    out, start = [], 1
    digits = name_digits(total_nodes(groups))
    for g in groups:
        out.append(node_names(g.nodes, start, digits))
        start += g.nodes
    return out


def feature(group: GpuGroup) -> str:
    """The node feature of a group's nodes (``--constraint`` selects it)."""
    return group.gpu_type


def partitions(groups: Sequence[GpuGroup]) -> list[tuple[str, list[str], bool]]:
    """(name, node names, default?) of every partition: ``gpu`` over all nodes, then, when
    mixed, one per GPU type."""
    names = group_node_names(groups)
    layout = [(DEFAULT_PARTITION, [n for ns in names for n in ns], True)]
    if is_mixed(groups):
        layout += [(g.gpu_type, ns, False) for g, ns in zip(groups, names)]
    return layout


def halves(names: list[str]) -> list[list[str]]:
    """Split nodes into two leaf switches (first half, second half); one leaf for a single node."""
    if len(names) <= 1:
        return [list(names)]
    half = (len(names) + 1) // 2
    return [names[:half], names[half:]]


def leaves(groups: Sequence[GpuGroup]) -> list[list[str]]:
    """The node names under each leaf switch: halves of a single group, one leaf per group when mixed."""
    names = group_node_names(groups)
    if not is_mixed(groups):
        return halves(names[0])
    return names
