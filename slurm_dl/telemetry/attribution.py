"""Pure: attribute GPU samples to the Slurm job that holds each GPU, and sum them per job.

A whole GPU belongs to the one job Slurm gave it to. A shared GPU (Slurm shards) is split by
NVML's process list: each process's memory and compute go to the job that owns the process
(``pid_jobs``, read at the edge from the process's cgroup or from slurmstepd's own list;
never from its ``SLURM_JOB_ID``, which any process may set), and each job
is told the memory its shards guarantee (:class:`ShareRule`), so a job over it can be named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..slurm.gpu_alloc import GpuAllocation
from .samples import GpuSample, JobGpuSample

GIB = 1 << 30


@dataclass(frozen=True)
class ShareRule:
    """What one shard of a node's GPUs is worth: ``shards_per_gpu`` and the memory a shard
    guarantees (``shard_memory_bytes``; None: the GPU's memory / ``shards_per_gpu``)."""

    shards_per_gpu: int
    shard_memory_bytes: int | None = None

    def share_bytes(self, shards: int, gpu_total_bytes: int) -> int | None:
        """The memory ``shards`` shards guarantee on a GPU of ``gpu_total_bytes`` (None: unknown)."""
        if self.shard_memory_bytes is not None:
            return shards * self.shard_memory_bytes
        if gpu_total_bytes <= 0 or self.shards_per_gpu <= 0:
            return None
        return gpu_total_bytes * shards // self.shards_per_gpu


_JOB_DIR = re.compile(r"job_([0-9]{1,10})", re.ASCII)
_UID_DIR = re.compile(r"uid_[0-9]+", re.ASCII)
_DELEGATED = re.compile(r"user@[0-9]+\.service", re.ASCII)


def job_of_cgroup(text: str) -> int | None:
    """The Slurm job of a process from its ``/proc/PID/cgroup``; None when the process is in
    no job's cgroup of Slurm's own hierarchy: ``.../slurmstepd.scope/job_<id>/...`` (cgroup
    v2; ``<node>_slurmstepd.scope`` with several slurmd) or ``.../slurm/uid_<uid>/job_<id>/...``
    (v1). A ``job_<id>`` anywhere else is not Slurm's, and nothing under a user's own systemd
    manager (``user@<uid>.service``, which delegates its cgroups to the user) counts, whatever
    it is named."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        dirs = parts[2].split("/")
        for i, d in enumerate(dirs):
            if _DELEGATED.fullmatch(d):
                break  # the user's own subtree: any name below it is the user's choice
            m = _JOB_DIR.fullmatch(d)
            if m is None or i == 0:
                continue
            v2 = dirs[i - 1].endswith("slurmstepd.scope")
            v1 = (
                i >= 2
                and _UID_DIR.fullmatch(dirs[i - 1]) is not None
                and dirs[i - 2].startswith("slurm")
            )
            if v1 or v2:
                return int(m.group(1))
    return None


def gpu_owners(allocations: Iterable[GpuAllocation], node: str) -> dict[int, int]:
    """Slurm GPU index -> job id on ``node``."""
    return {gpu: a.job_id for a in allocations if a.node == node for gpu in a.gpus}


def attribute(
    samples: Iterable[GpuSample],
    allocations: Iterable[GpuAllocation],
    pid_jobs: Mapping[int, int] | None = None,
    shares: Mapping[str, ShareRule] | None = None,
) -> list[JobGpuSample]:
    """Each sample tagged with the job holding its GPU (0 when Slurm gave the GPU to nobody).

    A GPU whose holders have shards gives one row per holding job: the memory, processes and
    compute of its own processes (``pid_jobs``: pid -> job), and its ``share_bytes`` when the
    node has a :class:`ShareRule` in ``shares`` (node -> rule)."""
    allocs = list(allocations)
    holders: dict[str, dict[int, list[GpuAllocation]]] = {}
    out: list[JobGpuSample] = []
    for s in samples:
        by_gpu = holders.setdefault(s.node, _holders(allocs, s.node))
        here = by_gpu.get(s.slurm_index, [])
        if any(a.shards for a in here):
            out.extend(_split(s, here, pid_jobs or {}, (shares or {}).get(s.node)))
            continue
        out.append(
            JobGpuSample(
                job_id=here[0].job_id if here else 0,
                node=s.node,
                gpu=s.slurm_index,
                util_percent=s.util_percent,
                mem_used_bytes=s.mem_used_bytes,
                power_watts=s.power_watts,
                processes=len(s.pids),
                time=s.time,
            )
        )
    return out


def _holders(allocations: Iterable[GpuAllocation], node: str) -> dict[int, list[GpuAllocation]]:
    out: dict[int, list[GpuAllocation]] = {}
    for a in allocations:
        if a.node == node:
            for gpu in a.gpus:
                out.setdefault(gpu, []).append(a)
    return out


def _split(
    s: GpuSample, holders: list[GpuAllocation], pid_jobs: Mapping[int, int], rule: ShareRule | None
) -> list[JobGpuSample]:
    """One shared GPU's sample split among the jobs holding shards of it.

    A process of no holding job (a job's shards ended, or a process escaped its job) is left
    out. Compute is NVML's per-process SM share where it has one; a job with a process NVML
    has no share for is also given the GPU's utilisation that no process accounts for (an
    upper bound, never split by guess); a job without a process 0. Power is not split. A
    process whose job could not be read (another PID namespace, an agent without root) counts
    as a process of every holder, so no job looks idle because the agent could not see whose
    it is. ``gpu_share`` (what the job's energy is split by) is its shards on this GPU over the
    GPU's shards (``rule``; without one, over the shards held): shards nobody holds are charged
    to nobody."""
    rows = []
    per_gpu = {a.job_id: a.shards / max(1, len(a.gpus)) for a in holders}
    held = sum(per_gpu.values())
    whole = max(rule.shards_per_gpu, held) if rule is not None else held
    unexplained = max(0.0, s.util_percent - sum(p.sm_util_percent or 0.0 for p in s.procs))
    unknown = sum(1 for p in s.procs if p.pid not in pid_jobs)
    for a in sorted(holders, key=lambda a: a.job_id):
        mine = [p for p in s.procs if pid_jobs.get(p.pid) == a.job_id]
        util = sum(p.sm_util_percent or 0.0 for p in mine)
        if any(p.sm_util_percent is None for p in mine):
            util += unexplained
        util = min(100.0, util)
        share = (
            rule.share_bytes(a.shards, s.mem_total_bytes) if rule is not None and a.shards else None
        )
        if share is not None and len(a.gpus) > 1:
            share //= len(a.gpus)  # Slurm does not say how a job's shards split among GPUs
        rows.append(
            JobGpuSample(
                job_id=a.job_id,
                node=s.node,
                gpu=s.slurm_index,
                util_percent=util,
                mem_used_bytes=sum(p.mem_bytes or 0 for p in mine),
                power_watts=None,
                processes=len(mine) + unknown,
                time=s.time,
                share_bytes=share,
                gpu_share=per_gpu[a.job_id] / whole if whole > 0 else 0.0,
            )
        )
    return rows


def over_share(samples: Iterable[JobGpuSample]) -> dict[int, tuple[int, int]]:
    """Jobs over their share's memory at their latest sample: job -> (memory used, share), summed
    over the job's shared GPUs."""
    latest: dict[tuple[int, str, int], JobGpuSample] = {}
    for s in samples:
        key = (s.job_id, s.node, s.gpu)
        if (
            s.job_id
            and s.share_bytes is not None
            and (key not in latest or s.time > latest[key].time)
        ):
            latest[key] = s
    used: dict[int, list[int]] = {}
    for s in latest.values():
        u = used.setdefault(s.job_id, [0, 0])
        u[0] += s.mem_used_bytes
        u[1] += s.share_bytes or 0
    return {j: (u, share) for j, (u, share) in sorted(used.items()) if u > share}


@dataclass(frozen=True)
class JobUtilisation:
    """One job's GPUs at one moment (or averaged over the samples given)."""

    job_id: int
    gpus: int
    mean_util_percent: float
    max_util_percent: float
    mem_used_bytes: int
    power_watts: float
    processes: int
    share_bytes: int | None = None  # on shared GPUs: the memory the job's shards guarantee


def summarize(samples: Iterable[JobGpuSample]) -> dict[int, JobUtilisation]:
    """Per job: GPUs seen, mean/max utilisation over all samples, memory, power and processes.

    Memory, power and processes are the per-moment sums averaged over the distinct sample times.
    Samples of unallocated GPUs (job 0) are left out.
    """
    groups: dict[int, list[JobGpuSample]] = {}
    for s in samples:
        if s.job_id:
            groups.setdefault(s.job_id, []).append(s)
    out: dict[int, JobUtilisation] = {}
    for job_id, rows in sorted(groups.items()):
        moments = len({r.time for r in rows}) or 1
        shares = [r.share_bytes for r in rows if r.share_bytes is not None]
        out[job_id] = JobUtilisation(
            job_id=job_id,
            gpus=len({(r.node, r.gpu) for r in rows}),
            mean_util_percent=sum(r.util_percent for r in rows) / len(rows),
            max_util_percent=max(r.util_percent for r in rows),
            mem_used_bytes=sum(r.mem_used_bytes for r in rows) // moments,
            power_watts=sum(r.power_watts or 0.0 for r in rows) / moments,
            processes=sum(r.processes for r in rows) // moments,
            share_bytes=sum(shares) // moments if shares else None,
        )
    return out
