"""The thin layer over NVML: load ``pynvml`` lazily and read every GPU into :class:`GpuSample`.

Everything above this module works on :class:`GpuSample` values, so tests replay recorded
samples through a stand-in object with the same few ``nvml*`` functions.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..core.errors import SlurmDLError
from .samples import GpuSample, ProcessSample


class NvmlUnavailableError(SlurmDLError, RuntimeError):
    """No NVML on this machine: ``pynvml`` is not installed, or the driver library is missing."""


def load_nvml() -> Any:
    """Import ``pynvml`` and initialise NVML; raise NvmlUnavailableError saying why not."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as e:
        raise NvmlUnavailableError(
            f"no NVML: the pynvml module (package nvidia-ml-py) is not installed ({e})"
        ) from None
    try:
        nvml.nvmlInit()
    except Exception as e:  # pynvml raises NVMLError subclasses; the library may also be absent
        raise NvmlUnavailableError(
            f"no NVML: nvmlInit failed ({e}; is the NVIDIA driver installed?)"
        ) from None
    return nvml


def _optional(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception:  # NVMLError_NotSupported and friends: the field is simply unknown
        return None


def _procs(nvml: Any, handle: Any, now: float) -> tuple[ProcessSample, ...]:
    """Every process with a context on the GPU, its memory (NVML's ``usedGpuMemory``; None where
    the driver does not say) and its mean SM share over the last seconds where NVML samples it."""
    mem: dict[int, int | None] = {}
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        procs = _optional(getattr(nvml, name), handle) if hasattr(nvml, name) else None
        for p in procs or ():
            used = getattr(p, "usedGpuMemory", None)
            pid = int(p.pid)
            if used is not None:
                mem[pid] = max(mem.get(pid) or 0, int(used))  # in both lists: one context
            else:
                mem.setdefault(pid, None)
    util: dict[int, list[float]] = {}
    if mem and hasattr(nvml, "nvmlDeviceGetProcessUtilization"):
        since_us = max(0, int((now - PROCESS_UTIL_WINDOW_S) * 1_000_000))
        for u in _optional(nvml.nvmlDeviceGetProcessUtilization, handle, since_us) or ():
            util.setdefault(int(u.pid), []).append(float(u.smUtil))
    return tuple(
        ProcessSample(pid, mem[pid], sum(util[pid]) / len(util[pid]) if util.get(pid) else None)
        for pid in sorted(mem)
    )


PROCESS_UTIL_WINDOW_S = 30.0


def sample_gpus(nvml: Any, node: str, now: float) -> list[GpuSample]:
    """One reading of every GPU NVML sees; ``now`` is the caller's clock."""
    out: list[GpuSample] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = _optional(nvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:  # fallen off the bus, or gone since the count: no reading of it
            continue
        util = _optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        mem = _optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        power_mw = _optional(nvml.nvmlDeviceGetPowerUsage, handle)
        energy_mj = (
            _optional(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            if hasattr(nvml, "nvmlDeviceGetTotalEnergyConsumption")
            else None
        )
        procs = _procs(nvml, handle, now)
        out.append(
            GpuSample(
                node=node,
                index=index,
                minor=_optional(nvml.nvmlDeviceGetMinorNumber, handle),
                util_percent=float(util.gpu) if util is not None else 0.0,
                mem_used_bytes=int(mem.used) if mem is not None else 0,
                mem_total_bytes=int(mem.total) if mem is not None else 0,
                power_watts=power_mw / 1000.0 if power_mw is not None else None,
                pids=tuple(p.pid for p in procs),
                time=now,
                procs=procs,
                energy_mj=int(energy_mj) if energy_mj is not None else None,
            )
        )
    return out
