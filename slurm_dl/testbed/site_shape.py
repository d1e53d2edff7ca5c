"""A testbed's own site config: a template (site-configs/testbed.toml) with its GPU types,
partitions and node groups replaced by the testbed's own, for a testbed of several GPU types or
one whose first nodes offer shards (then with a ``[sharing]`` table over a node group of those
nodes). Pure: text in, text out.

Everything else in the template (classes, policy, preemption, filter …) stays as written; its
default partition's ``max_time_minutes`` is carried over to every partition. Speeds are
``shape.DEFAULT_SPEEDS``, placeholders a site replaces with what it measures.
"""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from typing import Sequence

from ..core.hostlist import compress_hostlist
from .shape import (
    DEFAULT_MEMORY_GB,
    DEFAULT_SPEEDS,
    GpuGroup,
    group_node_names,
    partitions,
    spec_of,
)

SHAPE_TABLES = ("gpu_types", "partitions", "node_groups")
SHARING_TABLES = ("sharing", "sharing.groups")
SHARED_SUFFIX = "-shards"
"""A shard node group's name: its GPU type's and this (``h100-shards``)."""
_HEADER = re.compile(r"^[ \t]*\[\[?([^\[\]]+)\]\]?[ \t]*(#.*)?$")


def _node_groups(
    groups: Sequence[GpuGroup], shard_nodes: int
) -> list[tuple[str, GpuGroup, list[str], bool]]:
    """(name, GPU group, node names, offers shards?) of each node group of the site config: a
    GPU group's first nodes among the testbed's first ``shard_nodes`` make a group of their own
    (``TYPE-shards``), its other nodes keep the type's name."""
    out, seen = [], 0
    for g, names in zip(groups, group_node_names(groups)):
        shared = names[: max(0, min(len(names), shard_nodes - seen))]
        seen += len(names)
        if shared:
            out.append((g.gpu_type + SHARED_SUFFIX, g, shared, True))
        if len(shared) < len(names):
            out.append((g.gpu_type, g, names[len(shared) :], False))
    return out


def render_shape_tables(
    groups: Sequence[GpuGroup],
    *,
    cpus: int,
    memory_gb: float,
    max_time_minutes: int | None = None,
    shard_nodes: int = 0,
    shards_per_gpu: int = 0,
) -> str:
    """``[[gpu_types]]``, ``[[partitions]]`` and ``[[node_groups]]`` of a testbed's groups, and
    with shards (the first ``shard_nodes`` nodes, ``shards_per_gpu`` each) ``[sharing]``."""
    out = [
        _comment(
            f"GPU types, partitions and node groups of `slurm-dl testbed up --gpus {spec_of(groups)}`. "
            "speed: relative throughput, v100 = 1.0; PLACEHOLDERS (rough ratios of public training "
            "benchmarks): a site puts what it measures on its own jobs."
        )
    ]
    for g in groups:
        out += ["[[gpu_types]]", f'name = "{g.gpu_type}"']
        memory = DEFAULT_MEMORY_GB.get(g.gpu_type.lower())
        if memory is not None:
            out.append(f"memory_gb = {memory}")
        out += [f"speed = {DEFAULT_SPEEDS.get(g.gpu_type.lower(), 1.0):.1f}", ""]
    for name, _nodes, default in partitions(groups):
        out += ["[[partitions]]", f'name = "{name}"']
        if default:
            out.append("default = true")
        if max_time_minutes is not None:
            out.append(f"max_time_minutes = {max_time_minutes}")
        out.append("")
    layout = partitions(groups)
    node_groups = _node_groups(groups, shard_nodes if shards_per_gpu else 0)
    for name, g, names, _shared in node_groups:
        member_of = [p for p, nodes, _d in layout if set(names) <= set(nodes)]
        out += [
            "[[node_groups]]",
            f'name = "{name}"',
            f'nodes = "{compress_hostlist(names)}"',
            f"gpus_per_node = {g.gpus_per_node}",
            f'gpu_type = "{g.gpu_type}"',
            f"cpus = {cpus}",
            f"memory_gb = {memory_gb:g}",
            f"partitions = {json.dumps(member_of)}",
            "",
        ]
    shared = [name for name, _g, _names, sh in node_groups if sh]
    if shared:
        out += [
            _comment(
                f"GPU sharing (`--shard-nodes {shard_nodes} --shards-per-gpu {shards_per_gpu}`): "
                "the node groups of the shard nodes, with the shards per GPU their gres.conf "
                "gives. Jobs that ask for shards (`--gres=shard:K`, `dlsubmit --share`) go there; "
                "`slurm-dl config defaults` lists the other [sharing] keys."
            ).rstrip("\n"),
            "[sharing]",
            "",
        ]
        for name in shared:
            out += [
                "[[sharing.groups]]",
                f'node_group = "{name}"',
                f"shards_per_gpu = {shards_per_gpu}",
                "",
            ]
    return "\n".join(out)


