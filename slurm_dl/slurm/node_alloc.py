"""One node's GPU allocations without reading the whole queue from slurmctld: what the GPU
agent on each node uses.

``squeue --json`` makes slurmctld pack every job of the cluster (``REQUEST_JOB_INFO``); with an
agent on every node that is one full queue read per node per sample, which grows with nodes x
jobs. Here the node answers for itself:

1. ``scontrol listpids '*' NODE`` lists the jobs with processes on the node; it asks the node's
   own ``slurmstepd`` processes, not slurmctld.
2. Each job seen for the first time is read alone, ``scontrol -d -o show job ID`` (one
   ``REQUEST_JOB_INFO_SINGLE``): its per-node ``GRES=gpu:…(IDX:…)``. A job's GPUs do not change
   while it runs, so the answer is kept while the job's processes are there (a job requeued onto
   the node starts new processes and is read again).
3. ``scontrol -d -o show node NODE`` (a node read) says which GPUs Slurm counts as in use. GPUs
   in use that no job of step 1 explains belong to a job with no process on the node: most
   often one still starting (its processes come within seconds; on a loaded controller, jobs
   stay "running" for a while before slurmd launches them), or an allocation that runs nothing
   here (``salloc`` without a step and without ``PrologFlags=contain``, the other nodes of a
   job that starts no step there). Samples leave them unattributed for up to :data:`GRACE_S`;
   when the same GPUs are still unexplained after it, the queue is read once (the fallback),
   and the jobs it finds are then read alone at each later sample, so an allocation is missed
   for at most that long (idle thresholds are far longer).

The parsers are pure; :class:`NodeAllocations` runs the commands.
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Callable, Mapping, Sequence

from ..core.errors import (
    JobNotFoundError,
    SlurmError,
    SlurmNotInstalledError,
    SlurmUnavailableError,
)
from ..core.hostlist import expand_hostlist
from .gpu_alloc import GpuAllocation, parse_idx, parse_shards
from .runner import DEFAULT_TIMEOUT_S, INSTALL_HINT, one_line, run_slurm

_PID_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+", re.M)
_NODE_SEGMENT = re.compile(r"(?<!\S)Nodes=(\S+)\s+CPU_IDs=\S*\s+Mem=\S*(?:\s+GRES=(\S*))?")
_USER = re.compile(r"(?<!\S)UserId=([^(\s]+)")
_JOB_ID = re.compile(r"(?<!\S)JobId=(\d+)")
_GRES_USED = re.compile(r"(?<!\S)GresUsed=(\S*)")
GRACE_S = 120.0  # GPUs in use with no local job this long: read the queue to find whose they are
NO_STEPS = "No job steps exist on this node"  # listpids' answer (exit status 1) on an idle node
STALE_STEP = "Unable to connect to slurmstepd"  # a step socket left behind by a step that ended


def parse_listpids(text: str) -> dict[int, int]:
    """``scontrol listpids`` output -> {job id: its lowest process id on the node}. The lowest
    process id tells one run of a job from the next (a requeued job comes back with new
    processes)."""
    out: dict[int, int] = {}
    for m in _PID_ROW.finditer(text):
        pid, job = int(m.group(1)), int(m.group(2))
        out[job] = min(pid, out.get(job, pid))
    return out


def parse_listpid_jobs(text: str) -> dict[int, int]:
    """``scontrol listpids`` output -> {process id: its job}: the processes the node's
    slurmstepd processes track as the job's (the agent's evidence of whose a process is)."""
    return {int(m.group(1)): int(m.group(2)) for m in _PID_ROW.finditer(text)}


def job_allocations(text: str, node: str, job_id: int) -> list[GpuAllocation]:
    """``scontrol -d -o show job ID`` -> job ``job_id``'s GPUs on ``node`` (none when it holds
    none there, or is not running). An array's first task shares its id with the array, and
    Slurm then lists every task: only the line of ``job_id`` itself counts."""
    line = next(
        (ln for ln in text.splitlines() if (m := _JOB_ID.search(ln)) and int(m.group(1)) == job_id),
        "",
    )
    user = _USER.search(line)
    if not line or "JobState=RUNNING" not in line:
        return []
    out: list[GpuAllocation] = []
    for m in _NODE_SEGMENT.finditer(line):
        try:
            names = expand_hostlist(m.group(1))
        except ValueError:
            names = [m.group(1)]
        if node not in names or not m.group(2):
            continue
        gpus, shards = parse_idx(m.group(2)), 0
        if not gpus:
            gpus, shards = parse_shards(m.group(2))
        if gpus:
            out.append(GpuAllocation(job_id, user.group(1) if user else "", node, gpus, shards))
    return out


def gpus_in_use(text: str) -> frozenset[int]:
    """``scontrol -d -o show node NODE`` -> the GPU indices Slurm counts as allocated there
    (``GresUsed=gpu:h100:3(IDX:0-2)``; shards are left out)."""
    m = _GRES_USED.search(text)
    return frozenset(parse_idx(m.group(1))) if m else frozenset()


class NodeAllocations:
    """``allocations(node)`` for the GPU agent: the node's running jobs' GPUs, read locally and
    job by job (see the module's text); ``full(node)`` is the fallback that reads the queue."""

    def __init__(
        self,
        full: Callable[[str], Sequence[GpuAllocation]],
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        grace_s: float = GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.full = full
        self.env = env
        self.timeout = timeout
        self.known: dict[tuple[int, int], list[GpuAllocation]] = {}
        self.job_reads = 0  # single-job reads so far
        self.full_reads = 0  # samples that fell back to the whole queue
        self.local_error: str | None = None  # why listpids failed last, when it did
        self.pids: dict[int, int] = {}  # process -> job, from the last listpids (empty: it failed)
        self.grace_s = grace_s
        self.clock = clock
        self.unexplained: dict[int, float] = {}  # GPU in use with no local job -> since when
        self.quiet: set[int] = (
            set()
        )  # jobs holding GPUs here without a process (found by a queue read)

    def _run(self, argv: list[str]) -> str:
        return run_slurm(argv, env=self.env, timeout=self.timeout).stdout

    def __call__(self, node: str) -> list[GpuAllocation]:
        self.pids = {}
        try:
            local = self._listpids(node)
        except SlurmError as e:  # e.g. not root, or slurmd's spool elsewhere: the queue read
            self.local_error = str(e).splitlines()[0] if str(e) else type(e).__name__
            self.full_reads += 1
            return list(self.full(node))
        known: dict[tuple[int, int], list[GpuAllocation]] = {}
        for key in local.items():
            allocs = self.known.get(key)
            if allocs is None:
                allocs = self._job(key[0], node)
                if not allocs:  # not running yet, or ended: read again next time
                    continue
            known[key] = allocs
        self.known = known
        found = [a for allocs in known.values() for a in allocs]
        missing = gpus_in_use(self._run(["scontrol", "-d", "-o", "show", "node", node])) - _held(
            found
        )
        if not missing:
            self.quiet.clear()  # the local jobs explain every GPU in use: the quiet ones left
        elif self.quiet:  # jobs found before with no process here: read alone again
            self.quiet -= set(local)  # its processes came: known from now on
            for job_id in sorted(self.quiet):
                allocs = self._job(job_id, node)
                if allocs:
                    found += allocs
                else:
                    self.quiet.discard(job_id)
            missing -= _held(found)
        now = self.clock()
        self.unexplained = {g: self.unexplained.get(g, now) for g in missing}
        if not missing or now - min(self.unexplained.values()) < self.grace_s:
            return found  # most likely a job still starting: its processes are on their way
        self.full_reads += 1  # unexplained for the whole grace: read the queue to find their job
        full = list(self.full(node))
        self.quiet = {a.job_id for a in full if a.job_id not in local}
        self.unexplained = {}
        return full

    def _run_listpids(self, argv: list[str]) -> tuple[int, str, str]:
        try:
            p = subprocess.run(
                argv,
                env=dict(self.env) if self.env is not None else None,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError:
            raise SlurmNotInstalledError(
                f"{argv[0]}: command not found; {INSTALL_HINT}", command=argv
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmUnavailableError(
                f"scontrol listpids: no answer within {self.timeout:g} s", command=argv
            ) from None
        return p.returncode, p.stdout, p.stderr

    def _listpids(self, node: str) -> dict[int, int]:
        """The node's jobs with processes. listpids exits 1 on an idle node, and when one of the
        step sockets in the spool no longer answers (a step that ended without removing it):
        the rows it printed for the others still hold."""
        argv = ["scontrol", "listpids", "*", node]
        rc, out, err = self._run_listpids(argv)
        if (
            rc == 0
            or NO_STEPS in out + err
            or (out.lstrip().startswith("PID") and STALE_STEP in err)
        ):
            self.pids = parse_listpid_jobs(out)
            return parse_listpids(out)
        raise SlurmError(
            f"scontrol listpids: {one_line(err) or f'exit status {rc}'}",
            command=argv,
            returncode=rc,
            stderr=err,
        )

    def _job(self, job_id: int, node: str) -> list[GpuAllocation]:
        self.job_reads += 1
        try:
            return job_allocations(
                self._run(["scontrol", "-d", "-o", "show", "job", str(job_id)]), node, job_id
            )
        except JobNotFoundError:  # ended since it was seen
            return []


def _held(allocs: Sequence[GpuAllocation]) -> frozenset[int]:
    return frozenset(i for a in allocs for i in a.gpus if not a.shards)
