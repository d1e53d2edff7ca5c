"""The GPU agent: sample NVML, attribute to Slurm jobs, publish the exposition file.

I/O lives here and in :mod:`.nvml`; the decisions are in the pure modules beside them.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..slurm.gpu_alloc import GpuAllocation
from .attribution import JobUtilisation, attribute, summarize
from .exposition import parse, render
from .nvml import sample_gpus
from .samples import JobGpuSample
from .summary import carry_idle_since

DEFAULT_OUTPUT_DIR = Path("/var/lib/slurm-dl/gpu-agent")

AllocationsFn = Callable[[str], Sequence[GpuAllocation]]


@dataclass(frozen=True)
class AgentSample:
    node: str
    gpus: int
    samples: list[JobGpuSample]
    jobs: dict[int, JobUtilisation]
    written: Path | None


def node_name() -> str:
    """The Slurm node name of this host: ``SLURMD_NODENAME`` when set, else the short hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def previous_samples(path: Path) -> list[JobGpuSample]:
    """The samples of the agent's last file (none when it is missing or unreadable)."""
    try:
        return parse(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return []


def sample_once(nvml: Any, node: str, allocations: AllocationsFn, output_dir: Path | None,
                now: float | None = None, idle_util_percent: float = 2.0) -> AgentSample:
    """One sample of every GPU, attributed and (when ``output_dir``) written to ``<dir>/<node>.prom``.

    Each idle GPU's ``idle_since`` is carried from the previous file, so readers of one file
    (``dlsubmit status``) can tell how long a job's GPUs have been idle."""
    gpu_samples = sample_gpus(nvml, node, time.time() if now is None else now)
    allocs = list(allocations(node)) if gpu_samples else []
    job_samples = attribute(gpu_samples, allocs)
    written = None
    if output_dir is not None:
        written = output_dir / f"{node}.prom"
        job_samples = carry_idle_since(job_samples, previous_samples(written), idle_util_percent)
        write_atomically(written, render(job_samples))
    return AgentSample(node, len(gpu_samples), job_samples, summarize(job_samples), written)
