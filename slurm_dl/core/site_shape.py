"""Derived views of the site config that the rules look up on every job (GPUs per node by type,
node counts), computed once per config object instead of expanding hostlists per decision."""

from __future__ import annotations

from dataclasses import dataclass

from .config import SiteConfig


@dataclass(frozen=True, slots=True)
class SiteShape:
    gpus_per_node_by_type: dict[str, int]
    gpus_total_by_type: dict[str, int]
    nodes_with_most_gpus: dict[
        str | None, tuple[int, int]
    ]  # type (None: any) -> (GPUs per node, nodes)
    max_gpus_per_node: int
    total_gpus: int
    node_count: int
    node_cpus_mem: dict[
        str | None, tuple[int, int]
    ]  # type (None: any) -> (fewest CPUs, least memory MB) of its nodes


def _build(config: SiteConfig) -> SiteShape:
    per_node: dict[str, int] = {}
    total: dict[str, int] = {}
    counts: dict[str, int] = {g.name: len(g.node_names) for g in config.node_groups}
    for g in config.node_groups:
        per_node[g.gpu_type] = max(per_node.get(g.gpu_type, 0), g.gpus_per_node)
        total[g.gpu_type] = total.get(g.gpu_type, 0) + g.gpus_per_node * counts[g.name]
    top = max((g.gpus_per_node for g in config.node_groups), default=0)
    widest: dict[str | None, tuple[int, int]] = {
        None: (top, sum(counts[g.name] for g in config.node_groups if g.gpus_per_node == top))
    }
    for t, most in per_node.items():
        widest[t] = (
            most,
            sum(
                counts[g.name]
                for g in config.node_groups
                if g.gpu_type == t and g.gpus_per_node == most
            ),
        )
    cpus_mem: dict[str | None, tuple[int, int]] = {}
    for g in config.node_groups:
        for key in (None, g.gpu_type):
            have = cpus_mem.get(key)
            mine = (g.cpus, int(g.memory_gb * 1024))
            cpus_mem[key] = mine if have is None else (min(have[0], mine[0]), min(have[1], mine[1]))
    return SiteShape(
        per_node, total, widest, top, sum(total.values()), sum(counts.values()), cpus_mem
    )


_CACHE: dict[int, tuple[SiteConfig, SiteShape]] = {}


def site_shape(config: SiteConfig) -> SiteShape:
    """The derived tables for ``config`` (memoised per config object; configs are frozen)."""
    hit = _CACHE.get(id(config))
    if hit is not None and hit[0] is config:
        return hit[1]
    shape = _build(config)
    if len(_CACHE) >= 16:
        _CACHE.clear()
    _CACHE[id(config)] = (config, shape)
    return shape
