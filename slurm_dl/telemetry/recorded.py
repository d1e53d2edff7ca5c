"""Recorded GPU readings played through the NVML function names the sampler calls.

``slurm-dl gpu-agent --replay FILE`` reads them instead of the GPUs: on a machine without NVML
(a testbed, CI, a demo) the agent's whole path -- Slurm's allocations, each process's job,
shares, the file it writes -- runs on readings someone recorded or wrote by hand. FILE is JSON,
a list with one object per GPU::

    [{"minor": 0, "util": 35, "mem_used": 12884901888, "mem_total": 85899345920,
      "power_w": 180, "energy_mj": 3600000,
      "processes": [{"pid": 4242, "mem": 12884901888, "sm_util": 30}]}]

Only ``mem_total`` is required; ``processes`` (default none), ``sm_util``, ``power_w`` and
``energy_mj`` (the GPU's energy counter, millijoules since the driver loaded; absent: the GPU
has none, as NVML answers NotSupported) are optional, and ``mem_used`` defaults to the sum of
the processes' memory. ``energy_mj_per_s`` (optional) makes the counter run on by that much per
second of the clock the sampler is given, so a replayed GPU uses energy as a real one does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..core.errors import SlurmDLError


class ReplayError(SlurmDLError, ValueError):
    """A readings file that cannot be replayed: what is wrong and where."""


class _NotSupported(Exception):
    """What NVML raises for a field the GPU does not report."""


def _num(gpu: dict, key: str, where: str, default: float | None = None) -> float | None:
    value = gpu.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ReplayError(f"{where}: {key} must be a number >= 0, not {value!r}")
    return value


def _int(gpu: dict, key: str, where: str, default: int | None = None) -> int | None:
    value = _num(gpu, key, where, default)
    return None if value is None else int(value)


class RecordedNvml:
    """The NVML calls the sampler makes, answered from recorded readings."""

    def __init__(self, gpus: list[dict[str, Any]], source: str = "readings") -> None:
        if not isinstance(gpus, list):
            raise ReplayError(f"{source}: expected a list of GPUs, one object each")
        self.gpus: list[dict[str, Any]] = []
        self.started = time.time()  # when a running counter (energy_mj_per_s) read energy_mj
        for i, gpu in enumerate(gpus):
            where = f"{source}: GPU {i}"
            if not isinstance(gpu, dict):
                raise ReplayError(f"{where}: expected an object, not {gpu!r}")
            procs = gpu.get("processes") or []
            if not isinstance(procs, list) or not all(
                isinstance(p, dict) and "pid" in p for p in procs
            ):
                raise ReplayError(f"{where}: processes must be a list of objects with a pid")
            parsed = [
                SimpleNamespace(
                    pid=_int(p, "pid", where),
                    usedGpuMemory=_int(p, "mem", where),
                    sm_util=_num(p, "sm_util", where),
                )
                for p in procs
            ]
            total = _int(gpu, "mem_total", where)
            if total is None:
                raise ReplayError(f"{where}: mem_total (the GPU's memory in bytes) is required")
            used = _int(gpu, "mem_used", where, sum(p.usedGpuMemory or 0 for p in parsed))
            self.gpus.append(
                {
                    "minor": _int(gpu, "minor", where, i),
                    "util": float(_num(gpu, "util", where, 0) or 0),
                    "mem": (used, total),
                    "power_w": _num(gpu, "power_w", where),
                    "energy_mj": _int(gpu, "energy_mj", where),
                    "energy_mj_per_s": _num(gpu, "energy_mj_per_s", where, 0),
                    "procs": parsed,
                }
            )

    @classmethod
    def from_file(cls, path: Path) -> "RecordedNvml":
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise ReplayError(f"{path}: cannot read it ({e.strerror or e})") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ReplayError(f"{path}: not JSON ({e})") from None
        return cls(data, str(path))

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self.gpus[h]["util"], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        used, total = self.gpus[h]["mem"]
        return SimpleNamespace(used=used, total=total, free=max(0, total - used))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if self.gpus[h]["power_w"] is None:
            raise _NotSupported("power")
        return int(float(self.gpus[h]["power_w"]) * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        gpu = self.gpus[h]
        if gpu["energy_mj"] is None:
            raise _NotSupported("energy counter")
        return int(gpu["energy_mj"] + (gpu["energy_mj_per_s"] or 0) * (time.time() - self.started))

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return self.gpus[h]["minor"]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return list(self.gpus[h]["procs"])

    def nvmlDeviceGetProcessUtilization(self, h: int, since_us: int) -> list[Any]:
        return [
            SimpleNamespace(pid=p.pid, smUtil=float(p.sm_util), memUtil=0, timeStamp=since_us)
            for p in self.gpus[h]["procs"]
            if p.sm_util is not None
        ]
