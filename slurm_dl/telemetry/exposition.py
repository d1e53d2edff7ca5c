"""Pure: per-GPU job samples <-> Prometheus text exposition.

The agent writes one file per node (``<dir>/<node>.prom``, replaced atomically). On one machine
the prioritizer reads the directory; on many nodes the same files are served by node_exporter's
textfile collector or sit on a shared filesystem, so no extra server is needed.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

from .samples import JobGpuSample

METRICS = {
    "slurm_dl_gpu_utilization_percent": (
        "GPU utilisation over the last NVML sample period",
        "util_percent",
    ),
    "slurm_dl_gpu_memory_used_bytes": ("GPU memory in use", "mem_used_bytes"),
    "slurm_dl_gpu_power_watts": ("GPU power draw", "power_watts"),
    "slurm_dl_gpu_processes": ("processes holding a GPU context", "processes"),
    "slurm_dl_gpu_idle_since_seconds": (
        "start of the GPU's current idle spell for its job (Unix time); absent while busy",
        "idle_since",
    ),
    "slurm_dl_gpu_share_bytes": (
        "GPU memory the job's shards guarantee on this shared GPU; absent on a "
        "whole GPU (memory used above it: the job is over its share)",
        "share_bytes",
    ),
    "slurm_dl_gpu_job_energy_joules": (
        "energy the job used on this GPU (its share of it on a shared GPU) since "
        "slurm_dl_gpu_job_energy_since_seconds",
        "energy_joules",
    ),
    "slurm_dl_gpu_job_energy_gpu_seconds": (
        "GPU-seconds over which slurm_dl_gpu_job_energy_joules was measured",
        "energy_gpu_seconds",
    ),
    "slurm_dl_gpu_job_energy_since_seconds": (
        "when the job's energy sum on this GPU began (Unix time)",
        "energy_since",
    ),
    "slurm_dl_gpu_energy_counter_joules": (
        "the GPU's energy counter (NVML, since the driver loaded); absent where it has none",
        "counter_joules",
    ),
}

NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", re.ASCII)
"""A node name the agents' files may carry (and ``<node>.prom`` may be named by): a host name."""

MAX_JOB_ID = 2**32 - 1  # Slurm's job ids are 32-bit
MAX_GPU_INDEX = 65535
MAX_BYTES = 2**60  # an exbibyte of GPU memory: anything above is not a reading
MAX_WATTS = 100_000.0
MAX_PROCESSES = 1_000_000
MAX_TIME = 4_102_444_800.0  # 2100-01-01 UTC: a sample time (or idle start) past it is not a reading
MAX_LINE_CHARS = 4096
MAX_JOULES = 1e15  # a megawatt for thirty years: anything above is not a reading
MAX_SECONDS = 1e12

_LINE = re.compile(
    r'^(\w+)\{job="([0-9]{1,10})",node="([^"]*)",gpu="([0-9]{1,5})"\} (\S{1,64}) ([0-9]{1,16})$',
    re.ASCII,
)
_RANGE = {  # field -> (lowest, highest, whole numbers only)
    "util_percent": (0.0, 100.0, False),
    "mem_used_bytes": (0, MAX_BYTES, True),
    "power_watts": (0.0, MAX_WATTS, False),
    "processes": (0, MAX_PROCESSES, True),
    "idle_since": (0.0, MAX_TIME, False),
    "share_bytes": (0, MAX_BYTES, True),
    "energy_joules": (0.0, MAX_JOULES, False),
    "energy_gpu_seconds": (0.0, MAX_SECONDS, False),
    "energy_since": (0.0, MAX_TIME, False),
    "counter_joules": (0.0, MAX_JOULES, False),
}
_REQUIRED = ("util_percent", "processes")  # the agent writes both for every GPU it samples


