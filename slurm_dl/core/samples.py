"""Plain records of one GPU sample, before and after attribution to a Slurm job (plain data:
the telemetry edge makes them, the pure idle policy reads them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessSample:
    """One process holding a context on a GPU (NVML's process list): its memory and, where NVML
    keeps per-process samples, its share of the GPU's compute (None: not reported)."""

    pid: int
    mem_bytes: int | None = None
    sm_util_percent: float | None = None


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading of one GPU.

    ``index`` is NVML's enumeration index; ``minor`` the ``/dev/nvidiaN`` minor number (``None``
    when NVML does not report one), which is what Slurm's ``IDX`` counts with ``File=/dev/nvidia[..]``.
    ``energy_mj``: NVML's energy counter (millijoules since the driver loaded; None where the GPU
    has none).
    """

    node: str
    index: int
    minor: int | None
    util_percent: float
    mem_used_bytes: int
    mem_total_bytes: int
    power_watts: float | None
    pids: tuple[int, ...]
    time: float
    procs: tuple[ProcessSample, ...] = ()
    energy_mj: int | None = None

    @property
    def slurm_index(self) -> int:
        return self.minor if self.minor is not None else self.index


@dataclass(frozen=True)
class JobGpuSample:
    """A GPU sample attributed to the job that held the GPU (``job_id`` 0: no job held it).

    ``idle_since``: when this GPU's current idle spell for this job began (the agent carries it
    from its previous file, see :func:`slurm_dl.telemetry.summary.carry_idle_since`); None while busy
    or unknown. ``share_bytes``: on a shared GPU, the memory the job's shards guarantee it there
    (None: the job holds the whole GPU, or the site did not say what a shard is worth).

    Energy (see :mod:`slurm_dl.telemetry.energy`): ``energy_joules`` is what this job used on this
    GPU since ``energy_since`` (its share of it on a shared GPU), over ``energy_gpu_seconds``
    GPU-seconds (share-weighted likewise); ``counter_joules`` the GPU's own energy counter at this
    sample (None where it has none); ``gpu_share`` the part of the GPU the job holds (None:
    all of it; not written to the agent's file).
    """

    job_id: int
    node: str
    gpu: int
    util_percent: float
    mem_used_bytes: int
    power_watts: float | None
    processes: int
    time: float
    idle_since: float | None = None
    share_bytes: int | None = None
    energy_joules: float | None = None
    energy_gpu_seconds: float | None = None
    energy_since: float | None = None
    counter_joules: float | None = None
    gpu_share: float | None = None

    @property
    def over_share(self) -> bool:
        """On a shared GPU, the job uses more memory than its shards guarantee."""
        return self.share_bytes is not None and self.mem_used_bytes > self.share_bytes
