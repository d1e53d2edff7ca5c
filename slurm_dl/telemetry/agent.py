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
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..slurm.gpu_alloc import GpuAllocation
from .energy import carry_energy
from .attribution import GIB, JobUtilisation, ShareRule, attribute, job_of_cgroup, summarize
from .exposition import render
from .nvml import sample_gpus
from .reader import read_node_file
from .samples import JobGpuSample
from .summary import carry_idle_since

DEFAULT_OUTPUT_DIR = Path("/var/lib/slurm-dl/gpu-agent")

AllocationsFn = Callable[[str], Sequence[GpuAllocation]]
PidJobsFn = Callable[[Iterable[int]], Mapping[int, int]]


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


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` at once; readable by every user by default (``dlsubmit
    status`` reads the agents' files as the user; mkstemp alone would leave them 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def previous_samples(path: Path) -> list[JobGpuSample]:
    """The samples of the agent's last file (none when it is missing, unreadable or not
    trusted: see :func:`.reader.read_node_file`)."""
    return read_node_file(path)


def pid_jobs(
    pids: Iterable[int], proc: Path = Path("/proc"), slurm_pids: Mapping[int, int] | None = None
) -> dict[int, int]:
    """The Slurm job of each process whose job Slurm itself vouches for: its cgroup in Slurm's
    own hierarchy (``job_<id>``, cgroup proctrack), else ``slurm_pids`` (pid -> job, what the
    node's slurmstepd processes list: ``scontrol listpids``). A process's ``SLURM_JOB_ID`` is
    never used: anyone can set it, in or out of a job. A process of no known job, one that
    ended, or one this user may not read, is left out (attribution then counts it as a
    process of every holder of its GPU, and charges its memory to none)."""
    out: dict[int, int] = {}
    known = slurm_pids or {}
    for pid in pids:
        try:
            job = job_of_cgroup((proc / str(pid) / "cgroup").read_text())
        except (OSError, ValueError):
            job = None
        if job is None:
            job = known.get(pid)
        if job is not None:
            out[pid] = job
    return out


def share_rules(site: Any, node: str) -> dict[str, ShareRule]:
    """``{node: rule}`` when the site config's ``[sharing]`` offers shards on ``node``'s group."""
    if site is None:
        return {}
    groups = {g.name: g for g in site.node_groups}
    for sg in site.sharing.groups:
        group = groups.get(sg.node_group)
        if group is not None and sg.shards_per_gpu and node in group.node_names:
            mem = round(sg.shard_memory_gb * GIB) if sg.shard_memory_gb else None
            return {node: ShareRule(sg.shards_per_gpu, mem)}
    return {}


def sample_once(
    nvml: Any,
    node: str,
    allocations: AllocationsFn,
    output_dir: Path | None,
    now: float | None = None,
    idle_util_percent: float = 2.0,
    jobs_of_pids: PidJobsFn = pid_jobs,
    shares: Mapping[str, ShareRule] | None = None,
) -> AgentSample:
    """One sample of every GPU, attributed and (when ``output_dir``) written to ``<dir>/<node>.prom``.

    Each idle GPU's ``idle_since`` is carried from the previous file, so readers of one file
    (``dlsubmit status``) can tell how long a job's GPUs have been idle, and each job's energy
    on each GPU is summed on from it (:mod:`.energy`). On GPUs shared through
    shards each process is attributed to its job (``jobs_of_pids``) and each job's memory
    compared with its share (``shares``: node -> :class:`ShareRule`)."""
    gpu_samples = sample_gpus(nvml, node, time.time() if now is None else now)
    allocs = list(allocations(node)) if gpu_samples else []
    shared = any(a.shards for a in allocs)
    owners = jobs_of_pids({p.pid for s in gpu_samples for p in s.procs}) if shared else {}
    job_samples = attribute(gpu_samples, allocs, owners, shares)
    written = None
    if output_dir is not None:
        written = output_dir / f"{node}.prom"
        before = previous_samples(written)
        job_samples = carry_idle_since(job_samples, before, idle_util_percent)
        job_samples = carry_energy(job_samples, gpu_samples, before)
        write_atomically(written, render(job_samples))
    return AgentSample(node, len(gpu_samples), job_samples, summarize(job_samples), written)
