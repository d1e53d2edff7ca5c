"""Pure: attribute GPU samples to the Slurm job that holds each GPU, and sum them per job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..slurm.gpu_alloc import GpuAllocation
from .samples import GpuSample, JobGpuSample


def gpu_owners(allocations: Iterable[GpuAllocation], node: str) -> dict[int, int]:
    """Slurm GPU index -> job id on ``node``."""
    return {gpu: a.job_id for a in allocations if a.node == node for gpu in a.gpus}


def attribute(samples: Iterable[GpuSample], allocations: Iterable[GpuAllocation]) -> list[JobGpuSample]:
    """Each sample tagged with the job holding its GPU (0 when Slurm gave the GPU to nobody)."""
    allocs = list(allocations)
    owners: dict[str, dict[int, int]] = {}
    out: list[JobGpuSample] = []
    for s in samples:
        by_gpu = owners.setdefault(s.node, gpu_owners(allocs, s.node))
        out.append(JobGpuSample(
            job_id=by_gpu.get(s.slurm_index, 0),
            node=s.node,
            gpu=s.slurm_index,
            util_percent=s.util_percent,
            mem_used_bytes=s.mem_used_bytes,
            power_watts=s.power_watts,
            processes=len(s.pids),
            time=s.time,
        ))
    return out


@dataclass(frozen=True)
class JobUtilisation:
    """One job's GPUs at one moment (or averaged over the samples given)."""

    job_id: int
    gpus: int
    mean_util_percent: float
    max_util_percent: float
    mem_used_bytes: int
    power_watts: float
    processes: int


def summarize(samples: Iterable[JobGpuSample]) -> dict[int, JobUtilisation]:
    """Per job: GPUs seen, mean/max utilisation over all samples, memory, power and processes.

    Memory, power and processes are the per-moment sums averaged over the distinct sample times.
    Samples of unallocated GPUs (job 0) are left out.
    """
    groups: dict[int, list[JobGpuSample]] = {}
    for s in samples:
        if s.job_id:
            groups.setdefault(s.job_id, []).append(s)
    out: dict[int, JobUtilisation] = {}
    for job_id, rows in sorted(groups.items()):
        moments = len({r.time for r in rows}) or 1
        out[job_id] = JobUtilisation(
            job_id=job_id,
            gpus=len({(r.node, r.gpu) for r in rows}),
            mean_util_percent=sum(r.util_percent for r in rows) / len(rows),
            max_util_percent=max(r.util_percent for r in rows),
            mem_used_bytes=sum(r.mem_used_bytes for r in rows) // moments,
            power_watts=sum(r.power_watts or 0.0 for r in rows) / moments,
            processes=sum(r.processes for r in rows) // moments,
        )
    return out
