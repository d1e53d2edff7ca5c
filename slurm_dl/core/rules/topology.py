"""Switch requests that can be had: the fewest leaf switches that can hold the job on this
cluster's tree, or none when the job needs every leaf anyway (or the tree is unknown).

``--switches=N`` asks Slurm to place the job under at most N leaf switches and to wait up to
``wait4switch`` for that. Asking for fewer than the tree can give (``-N4`` under two 2-node
leaves with ``--switches=1``) makes the job wait the whole time for nothing.
"""

from __future__ import annotations

from ..config import SiteConfig
from ..hostlist import expand_hostlist
from .decision import FilterContext


def leaves(config: SiteConfig, ctx: FilterContext | None) -> tuple[tuple[str, ...], ...] | None:
    """The leaf switches' node lists, from the site config or Slurm's (via the context); None
    when the site has no topology or the service could not read it."""
    source = config.topology.source
    if source == "none":
        return None
    if source == "config":
        return tuple(tuple(expand_hostlist(s.nodes)) for s in config.topology.switches if s.nodes)
    return ctx.leaf_nodes if ctx is not None else None


def eligible_nodes(config: SiteConfig, gpu_type: str | None, per_node: int) -> set[str]:
    """Nodes that can hold ``per_node`` GPUs of ``gpu_type`` (any type when None)."""
    out: set[str] = set()
    for g in config.node_groups:
        if g.gpus_per_node >= per_node and (gpu_type is None or g.gpu_type == gpu_type):
            out.update(g.node_names)
    return out


def switches_needed(
    nodes: int, leaf_nodes: tuple[tuple[str, ...], ...], eligible: set[str]
) -> int | None:
    """The fewest leaves whose eligible nodes add up to ``nodes``; None when that is every leaf
    with an eligible node (no constraint worth waiting for) or when even all of them fall short."""
    sizes = sorted((sum(1 for n in leaf if n in eligible) for leaf in leaf_nodes), reverse=True)
    sizes = [s for s in sizes if s > 0]
    held = 0
    for k, size in enumerate(sizes, start=1):
        held += size
        if held >= nodes:
            return k if k < len(sizes) else None
    return None


def switch_changes(
    nodes: int,
    per_node: int,
    gpu_type: str | None,
    user_asked: bool,
    config: SiteConfig,
    ctx: FilterContext | None,
) -> dict[str, int]:
    """``req_switch``/``wait4switch`` for a job of ``nodes`` × ``per_node`` GPUs, or nothing."""
    if nodes <= 1 or user_asked:
        return {}
    tree = leaves(config, ctx)
    if not tree:
        return {}
    k = switches_needed(nodes, tree, eligible_nodes(config, gpu_type, per_node))
    if k is None:
        return {}
    return {"req_switch": k, "wait4switch": config.filter.switch_wait_minutes * 60}
