"""Job array index expressions, counted without expanding them. Pure.

Slurm writes an array's tasks as ``0-49``, ``1,3,5-7``, ``0-15:4`` (every 4th) with an optional
``%N`` throttle (at most N tasks run at once), both in ``sbatch --array`` and in a pending
array's ``array_task_string``. Quotas and admission count the tasks a record stands for, not
the job id: four 50-task arrays are 200 jobs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .jobid import MAX_ARRAY_TASK_ID as MAX_TASK_ID

_PART = re.compile(r"^(\d{1,7})(?:-(\d{1,7})(?::(\d{1,7}))?)?$")


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """How many tasks an index expression names, and its throttle (None: none)."""

    tasks: int
    throttle: int | None = None

    @property
    def concurrent(self) -> int:
        """Tasks that may run at once."""
        return min(self.tasks, self.throttle) if self.throttle else self.tasks


def parse_array(text: str | None) -> ArraySpec | None:
    """The tasks of ``text`` (``0-49%4`` → 50 tasks, throttle 4); None when ``text`` is empty or
    not an index expression Slurm accepts. Overlapping ranges count once per index, as Slurm
    keeps a set of task ids; the cost is linear in the number of ranges, never in the tasks."""
    if not text or not isinstance(text, str) or len(text) > 10_000:
        return None
    body, pct, limit = text.strip().strip("[]").partition("%")
    throttle = None
    if pct:
        if not (limit.isascii() and limit.isdigit()) or len(limit) > 7:
            return None
        throttle = int(limit) or None
    spans: list[tuple[int, int, int]] = []
    for part in body.split(","):
        m = _PART.match(part.strip()) if part.isascii() else None
        if m is None:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1 or hi > MAX_TASK_ID:
            return None
        spans.append((lo, hi - (hi - lo) % step, step))
    return ArraySpec(_count(spans), throttle)


def _count(spans: list[tuple[int, int, int]]) -> int:
    """Distinct indices in the spans (each ``lo..hi`` every ``step``); overlapping stepped
    ranges of over 100,000 indices count their repeats (more, never fewer)."""
    if all(step == 1 for _, _, step in spans):
        total, reach = 0, -1
        for lo, hi, _ in sorted(spans):
            if hi > reach:
                total += hi - max(lo, reach + 1) + 1
                reach = hi
        return total
    total = sum((hi - lo) // step + 1 for lo, hi, step in spans)
    if total > 100_000:
        return total  # stepped ranges that may overlap, too many to list: counted with repeats
    return len({i for lo, hi, step in spans for i in range(lo, hi + 1, step)})
