"""Benchmark the GPU agent's sampling path: CPU time per sample per GPU.

By default NOT a real-GPU measurement: NVML is a stand-in object answering the same pynvml calls
with fixed readings at (near) zero cost, so what is measured is slurm-dl's own Python work above
NVML, which is what a real agent adds on top of the driver. With --nvml the same three paths run
on the machine's real NVML and GPUs (the bare calls then include the driver's own cost):

  bare_calls   the pynvml calls alone, made in a plain loop (the baseline: the least any sampler does)
  sampler      slurm_dl.telemetry.nvml.sample_gpus (the same calls + building GpuSample records)
  full_path    sample_once: sampler + attribution to Slurm jobs + Prometheus text + atomic file write
               (the Slurm allocation lookup is a constant list here; a real agent adds one
               `squeue --json` per sample, which is not per GPU)

All in the same run, CPU time (process_time), best of --repeats. Ratios are against bare_calls.
Prints one JSON object and one human line.
Usage: python benchmarks/bench_telemetry.py [--gpus 8] [--nvml]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_dl.slurm.gpu_alloc import GpuAllocation  # noqa: E402
from slurm_dl.telemetry.agent import sample_once  # noqa: E402
from slurm_dl.telemetry.nvml import NvmlUnavailableError, load_nvml, sample_gpus  # noqa: E402


class StandInNvml:
    """Constant readings behind the pynvml function names (no driver involved)."""

    def __init__(self, gpus: int):
        self.n = gpus
        self._util = SimpleNamespace(gpu=93, memory=40)
        self._mem = SimpleNamespace(used=40 << 30, total=80 << 30, free=40 << 30)
        self._procs = [SimpleNamespace(pid=4242, usedGpuMemory=40 << 30)]

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._util

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._mem

    def nvmlDeviceGetPowerUsage(self, h):
        return 612_000

    def nvmlDeviceGetMinorNumber(self, h):
        return h

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._procs

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return []


def bare_calls(nvml, node: str, now: float) -> None:
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        (
            nvml.nvmlDeviceGetUtilizationRates(h),
            nvml.nvmlDeviceGetMemoryInfo(h),
            nvml.nvmlDeviceGetPowerUsage(h),
        )
        nvml.nvmlDeviceGetMinorNumber(h), nvml.nvmlDeviceGetComputeRunningProcesses(h)
        nvml.nvmlDeviceGetGraphicsRunningProcesses(h)


def cpu_per_sample(fn, samples: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for k in range(samples):
            fn(float(k))
        best = min(best, (time.process_time() - t0) / samples)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--nvml", action="store_true", help="the machine's real NVML and GPUs (--gpus ignored)"
    )
    a = ap.parse_args()
    if a.nvml:
        try:
            nvml = load_nvml()
        except NvmlUnavailableError as e:
            print(json.dumps({"skipped": str(e)}))
            print(f"telemetry: skipped, {e}")
            return
        a.gpus = nvml.nvmlDeviceGetCount()
        if a.gpus == 0:
            print(json.dumps({"skipped": "NVML sees no GPU"}))
            print("telemetry: skipped, NVML sees no GPU")
            return
    else:
        nvml = StandInNvml(a.gpus)
    what = "real NVML" if a.nvml else "stand-in NVML, not a real GPU"
    allocs = [
        GpuAllocation(101, "ann", "gpu01", tuple(range(a.gpus // 2))),
        GpuAllocation(102, "bob", "gpu01", tuple(range(a.gpus // 2, a.gpus))),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-telemetry-") as tmp:
        out = Path(tmp)
        paths = {
            "bare_calls": lambda now: bare_calls(nvml, "gpu01", now),
            "sampler": lambda now: sample_gpus(nvml, "gpu01", now),
            "full_path": lambda now: sample_once(nvml, "gpu01", lambda node: allocs, out, now=now),
        }
        per_sample = {k: cpu_per_sample(fn, a.samples, a.repeats) for k, fn in paths.items()}
    us_per_gpu = {k: v / a.gpus * 1e6 for k, v in per_sample.items()}
    result = {
        "what": f"CPU time per sample per GPU of slurm-dl's sampling path ({what})",
        "nvml": "real" if a.nvml else "stand-in",
        "gpus": a.gpus,
        "samples": a.samples,
        "repeats": a.repeats,
        "cpu_us_per_gpu": {k: round(v, 2) for k, v in us_per_gpu.items()},
        "ratio_vs_bare_calls": {
            k: round(v / us_per_gpu["bare_calls"], 2) for k, v in us_per_gpu.items()
        },
        "full_path_cpu_percent_at_30s_interval": round(per_sample["full_path"] / 30.0 * 100, 5),
    }
    print(json.dumps(result, indent=1))
    print(
        f"telemetry ({what}): {us_per_gpu['full_path']:.1f} us CPU per GPU per sample "
        f"for the full path ({result['ratio_vs_bare_calls']['full_path']:.1f}x the bare NVML calls at "
        f"{us_per_gpu['bare_calls']:.2f} us), sampler alone {us_per_gpu['sampler']:.1f} us; "
        f"{a.gpus} GPUs every 30 s = {result['full_path_cpu_percent_at_30s_interval']:.4f}% of one core"
    )


if __name__ == "__main__":
    main()
