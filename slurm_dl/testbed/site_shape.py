"""A mixed testbed's site config: a template (site-configs/testbed.toml) with its GPU types,
partitions and node groups replaced by the testbed's own. Pure: text in, text out.

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
_HEADER = re.compile(r"^[ \t]*\[\[?([^\[\]]+)\]\]?[ \t]*(#.*)?$")


def render_shape_tables(
    groups: Sequence[GpuGroup], *, cpus: int, memory_gb: float, max_time_minutes: int | None = None
) -> str:
    """``[[gpu_types]]``, ``[[partitions]]`` and ``[[node_groups]]`` of a testbed's groups."""
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
    for g, names in zip(groups, group_node_names(groups)):
        member_of = [name for name, nodes, _d in layout if set(names) <= set(nodes)]
        out += [
            "[[node_groups]]",
            f'name = "{g.gpu_type}"',
            f'nodes = "{compress_hostlist(names)}"',
            f"gpus_per_node = {g.gpus_per_node}",
            f'gpu_type = "{g.gpu_type}"',
            f"cpus = {cpus}",
            f"memory_gb = {memory_gb:g}",
            f"partitions = {json.dumps(member_of)}",
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
    template: str, groups: Sequence[GpuGroup], *, source: str, cpus: int, memory_gb: float
) -> str:
    """``template`` with its leading comment saying what this file is and its GPU types,
    partitions and node groups replaced by ``groups``' own (where its first such table was)."""
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
            dropping = m.group(1).strip() in SHAPE_TABLES
            if dropping and insert_at is None:
                insert_at = len(kept)
        if not dropping:
            kept.append(line)
    tables = render_shape_tables(
        groups, cpus=cpus, memory_gb=memory_gb, max_time_minutes=_default_max_time(template)
    )
    if insert_at is None:
        insert_at = len(kept)
    intro = _comment(
        f"The local test cluster of `slurm-dl testbed up --gpus {spec_of(groups)}` (TYPE:NODESxGPUS): "
        f"{sum(g.nodes for g in groups)} nodes of {len(groups)} GPU types, one partition and one leaf "
        f"switch per type, and the default partition `gpu` over all of them. Written from {source} (its classes and policy, with thresholds and grace periods "
        f"short enough to watch LAS demotion and preemption within a minute)."
    )
    return "".join([intro] + kept[:insert_at] + [tables + "\n"] + kept[insert_at:])


def _comment(text: str) -> str:
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, width=96, break_on_hyphens=False))
