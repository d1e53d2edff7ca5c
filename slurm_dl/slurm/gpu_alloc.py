"""Which GPU indices Slurm gave each running job on each node (``squeue --json`` ``gres_detail``).

22.05 writes one ``gres_detail`` entry per allocated node, in the order of the job's expanded
node list: ``gpu:h100:2(IDX:0,3)``. The index is Slurm's GRES index on that node (the order of
the node's ``gres.conf`` devices, i.e. ``/dev/nvidiaN`` for ``File=/dev/nvidia[0-7]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..core.hostlist import expand_hostlist
from .dialects import state_text

_IDX = re.compile(r"^gpu(?::[^:(]+)?(?::\d+)?\(IDX:([^)]*)\)")


@dataclass(frozen=True)
class GpuAllocation:
    job_id: int
    user: str
    node: str
    gpus: tuple[int, ...]


def parse_idx(entry: str) -> tuple[int, ...]:
    """``gpu:h100:3(IDX:0,2-3)`` -> (0, 2, 3); an entry without GPU indices -> ()."""
    out: list[int] = []
    for part in _top_level(entry):
        m = _IDX.match(part)
        if not m or m.group(1) in ("", "N/A"):
            continue
        for rng in m.group(1).split(","):
            lo, _, hi = rng.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(set(out)))


def _top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in (*parts, cur.strip()) if p]


def gpu_allocations(doc: Mapping[str, Any], node: str | None = None) -> list[GpuAllocation]:
    """Running jobs' GPU indices per node from a ``squeue --json`` document (``node``: only that one)."""
    out: list[GpuAllocation] = []
    for raw in doc.get("jobs") or []:
        if state_text(raw.get("job_state")).upper() != "RUNNING":
            continue
        details: Iterable[str] = raw.get("gres_detail") or []
        expr = str(raw.get("nodes") or "")
        try:
            names = expand_hostlist(expr) if expr else []
        except ValueError:
            names = [expr]
        for name, entry in zip(names, details):
            gpus = parse_idx(entry)
            if gpus and (node is None or name == node):
                out.append(GpuAllocation(int(raw["job_id"]), str(raw.get("user_name") or ""), name, gpus))
    return out
