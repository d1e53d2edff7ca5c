"""Pure: per-GPU job samples <-> Prometheus text exposition.

The agent writes one file per node (``<dir>/<node>.prom``, replaced atomically). On one machine
the prioritizer reads the directory; on many nodes the same files are served by node_exporter's
textfile collector or sit on a shared filesystem, so no extra server is needed.
"""

from __future__ import annotations

import re
from typing import Iterable

from .samples import JobGpuSample

METRICS = {
    "slurm_dl_gpu_utilization_percent": ("GPU utilisation over the last NVML sample period", "util_percent"),
    "slurm_dl_gpu_memory_used_bytes": ("GPU memory in use", "mem_used_bytes"),
    "slurm_dl_gpu_power_watts": ("GPU power draw", "power_watts"),
    "slurm_dl_gpu_processes": ("processes holding a GPU context", "processes"),
    "slurm_dl_gpu_idle_since_seconds": ("start of the GPU's current idle spell for its job (Unix time); "
                                        "absent while busy", "idle_since"),
    "slurm_dl_gpu_share_bytes": ("GPU memory the job's shards guarantee on this shared GPU; absent on a "
                                 "whole GPU (memory used above it: the job is over its share)", "share_bytes"),
}
_LINE = re.compile(r'^(\w+)\{job="(\d+)",node="([^"]*)",gpu="(\d+)"\} (\S+) (\d+)$')


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
            lines.append(f'{name}{{job="{s.job_id}",node="{s.node}",gpu="{s.gpu}"}} {_number(value)} {round(s.time * 1000)}')
    return "\n".join(lines) + "\n"


def _number(value: float | int) -> str:
    """Exact: integers as integers (byte counts stay exact), floats in their shortest round-trip form."""
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def parse(text: str) -> list[JobGpuSample]:
    """The samples of a file written by :func:`render` (other lines are ignored)."""
    fields: dict[tuple[int, str, int, int], dict[str, float]] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m or m.group(1) not in METRICS:
            continue
        key = (int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(6)))
        fields.setdefault(key, {})[METRICS[m.group(1)][1]] = float(m.group(5))
    out = []
    for (job_id, node, gpu, ms), f in sorted(fields.items(), key=lambda kv: (kv[0][3], kv[0][1], kv[0][2])):
        out.append(JobGpuSample(
            job_id=job_id, node=node, gpu=gpu,
            util_percent=f.get("util_percent", 0.0),
            mem_used_bytes=int(f.get("mem_used_bytes", 0)),
            power_watts=f.get("power_watts"),
            processes=int(f.get("processes", 0)),
            time=ms / 1000.0,
            idle_since=f.get("idle_since"),
            share_bytes=int(f["share_bytes"]) if "share_bytes" in f else None,
        ))
    return out