def render(samples: Iterable[JobGpuSample]) -> str:
    """Prometheus text format; the timestamp is the sample time in milliseconds."""
    rows = list(samples)
    lines: list[str] = []
    for name, (help_text, attr) in METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for s in rows:
            value = getattr(s, attr)
            if value is None:
                continue
            lines.append(
                f'{name}{{job="{s.job_id}",node="{s.node}",gpu="{s.gpu}"}} {_number(value)} {round(s.time * 1000)}'
            )
    return "\n".join(lines) + "\n"


def _number(value: float | int) -> str:
    """Exact: integers as integers (byte counts stay exact), floats in their shortest round-trip form."""
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _value(attr: str, text: str) -> float | int | None:
    """The line's value when it is a finite number in its field's range, else None (counts and
    byte figures as exact integers)."""
    low, high, whole = _RANGE[attr]
    try:
        v: float | int = int(text) if whole and text.isascii() and text.isdigit() else float(text)
    except ValueError:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if not low <= v <= high:  # before any int(): a 60-digit count stops here
        return None
    if whole:
        if isinstance(v, float) and not v.is_integer():
            return None
        v = int(v)
    return v


def _energy(f: dict[str, float | int], time: float) -> dict[str, float | None]:
    """A row's energy fields: its sum only with both its GPU-seconds and a start no later than
    the sample (else none of the three; the raw counter stands alone)."""
    since = f.get("energy_since")
    whole = "energy_joules" in f and "energy_gpu_seconds" in f and since is not None
    ok = whole and since <= time
    return {
        "energy_joules": float(f["energy_joules"]) if ok else None,
        "energy_gpu_seconds": float(f["energy_gpu_seconds"]) if ok else None,
        "energy_since": float(since) if ok and since is not None else None,
        "counter_joules": float(f["counter_joules"]) if "counter_joules" in f else None,
    }


def parse(text: str) -> list[JobGpuSample]:
    """The samples of a file written by :func:`render` (other lines are ignored)."""
    return parse_counted(text)[0]


def parse_counted(text: str) -> tuple[list[JobGpuSample], int]:
    """The samples of a file written by :func:`render`, and how many of its sample lines were
    refused. Comments and lines of other metrics are ignored; a line with a value that is not a
    finite number in its metric's range (NaN, inf, a negative count, a utilisation over 100 %),
    a bad label or a timestamp outside 1970-2100 is refused on its own, and so is a GPU whose
    utilisation or process count is missing (it would look idle). Never raises on any text."""
    fields: dict[tuple[int, str, int, int], dict[str, float | int]] = {}
    bad = 0
    for line in text.splitlines():
        line = line.strip()
        if line.partition("{")[0] not in METRICS:
            continue  # comments, other metrics
        m = _LINE.match(line) if len(line) <= MAX_LINE_CHARS else None
        if m is None:
            bad += 1
            continue
        attr = METRICS[m.group(1)][1]
        job_id, node, gpu, ms = int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(6))
        value = _value(attr, m.group(5))
        if (
            value is None
            or job_id > MAX_JOB_ID
            or gpu > MAX_GPU_INDEX
            or not NODE_NAME.fullmatch(node)
            or ms > MAX_TIME * 1000
        ):
            bad += 1
            continue
        fields.setdefault((job_id, node, gpu, ms), {})[attr] = value
    out = []
    for (job_id, node, gpu, ms), f in sorted(
        fields.items(), key=lambda kv: (kv[0][3], kv[0][1], kv[0][2])
    ):
        if any(k not in f for k in _REQUIRED):
            bad += len(f)
            continue
        time = ms / 1000.0
        since = f.get("idle_since")
        out.append(
            JobGpuSample(
                job_id=job_id,
                node=node,
                gpu=gpu,
                util_percent=f["util_percent"],
                mem_used_bytes=int(f.get("mem_used_bytes", 0)),
                power_watts=f.get("power_watts"),
                processes=int(f["processes"]),
                time=time,
                idle_since=since if since is not None and since <= time else None,
                share_bytes=int(f["share_bytes"]) if "share_bytes" in f else None,
                **_energy(f, time),
            )
        )
    return out, bad
