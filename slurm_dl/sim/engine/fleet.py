"""Clusters of several node groups, each of one GPU type and node size, from the four places a
replay can take them: a site config's ``[[node_groups]]``, the live cluster's nodes (sinfo),
``--node-types v100:15,p100:15 --gpus-per-node 8``, or a fleet file (the openb node list:
``sn,cpu_milli,memory_mib,gpu,model``). Pure parsing; errors are ValueError with one line
naming the option or the file and line."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True, slots=True)
class NodeGroupSpec:
    """``nodes`` nodes of ``gpus_per_node`` GPUs of type ``gpu_type``."""

    gpu_type: str
    nodes: int
    gpus_per_node: int
    name: str = ""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def several_types(groups: Sequence[NodeGroupSpec]) -> bool:
    """Does a replay on ``groups`` need the typed placer (more than one type or node size)?"""
    return len({g.gpu_type for g in groups}) > 1 or len({g.gpus_per_node for g in groups}) > 1


def describe(groups: Sequence[NodeGroupSpec]) -> str:
    """``15 x 8 v100 + 15 x 8 p100 (240 GPUs)``; a long fleet by type: ``G2 4392, T4 842, …``."""
    total = sum(g.gpus for g in groups)
    if len(groups) <= 4:
        return (
            " + ".join(f"{g.nodes} x {g.gpus_per_node} {g.gpu_type}" for g in groups)
            + f" ({total} GPUs)"
        )
    by: dict[str, list[int]] = {}
    for g in groups:
        c = by.setdefault(g.gpu_type, [0, 0])
        c[0] += g.nodes
        c[1] += g.gpus
    return f"{sum(g.nodes for g in groups)} nodes, {total} GPUs: " + ", ".join(
        f"{t} {n} nodes/{k} GPUs" for t, (n, k) in by.items()
    )


def parse_node_types(text: str, gpus_per_node: int | None) -> list[NodeGroupSpec]:
    """``--node-types v100:15,p100:15,k80:15`` (TYPE:NODES, in node order) with
    ``--gpus-per-node`` (default 8)."""
    allowed = "allowed: TYPE:NODES,... like v100:15,p100:15 (each type once, nodes ≥ 1)"
    per = gpus_per_node or 8
    out: list[NodeGroupSpec] = []
    for part in str(text).split(","):
        name, sep, n = part.strip().partition(":")
        if not sep or not _TYPE.match(name) or not n.strip().isdigit() or int(n) < 1:
            raise ValueError(
                f"--node-types: got {text!r}: {part.strip()!r} is not TYPE:NODES; {allowed}"
            )
        if any(g.gpu_type == name for g in out):
            raise ValueError(f"--node-types: got {text!r}: {name} is named twice; {allowed}")
        out.append(NodeGroupSpec(name, int(n), per, name))
    return out


def read_fleet(text: str, source: str) -> list[NodeGroupSpec]:
    """A fleet CSV with columns ``gpu`` (GPUs per node) and ``model`` (GPU type), one row per
    node (the openb node list); nodes without GPUs are left out. Groups are (type, GPUs per
    node), in first-seen order."""
    rows = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("gpu", "model") if c not in (rows.fieldnames or [])]
    if missing:
        raise ValueError(
            f"{source}:1: not a fleet file: no column(s) {', '.join(missing)} "
            "(expected one row per node with gpu and model)"
        )
    counts: dict[tuple[str, int], int] = {}
    for row in rows:
        line = rows.line_num
        raw = (row.get("gpu") or "").strip()
        if not raw.isdigit():
            raise ValueError(
                f"{source}:{line}: column 'gpu': {raw[:20]!r} is not a whole number of GPUs"
            )
        g = int(raw)
        if g == 0:
            continue
        model = (row.get("model") or "").strip()
        if not _TYPE.match(model):
            raise ValueError(
                f"{source}:{line}: column 'model': {model[:40]!r} is not a GPU type name"
            )
        counts[(model, g)] = counts.get((model, g), 0) + 1
    if not counts:
        raise ValueError(f"{source}: no node has a GPU (a fleet needs at least one GPU node)")
    return [NodeGroupSpec(t, n, g, f"{t}x{g}") for (t, g), n in counts.items()]


def groups_from_config(cfg) -> list[NodeGroupSpec]:
    """A site config's ``[[node_groups]]``, in file order."""
    return [
        NodeGroupSpec(g.gpu_type, len(g.node_names), g.gpus_per_node, g.name)
        for g in cfg.node_groups
    ]


def groups_from_nodes(nodes: Iterable) -> list[NodeGroupSpec]:
    """Live GPU nodes (``Node`` with ``gpus`` and ``gpu_type``) grouped by (type, GPUs), in
    node order of first appearance; an untyped node is of type ``gpu``."""
    counts: dict[tuple[str, int], int] = {}
    for n in nodes:
        if n.gpus > 0:
            k = (n.gpu_type or "gpu", n.gpus)
            counts[k] = counts.get(k, 0) + 1
    return [NodeGroupSpec(t, c, g, f"{t}x{g}") for (t, g), c in counts.items()]
