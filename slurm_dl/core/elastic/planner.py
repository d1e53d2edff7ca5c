"""The elastic planner: the GPU count each job runs at next, from the queue in priority order.

One pass, three steps, over a pool of ``total_gpus``:

1. **Admission** (start small rather than wait): in priority order every job is given its
   smallest size (a rigid job its one size) where that still fits; a job whose smallest size
   does not fit waits, and a smaller one behind it may start (Tiresias' greedy pass).
2. **Keep**: in priority order each running job gets back the GPUs it holds, as far as the
   pool allows. Where it does not (waiting work was admitted in step 1), the job is shrunk to
   the largest allowed size that fits: borrowed GPUs go back to the waiting work.
3. **Grow** into what stays idle: repeatedly the one step (a job to a larger allowed size)
   with the most modelled gain per added GPU, ties to the higher priority. A job that is not
   running starts at the size this gives it (no resize to pay). A running job grows only where
   its last start or resize is ``min_resize_interval_s`` old and the time the larger size saves
   over its expected remaining time exceeds ``resize_cost_s``.

Gain per GPU is measured on the job's speed-up curve: ``speedup(n) = speed(n) /
speed(smallest) × smallest``, so perfect scaling gains 1 per added GPU; a step below
``min_gain_per_gpu`` is not taken.

Pure: no I/O, no clock (``now`` is given), no randomness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

START, KEEP, GROW, SHRINK, PREEMPT, WAIT = "start", "keep", "grow", "shrink", "preempt", "wait"


@dataclass(frozen=True, slots=True)
class ElasticJob:
    """One job as the planner sees it.

    ``sizes``: the GPU counts it may run at, ascending (a rigid job: one). ``speeds``: its work
    per second at each of them (any unit, the same for all sizes). ``remaining``: work left, in
    that unit. ``current``: the GPUs it holds now (0: not running). ``last_resize_at``: when it
    last started or was resized (None: never)."""

    job_id: str
    sizes: tuple[int, ...]
    speeds: Mapping[int, float]
    remaining: float
    current: int = 0
    last_resize_at: float | None = None

    def __post_init__(self) -> None:
        if not self.sizes or any(b <= a for a, b in zip(self.sizes, self.sizes[1:])):
            raise ValueError(f"job {self.job_id}: sizes must be ascending, got {self.sizes}")
        if self.sizes[0] < 1:
            raise ValueError(f"job {self.job_id}: sizes must be at least 1 GPU")
        bad = [n for n in self.sizes if not self.speeds.get(n, 0.0) > 0.0]
        if bad:
            raise ValueError(f"job {self.job_id}: no positive speed at {bad[0]} GPUs")

    @property
    def elastic(self) -> bool:
        return len(self.sizes) > 1

    def speedup(self, n: int) -> float:
        low = self.sizes[0]
        return self.speeds[n] / self.speeds[low] * low

    def remaining_s(self, n: int) -> float:
        """Expected remaining run time at ``n`` GPUs."""
        return self.remaining / self.speeds[n]


@dataclass(frozen=True, slots=True)
class ElasticSettings:
    """The ``[elastic]`` settings the planner uses (defaults: slurm_dl.core.config.elastic)."""

    resize_cost_s: float
    min_resize_interval_s: float
    min_gain_per_gpu: float

    @classmethod
    def of(cls, config) -> "ElasticSettings":
        """From an ``ElasticConfig`` (the site config's ``[elastic]``)."""
        return cls(config.resize_cost_s, config.min_resize_interval_s, config.min_gain_per_gpu)


@dataclass(frozen=True, slots=True)
class Decision:
    gpus: int
    reason: str


@dataclass(slots=True)
class _Pass:
    free: int
    alloc: dict[str, int] = field(default_factory=dict)


def plan(
    jobs: Sequence[ElasticJob], total_gpus: int, now: float, settings: ElasticSettings
) -> dict[str, Decision]:
    """The size of each job for the next interval; ``jobs`` in priority order, highest first."""
    p = _Pass(free=total_gpus)
    for j in jobs:  # 1. admission at the smallest size
        if j.sizes[0] <= p.free:
            p.alloc[j.job_id] = j.sizes[0]
            p.free -= j.sizes[0]
    for j in jobs:  # 2. keep what running jobs hold, as far as the pool allows
        a = p.alloc.get(j.job_id)
        if a is None or j.current <= a:
            continue
        kept = max(n for n in j.sizes if n <= min(j.current, a + p.free))
        p.free -= kept - a
        p.alloc[j.job_id] = kept
    _grow(jobs, p, now, settings)
    return {j.job_id: _decision(j, p.alloc.get(j.job_id, 0)) for j in jobs}


def _grow(jobs: Sequence[ElasticJob], p: _Pass, now: float, s: ElasticSettings) -> None:
    while p.free > 0:
        best: tuple[float, int, ElasticJob, int] | None = None
        for rank, j in enumerate(jobs):
            a = p.alloc.get(j.job_id)
            if a is None or not j.elastic:
                continue
            for n in j.sizes:
                if n <= a or n - a > p.free:
                    continue
                gain = (j.speedup(n) - j.speedup(a)) / (n - a)
                if gain < s.min_gain_per_gpu or not may_grow(j, n, now, s):
                    continue
                if best is None or (gain, -rank) > (best[0], -best[1]):
                    best = (gain, rank, j, n)
        if best is None:
            return
        _, _, j, n = best
        p.free -= n - p.alloc[j.job_id]
        p.alloc[j.job_id] = n


def may_grow(j: ElasticJob, n: int, now: float, s: ElasticSettings) -> bool:
    """May ``j`` run at ``n`` GPUs next? Free for a job not running and up to what it holds;
    beyond that only past the minimum interval and where the time saved pays the resize."""
    if j.current == 0 or n <= j.current:
        return True
    if j.last_resize_at is not None and now - j.last_resize_at < s.min_resize_interval_s:
        return False
    return j.remaining_s(j.current) - j.remaining_s(n) > s.resize_cost_s


def _decision(j: ElasticJob, n: int) -> Decision:
    if n == 0:
        return Decision(0, PREEMPT if j.current else WAIT)
    if j.current == 0:
        return Decision(n, START)
    if n == j.current:
        return Decision(n, KEEP)
    return Decision(n, GROW if n > j.current else SHRINK)