def _default_max_time(template: str) -> int | None:
    try:
        parts = tomllib.loads(template).get("partitions", [])
    except tomllib.TOMLDecodeError:
        return None
    chosen = next((p for p in parts if p.get("default")), parts[0] if parts else {})
    value = chosen.get("max_time_minutes")
    return value if isinstance(value, int) else None


def with_shape(
    template: str,
    groups: Sequence[GpuGroup],
    *,
    source: str,
    cpus: int,
    memory_gb: float,
    shard_nodes: int = 0,
    shards_per_gpu: int = 0,
) -> str:
    """``template`` with its leading comment saying what this file is and its GPU types,
    partitions and node groups replaced by ``groups``' own (where its first such table was);
    with shards, its ``[sharing]`` too."""
    shards = shard_nodes if shards_per_gpu else 0
    dropped = SHAPE_TABLES + (SHARING_TABLES if shards else ())
    lines = template.splitlines(keepends=True)
    head = 0
    while head < len(lines) and lines[head].lstrip().startswith("#"):
        head += 1
    kept: list[str] = []
    insert_at: int | None = None
    dropping = False
    for line in lines[head:]:
        m = _HEADER.match(line)
        if m:
            dropping = m.group(1).strip() in dropped
            if dropping and insert_at is None:
                insert_at = len(kept)
        if not dropping:
            kept.append(line)
    tables = render_shape_tables(
        groups,
        cpus=cpus,
        memory_gb=memory_gb,
        max_time_minutes=_default_max_time(template),
        shard_nodes=shards,
        shards_per_gpu=shards_per_gpu,
    )
    if insert_at is None:
        insert_at = len(kept)
    nodes = sum(g.nodes for g in groups)
    flags = f" --shard-nodes {shards} --shards-per-gpu {shards_per_gpu}" if shards else ""
    layout = (
        f"{nodes} nodes of {len(groups)} GPU types, one partition and one leaf switch per type, "
        "and the default partition `gpu` over all of them"
        if len(groups) > 1
        else f"{nodes} nodes of {groups[0].gpus_per_node} {groups[0].gpu_type} GPUs in the "
        "partition `gpu`"
    )
    shared = [n for names in group_node_names(groups) for n in names][:shards]
    sharing = f"; {shards_per_gpu} shards per GPU on {compress_hostlist(shared)}" if shards else ""
    intro = _comment(
        f"The local test cluster of `slurm-dl testbed up --gpus {spec_of(groups)}{flags}` "
        f"(TYPE:NODESxGPUS): {layout}{sharing}. Written from {source} (its classes and policy, "
        "with thresholds and grace periods short enough to watch LAS demotion and preemption "
        "within a minute)."
    )
    return "".join([intro] + kept[:insert_at] + [tables + "\n"] + kept[insert_at:])


def _comment(text: str) -> str:
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, width=96, break_on_hyphens=False))
