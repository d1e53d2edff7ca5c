"""Map policy scores in [0, 1] onto quantised Slurm SiteFactor values, and compute the pushes.

Pure. ``config.prioritizer.site_factor_levels`` levels spread evenly over
``[0, site_factor_max]``: a score ``s`` becomes level ``round(s × (levels - 1))`` and the value
``level × site_factor_max // (levels - 1)``. Few distinct values mean few ``scontrol update
jobid=1,2,3 SiteFactor=V`` calls (one per value), which is Slurm's fast path.

SiteFactor adds to multifactor's sum, so QOS and partition tiers stay in force; the daemon never
sets ``Priority=``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import ne
from typing import Mapping


@dataclass(frozen=True, slots=True)
class SiteFactorScale:
    levels: int
    maximum: int

    def __post_init__(self) -> None:
        if self.levels < 2:
            raise ValueError(f"site_factor_levels must be >= 2, got {self.levels}")
        if not 1 <= self.maximum <= 2_147_483_645:
            raise ValueError(f"site_factor_max must be in [1, 2147483645], got {self.maximum}")

    @classmethod
    def from_config(cls, config) -> "SiteFactorScale":
        p = config.prioritizer
        return cls(p.site_factor_levels, p.site_factor_max)

    def level(self, score: float) -> int:
        """Level 0 (least urgent) … levels-1 (most urgent). NaN and out-of-range scores clamp."""
        if not math.isfinite(score):
            score = 0.0
        s = min(1.0, max(0.0, score))
        return int(round(s * (self.levels - 1)))

    def value_of_level(self, level: int) -> int:
        level = min(self.levels - 1, max(0, level))
        return level * self.maximum // (self.levels - 1)

    def value(self, score: float) -> int:
        return self.value_of_level(self.level(score))


def site_factors(scores: Mapping[int, float], scale: SiteFactorScale) -> dict[int, int]:
    """SiteFactor value per job id (``scale.value`` of each score, inlined: run per pending job)."""
    top, maximum = scale.levels - 1, scale.maximum
    isfinite = math.isfinite
    out = {}
    for job_id, s in scores.items():
        if not 0.0 <= s <= 1.0:  # out of range or NaN: clamped as ``level`` does
            s = min(1.0, max(0.0, s)) if isfinite(s) else 0.0
        out[job_id] = int(round(s * top)) * maximum // top
    return out


@dataclass(slots=True)
class SiteFactorPushes:
    """What to push: value → sorted job ids that must get it. ``unchanged`` counts the rest."""

    by_value: dict[int, list[int]] = field(default_factory=dict)
    unchanged: int = 0
    deferred: int = 0  # changed, but over the per-cycle limit: pushed by a later cycle

    @property
    def jobs(self) -> int:
        return sum(len(v) for v in self.by_value.values())

    def assignments(self) -> dict[int, int]:
        return {j: v for v, ids in self.by_value.items() for j in ids}


def plan_pushes(
    desired: Mapping[int, int], current: Mapping[int, int], limit: int | None = None
) -> SiteFactorPushes:
    """Only jobs whose desired value differs from the current one, grouped by value.

    ``current`` is what Slurm holds (or what was last pushed); a job missing from it is taken
    to hold 0 (Slurm's default SiteFactor). ``limit`` caps the jobs pushed in one cycle (a first
    cycle over thousands of waiting jobs would otherwise take many seconds of ``scontrol``):
    the jobs at the top of the queue, by what they should hold or now hold, go first, since
    those are the ones Slurm is about to start; the rest are ``deferred`` to later cycles.
    Output is deterministic: values ascending, ids sorted.
    """
    ids, values = list(desired), list(desired.values())  # C-level maps: run over every waiting job
    changed: list[tuple[int, int]] = list(
        compress(zip(ids, values), map(ne, map(current.get, ids, repeat(0)), values))
    )
    unchanged = len(ids) - len(changed)
    deferred = 0
    if limit is not None and len(changed) > limit:
        changed.sort(key=lambda jv: (-max(jv[1], current.get(jv[0], 0)), jv[0]))
        deferred = len(changed) - limit
        changed = changed[:limit]
    groups: dict[int, list[int]] = {}
    for job_id, value in changed:
        groups.setdefault(value, []).append(job_id)
    return SiteFactorPushes({v: sorted(groups[v]) for v in sorted(groups)}, unchanged, deferred)
