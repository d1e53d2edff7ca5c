"""How SiteFactor combines with the site's own multifactor weights (pure).

Slurm's multifactor priority is ``sum(PriorityWeightX * factor_x)`` with every factor in [0, 1],
plus the job's SiteFactor, added as is. The prioritizer's SiteFactors span
``[0, site_factor_max]`` (and ``-site_factor_max`` for jobs parked for idle GPUs), so when
``site_factor_max`` is larger than a weight, slurm-dl's order overrides that factor: with
``PriorityWeightFairshare=100000`` and ``site_factor_max=1000000`` one SiteFactor level
(``site_factor_max / (site_factor_levels - 1)``) already outweighs a tenth of the whole fair-share range.
"""

from __future__ import annotations

import re
from typing import Mapping

WEIGHT_KEYS = (
    "PriorityWeightAge",
    "PriorityWeightAssoc",
    "PriorityWeightFairshare",
    "PriorityWeightJobSize",
    "PriorityWeightPartition",
    "PriorityWeightQOS",
)


def parse_slurm_conf(text: str) -> dict[str, str]:
    """``Key=Value`` settings of a slurm.conf (comments and node/partition lines skipped; keys as
    written, the last one wins as in Slurm)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        m = re.match(r"^([A-Za-z][A-Za-z0-9_]*)\s*=\s*(\S.*?)\s*$", line)
        if m and m.group(1).lower() not in ("nodename", "partitionname", "include"):
            out[m.group(1)] = m.group(2)
    return out


def priority_weights(conf: Mapping[str, str]) -> dict[str, int]:
    """The PriorityWeight* settings that are > 0 (keys matched case-insensitively)."""
    lower = {k.lower(): v for k, v in conf.items()}
    out = {}
    for key in WEIGHT_KEYS:
        raw = lower.get(key.lower())
        try:
            value = int(str(raw).split()[0]) if raw is not None else 0
        except ValueError:
            continue
        if value > 0:
            out[key] = value
    return out


def swamp_warnings(
    site_factor_max: int, site_factor_levels: int, conf: Mapping[str, str]
) -> list[str]:
    """One line per site weight that SiteFactor's range overrides, with what to change."""
    lower = {k.lower(): v for k, v in conf.items()}
    ptype = lower.get("prioritytype", "")
    if ptype and "multifactor" not in ptype:
        return [
            f"PriorityType={ptype}: SiteFactor only counts under priority/multifactor; "
            "set PriorityType=priority/multifactor"
        ]
    weights = priority_weights(conf)
    step = site_factor_max / max(1, site_factor_levels - 1)
    out = []
    for key, w in sorted(weights.items()):
        if site_factor_max > w:
            out.append(
                f"[prioritizer] site_factor_max = {site_factor_max} exceeds {key}={w}: slurm-dl's "
                f"order overrides that factor (one SiteFactor level is {step:.0f}, "
                f"{step / w:.2g} times its whole range); to keep it, set site_factor_max below {w} "
                f"or raise {key}"
            )
    return out
