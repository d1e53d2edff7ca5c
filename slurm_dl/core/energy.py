"""Pure: each job's GPU energy from the gpu-agents' running sums, and how it is said.

An agent row carries the job's running sum on one GPU since ``energy_since`` (see
:mod:`slurm_dl.telemetry.energy`); a new ``energy_since`` (a requeued job back on the GPU, an
agent file that was lost) starts a new sum. So a job's energy is, per (job, node, GPU, since)
*segment*, the largest sum seen, added over its segments: reading the same file twice, over
many cycles or after a restart, counts nothing twice, and a sum that went down (a reader that
saw an older file) never lowers what is known.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from .samples import JobGpuSample

JOULES_PER_KWH = 3.6e6
NO_ENERGY = "no energy data"

SegmentKey = tuple[int, str, int, float]
"""(job id, node, GPU index, when the agent's sum began)."""


@dataclass(frozen=True, slots=True)
class EnergySegment:
    """One job's energy on one GPU over one unbroken sum of its agent."""

    job_id: int
    node: str
    gpu: int
    since: float
    joules: float
    gpu_seconds: float
    at: float  # the sample time of the sum
    user: str = ""
    account: str = ""

    @property
    def key(self) -> SegmentKey:
        return (self.job_id, self.node, self.gpu, self.since)


@dataclass(frozen=True, slots=True)
class EnergyTotal:
    """Energy over GPU-seconds (share-weighted on shared GPUs)."""

    joules: float = 0.0
    gpu_seconds: float = 0.0

    @property
    def kwh(self) -> float:
        return self.joules / JOULES_PER_KWH

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0

    @property
    def kwh_per_gpu_hour(self) -> float | None:
        return self.kwh / self.gpu_hours if self.gpu_seconds > 0 else None

    def __add__(self, other: "EnergyTotal") -> "EnergyTotal":
        return EnergyTotal(self.joules + other.joules, self.gpu_seconds + other.gpu_seconds)

    def to_dict(self) -> dict[str, float | None]:
        per = self.kwh_per_gpu_hour
        return {
            "joules": round(self.joules, 3),
            "gpu_seconds": round(self.gpu_seconds, 3),
            "kwh": round(self.kwh, 6),
            "gpu_hours": round(self.gpu_hours, 6),
            "kwh_per_gpu_hour": round(per, 6) if per is not None else None,
        }


def segments_of(
    samples: Iterable[JobGpuSample], owners: Mapping[int, tuple[str, str]] | None = None
) -> dict[SegmentKey, EnergySegment]:
    """Each segment's largest sum among ``samples`` (rows without a sum are skipped; job 0,
    a GPU nobody held, too); ``owners``: job -> (user, account), written into each segment."""
    out: dict[SegmentKey, EnergySegment] = {}
    for s in samples:
        if s.job_id <= 0 or s.energy_joules is None or s.energy_since is None:
            continue
        user, account = (owners or {}).get(s.job_id, ("", ""))
        seg = EnergySegment(
            s.job_id,
            s.node,
            s.gpu,
            s.energy_since,
            s.energy_joules,
            s.energy_gpu_seconds or 0.0,
            s.time,
            user,
            account,
        )
        have = out.get(seg.key)
        if have is None or grew(have, seg):
            out[seg.key] = seg
    return out


def grew(known: EnergySegment | None, seen: EnergySegment) -> bool:
    """``seen`` says more than ``known`` (more joules, or as many over more time)."""
    if known is None:
        return True
    return (seen.joules, seen.gpu_seconds) > (known.joules, known.gpu_seconds)


def merge(
    known: dict[SegmentKey, EnergySegment], seen: Mapping[SegmentKey, EnergySegment]
) -> list[EnergySegment]:
    """Fold ``seen`` into ``known`` (in place); the segments that grew (what is to be saved).
    A known segment's user and account are kept where ``seen`` has none."""
    out = []
    for key, seg in seen.items():
        have = known.get(key)
        if not grew(have, seg):
            continue
        if have is not None and not seg.user:
            seg = replace(seg, user=have.user, account=have.account)
        known[key] = seg
        out.append(seg)
    return out


def totals(segs: Iterable[EnergySegment], by: str = "job") -> dict:
    """Energy per job (``by="job"``: job id -> total), per ``"user"`` or per ``"account"``."""
    out: dict = {}
    for s in segs:
        key = s.job_id if by == "job" else getattr(s, by)
        out[key] = out.get(key, EnergyTotal()) + EnergyTotal(s.joules, s.gpu_seconds)
    return out


def energy_words(total: EnergyTotal | Mapping | None) -> str:
    """'1.23 kWh over 4.0 GPU-hours (0.31 kWh per GPU-hour)', or :data:`NO_ENERGY`."""
    if isinstance(total, Mapping):
        total = EnergyTotal(float(total.get("joules") or 0), float(total.get("gpu_seconds") or 0))
    if total is None or (total.joules <= 0 and total.gpu_seconds <= 0):
        return NO_ENERGY
    per = total.kwh_per_gpu_hour
    rate = f" ({per:.2f} kWh per GPU-hour)" if per is not None else ""
    return f"{_kwh(total.kwh)} over {total.gpu_hours:.1f} GPU-hours{rate}"


def _kwh(kwh: float) -> str:
    return f"{kwh:.3f} kWh" if kwh < 10 else f"{kwh:,.1f} kWh"
