"""Plain records of one GPU sample, before and after attribution to a Slurm job (they live in
:mod:`slurm_dl.core.samples`, where the pure idle policy reads them)."""

from __future__ import annotations

from ..core.samples import GpuSample, JobGpuSample, ProcessSample

__all__ = ["GpuSample", "JobGpuSample", "ProcessSample"]
