"""Plain records of one GPU sample, before and after attribution to a Slurm job (plain data:
the telemetry edge makes them, the pure idle policy reads them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading of one GPU.

    ``index`` is NVML's enumeration index; ``minor`` the ``/dev/nvidiaN`` minor number (``None``
    when NVML does not report one), which is what Slurm's ``IDX`` counts with ``File=/dev/nvidia[..]``.
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

    @property
    def slurm_index(self) -> int:
        return self.minor if self.minor is not None else self.index


@dataclass(frozen=True)
class JobGpuSample:
    """A GPU sample attributed to the job that held the GPU (``job_id`` 0: no job held it).

    ``idle_since``: when this GPU's current idle spell for this job began (the agent carries it
    from its previous file, see :func:`slurm_dl.telemetry.summary.carry_idle_since`); None while busy
    or unknown.
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
