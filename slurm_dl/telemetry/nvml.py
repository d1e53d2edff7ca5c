"""The thin layer over NVML: load ``pynvml`` lazily and read every GPU into :class:`GpuSample`.

Everything above this module works on :class:`GpuSample` values, so tests replay recorded
samples through a stand-in object with the same few ``nvml*`` functions.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..core.errors import SlurmDLError
from .samples import GpuSample


class NvmlUnavailableError(SlurmDLError, RuntimeError):
    """No NVML on this machine: ``pynvml`` is not installed, or the driver library is missing."""


def load_nvml() -> Any:
    """Import ``pynvml`` and initialise NVML; raise NvmlUnavailableError saying why not."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as e:
        raise NvmlUnavailableError(f"no NVML: the pynvml module (package nvidia-ml-py) is not installed ({e})") from None
    try:
        nvml.nvmlInit()
    except Exception as e:  # pynvml raises NVMLError subclasses; the library may also be absent
        raise NvmlUnavailableError(f"no NVML: nvmlInit failed ({e}; is the NVIDIA driver installed?)") from None
    return nvml


def _optional(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception:  # NVMLError_NotSupported and friends: the field is simply unknown
        return None


def _pids(nvml: Any, handle: Any) -> tuple[int, ...]:
    pids: set[int] = set()
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        procs = _optional(getattr(nvml, name), handle) if hasattr(nvml, name) else None
        pids.update(int(p.pid) for p in procs or ())
    return tuple(sorted(pids))


def sample_gpus(nvml: Any, node: str, now: float) -> list[GpuSample]:
    """One reading of every GPU NVML sees; ``now`` is the caller's clock."""
    out: list[GpuSample] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        util = _optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        mem = _optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        power_mw = _optional(nvml.nvmlDeviceGetPowerUsage, handle)
        out.append(GpuSample(
            node=node,
            index=index,
            minor=_optional(nvml.nvmlDeviceGetMinorNumber, handle),
            util_percent=float(util.gpu) if util is not None else 0.0,
            mem_used_bytes=int(mem.used) if mem is not None else 0,
            mem_total_bytes=int(mem.total) if mem is not None else 0,
            power_watts=power_mw / 1000.0 if power_mw is not None else None,
            pids=_pids(nvml, handle),
            time=now,
        ))
    return out
