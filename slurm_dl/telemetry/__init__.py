"""GPU telemetry: NVML sampling on each GPU node, attribution of GPUs to Slurm jobs, and the
Prometheus text exposition the prioritizer reads. The only package that imports ``pynvml``
(lazily, in :mod:`slurm_dl.telemetry.nvml`)."""

from .samples import GpuSample, JobGpuSample

__all__ = ["GpuSample", "JobGpuSample"]
