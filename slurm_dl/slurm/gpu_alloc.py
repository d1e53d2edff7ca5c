"""Which GPU indices Slurm gave each running job on each node (``squeue --json`` ``gres_detail``).

22.05 writes one ``gres_detail`` entry per allocated node, in the order of the job's expanded
node list: ``gpu:h100:2(IDX:0,3)``; a job on GPU shards ``shard:2(IDX:0)`` (two shards of GPU
0, which other jobs' shards share); 24.11 writes the job's shards on each GPU of the node in
index order instead: ``shard:2(2/8,0/8,0/8,0/8)``. The index is Slurm's GRES index on that node (the order of
the node's ``gres.conf`` devices, i.e. ``/dev/nvidiaN`` for ``File=/dev/nvidia[0-7]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..core.hostlist import expand_hostlist
from .dialects import state_text

_IDX = re.compile(r"^gpu(?::[^:(]+)?(?::\d+)?\(IDX:([^)]*)\)")
_SHARD = re.compile(r"^shard(?::[^:(]+)?:(\d+)\(IDX:([^)]*)\)")
_SHARD_COUNTS = re.compile(r"^shard(?::[^:(]+)?:(\d+)\((\d+/\d+(?:,\d+/\d+)*)\)")


@dataclass(frozen=True)
class GpuAllocation:
    job_id: int
    user: str
    node: str
    gpus: tuple[int, ...]
    shards: int = 0  # > 0: the job holds this many shards of ``gpus``, not the whole GPUs


def parse_idx(entry: str) -> tuple[int, ...]:
    """``gpu:h100:3(IDX:0,2-3)`` -> (0, 2, 3); an entry without GPU indices -> ()."""
    out: list[int] = []
    for part in _top_level(entry):
        m = _IDX.match(part)
        if m:
            out.extend(_indices(m.group(1)))
    return tuple(sorted(set(out)))


def parse_shards(entry: str) -> tuple[tuple[int, ...], int]:
    """``shard:2(IDX:0)`` (22.05) or ``shard:2(2/8,0/8)`` (24.11: the job's shards on each GPU in
    index order) -> ((0,), 2): the GPUs a job's shards are on and how many it holds."""
    gpus: list[int] = []
    count = 0
    for part in _top_level(entry):
        m = _SHARD.match(part)
        if m and (idx := _indices(m.group(2))):
            gpus.extend(idx)
            count += int(m.group(1))
            continue
        m = _SHARD_COUNTS.match(part)
        if m:
            mine = [
                i for i, pair in enumerate(m.group(2).split(",")) if int(pair.partition("/")[0]) > 0
            ]
            if mine:
                gpus.extend(mine)
                count += int(m.group(1))
    return tuple(sorted(set(gpus))), count


def _indices(text: str) -> list[int]:
    if text in ("", "N/A"):
        return []
    out: list[int] = []
    for rng in text.split(","):
        lo, _, hi = rng.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


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
            if node is not None and name != node:
                continue
            gpus, shards = parse_idx(entry), 0
            if not gpus:
                gpus, shards = parse_shards(entry)
            if gpus:
                out.append(
                    GpuAllocation(
                        int(raw["job_id"]), str(raw.get("user_name") or ""), name, gpus, shards
                    )
                )
    return out
