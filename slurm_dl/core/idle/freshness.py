"""Pure: how old the gpu-agents' samples are, and when they are too old to count.

An agent writes its node's file every ``[telemetry] sample_seconds``. A node whose newest
sample is older than :func:`stale_after_seconds` has a gap in its data: the idle clock of its
jobs stops at that sample (missing data never counts as idle time) and a stored idle spell is
not carried across the gap. The prioritizer (its log and metrics), ``slurm-dl explain`` and
``slurm-dl doctor`` all judge a sample's age by this one limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..config import TelemetryConfig
from ..samples import JobGpuSample

MIN_STALE_AFTER_S = 120.0
"""The limit never drops below two minutes (a shared filesystem's caching, a slow write)."""


def stale_after_seconds(cfg: TelemetryConfig) -> float:
    """How old an agent's newest sample may be and still count: three sample periods (an
    agent may miss two), at least :data:`MIN_STALE_AFTER_S`."""
    return max(MIN_STALE_AFTER_S, 3.0 * cfg.sample_seconds)


def newest_by_node(samples: Iterable[JobGpuSample]) -> dict[str, float]:
    """Each node's newest sample time (Unix seconds)."""
    out: dict[str, float] = {}
    for s in samples:
        if s.time > out.get(s.node, float("-inf")):
            out[s.node] = s.time
    return out


def job_sampled_at(samples: Iterable[JobGpuSample]) -> dict[int, float]:
    """Per job: when its GPUs were last all sampled (the oldest of its GPUs' newest samples),
    the moment its utilisation and idle time speak for."""
    latest: dict[tuple[int, str, int], float] = {}
    for s in samples:
        key = (s.job_id, s.node, s.gpu)
        if s.job_id and s.time > latest.get(key, float("-inf")):
            latest[key] = s.time
    out: dict[int, float] = {}
    for (job_id, _, _), t in latest.items():
        out[job_id] = min(t, out.get(job_id, t))
    return out


@dataclass(frozen=True)
class Freshness:
    """The age of each node's newest sample at one moment, against the limit."""

    ages: dict[str, float] = field(default_factory=dict)  # node -> seconds (0: from the future)
    limit: float = MIN_STALE_AFTER_S

    @property
    def stale(self) -> list[str]:
        return sorted(n for n, age in self.ages.items() if age > self.limit)

    @property
    def fresh(self) -> list[str]:
        return sorted(n for n, age in self.ages.items() if age <= self.limit)


def freshness(samples: Iterable[JobGpuSample], now: float, cfg: TelemetryConfig) -> Freshness:
    """How old each node's newest sample is at ``now`` (a clock ahead of ours counts as 0)."""
    return Freshness(
        {n: max(0.0, now - t) for n, t in sorted(newest_by_node(samples).items())},
        stale_after_seconds(cfg),
    )


def age_words(seconds: float) -> str:
    """An age for people: '40 s', '14 min', '3 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"
