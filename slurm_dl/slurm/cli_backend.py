"""The default backend: Slurm's own commands. Jobs: ``squeue -O`` (default; see squeue_format
for why) or ``squeue --json``; nodes: ``sinfo --json``; ``scontrol -o show partition``,
``scontrol show topology`` and ``sprio`` (SiteFactor) where 22.05 has no JSON.

Every call goes through ``runner.run_slurm``; parsing is in the pure ``parse`` module.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..core.errors import JobNotFoundError, SlurmError, SlurmUnavailableError
from ..core.jobid import JobRef
from ..core.model import ClusterSnapshot, Job, JobState, Node, Partition, Topology
from .dialects import Dialect, dialect_for_release, release_of_version
from .gpu_alloc import GpuAllocation, gpu_allocations
from .parse import (
    job_end_from_scontrol,
    json_errors_text,
    parse_partitions,
    parse_sinfo_json,
    parse_squeue_json,
    parse_topology,
)
from .squeue_format import (
    ACTIVE_STATES,
    TIME_FORMAT_ENV,
    LineMemo,
    parse_squeue_format,
    squeue_format_argv,
)
from .power import power_update_argv, reserved_nodes
from .protocol import (
    SITE_FACTOR_CHUNK,
    JobEnd,
    PendingSize,
    SiteFactorResult,
    chunked,
    group_by_value,
)
from .runner import DEFAULT_TIMEOUT_S, SlurmResult, one_line, run_slurm

# Per-job messages that mean "this job is gone", which a SiteFactor update may meet for jobs
# that ended since the snapshot: "... for job 42", or per array range "33_0-22: ...".
_GONE_TEXT = r"(?:Invalid job id specified|Job has already finished)"
_GONE = re.compile(_GONE_TEXT + r" for job (\d+)")
_PER_JOB = re.compile(r"^(\d+)(_\S+)?: (.*)$")
_SIGNAL = re.compile(r"^(SIG)?[A-Z0-9]+$")
# scancel retries a job between states 10 times for over a minute, holding the cycle: a signal
# gets less than its first 5 s pause, and its verbose line says why it stopped (JobBusyError).
SIGNAL_TIMEOUT_S = 4.5
EAGAIN_TRIES = 8
_SLURM_NAMES = re.compile(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$")
_FEATURES = re.compile(r"^[A-Za-z0-9_.|&\[\]()*-]{0,1024}$")


def split_gone_jobs(stderr: str) -> tuple[list[int], list[str]]:
    """Stderr of a multi-job ``scontrol update`` -> (ids of jobs that are gone, lines that are
    real failures). Lines that report success (``33_3-9: No error``) or gone array tasks
    (``33_0-2: Job has already finished``: their own ids are not named) are neither."""
    gone: set[int] = set()
    other: list[str] = []
    for line in stderr.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _GONE.search(line)
        if m:
            gone.add(int(m.group(1)))
            continue
        per_job = _PER_JOB.match(line)
        if per_job and per_job.group(3).strip() == "No error":
            continue
        if per_job and re.fullmatch(_GONE_TEXT, per_job.group(3).strip()):
            if per_job.group(2) is None:
                gone.add(int(per_job.group(1)))
            continue
        other.append(line)
    return sorted(gone), other


_SPRIO_LINE = re.compile(r"^[ \t]*([0-9]+)\|(-?[0-9]+)[ \t]*$", re.MULTILINE | re.ASCII)


def parse_sprio(text: str) -> dict[int, int]:
    """``sprio -h -o '%i|%S'`` lines -> {job: SiteFactor}; other lines are skipped."""
    return {int(jid): int(val) for jid, val in _SPRIO_LINE.findall(text)}


class SprioMemo:
    """The latest ``sprio`` text and what it says: sprio lists only job ids and SiteFactors, so
    between two cycles of a large queue its text is mostly the same, and then not read again."""

    def __init__(self) -> None:
        self._text: str | None = None
        self._factors: dict[int, int] = {}

    def parse(self, text: str) -> dict[int, int]:
        """``parse_sprio(text)`` (a new dict each call: the caller may change it)."""
        if text != self._text:
            self._factors, self._text = parse_sprio(text), text
        return dict(self._factors)


def with_site_factors(jobs: list[Job], factors: Mapping[int, int]) -> list[Job]:
    """Fill ``Job.site_factor`` from sprio's view (only eligible pending jobs appear there; the
    others have none). Sets every job's, so a Job handed out again (``LineMemo``) is filled as
    a fresh one would be."""
    for job in jobs:
        job.site_factor = int(factors.get(job.job_id, 0))
    return jobs


def with_node_gpu_types(jobs: list[Job], nodes: Iterable[Node]) -> list[Job]:
    """A running job that asked for untyped GPUs (``--gpus=3``) has its nodes' GPU type."""
    types = {n.name: n.gpu_type for n in nodes}
    for job in jobs:
        if job.gpu_type is None and job.nodes:
            found = {types.get(n) for n in job.nodes} - {None}
            if len(found) == 1:
                job.gpu_type = found.pop()
    return jobs


def _job_id(job_id: int | JobRef) -> str:
    """A job id as Slurm's commands take it: a JobRef in Slurm's own form (``2_9``, ``27+0``);
    else an integer. Never a string through ``int()``, which reads ``"2_9"`` as job 29."""
    if isinstance(job_id, JobRef):
        return str(job_id)
    if isinstance(job_id, bool) or not isinstance(job_id, numbers.Integral) or int(job_id) <= 0:
        raise JobNotFoundError(f"job id {job_id!r} is not a positive integer")
    return str(int(job_id))


class CliBackend:
    """Talks to the cluster named by ``env['SLURM_CONF']`` (default: this process's environment)."""

    name = "cli"

    JOB_READERS = ("format", "json")

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        site_factor_chunk: int = SITE_FACTOR_CHUNK,
        job_reader: str = "format",
        topology_ttl_s: float = 0.0,
    ):
        """``job_reader``: ``format`` (``squeue -O``, default, ~20x faster on 5,000 jobs) or
        ``json`` (``squeue --json``); both give the same Job objects. ``topology_ttl_s``: the
        switch tree read once is reused for that long (a long-running reader: it changes only
        when slurmctld reconfigures, and slurmctld answers it under its node lock, behind
        every job update); 0: read each time."""
        if job_reader not in self.JOB_READERS:
            raise ValueError(
                f"unknown job_reader {job_reader!r}; allowed: {', '.join(self.JOB_READERS)}"
            )
        self._env = dict(env) if env is not None else None
        self.timeout = timeout
        self.site_factor_chunk = site_factor_chunk
        self.job_reader = job_reader
        self._dialect: Dialect | None = None
        self._lines = (
            LineMemo()
        )  # each distinct squeue line parsed once (the daemon reads every cycle)
        self._sprio = SprioMemo()
        self.topology_ttl_s = topology_ttl_s
        self._topology: tuple[float, Topology] | None = None  # (monotonic time read, the tree)
        self.call_s = 0.0
        """Wall seconds spent waiting on Slurm's commands so far (what slurmctld's pace costs;
        parsing their output is not counted): the prioritizer backs off when a cycle's share grows."""

    def dialect(self) -> Dialect:
        """The release of the Slurm clients this backend runs (``scontrol version``, no controller
        needed), checked once: an unsupported release is a SlurmError naming the supported ones."""
        if self._dialect is None:
            out = run_slurm(["scontrol", "version"], env=self._env, timeout=self.timeout).stdout
            self._dialect = dialect_for_release(
                release_of_version(out), f"scontrol version ({out.strip()})"
            )
        return self._dialect

    def slurm_release(self) -> str:
        return self.dialect().release

    def _run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> SlurmResult:
        started = time.perf_counter()
        try:
            return run_slurm(
                argv,
                env=env if env is not None else self._env,
                input=input,
                timeout=min(timeout, self.timeout) if timeout else self.timeout,
            )
        except SlurmError as e:
            # Some commands hide "controller down" behind a vague message (scontrol update says
            # "Unexpected message received"); a plain failure gets a cheap ping to tell them apart.
            if type(e) is SlurmError and e.returncode is not None:
                self.ping()
            raise
        finally:
            self.call_s += time.perf_counter() - started

    def _json(self, argv: Sequence[str]) -> dict:
        out = self._run(argv).stdout
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as e:
            raise SlurmError(
                f"{' '.join(argv)}: output is not JSON ({e}): {out[:200]!r}", command=list(argv)
            ) from None
        if doc.get("errors"):
            # 22.05's --json exits 0 with {"errors": [{"error": "Unspecified error"}]} when slurmctld
            # is down; ask the controller directly so callers get the retryable error type.
            self.ping()
            raise SlurmError(f"{' '.join(argv)}: {json_errors_text(doc)}", command=list(argv))
        return doc

    def ping(self) -> None:
        """Raise SlurmUnavailableError unless slurmctld answers ``scontrol ping``."""
        try:
            out = run_slurm(["scontrol", "ping"], env=self._env, timeout=self.timeout).stdout
        except SlurmError as e:
            if isinstance(e, SlurmUnavailableError) or "DOWN" in str(e):
                raise SlurmUnavailableError(
                    f"slurmctld does not answer `scontrol ping` ({one_line(str(e))}); is it running, and does "
                    "SLURM_CONF point at the right cluster?",
                    command=e.command,
                    returncode=e.returncode,
                ) from None
            raise
        if "DOWN" in out:
            raise SlurmUnavailableError(
                f"slurmctld is down: {one_line(out)}", command=["scontrol", "ping"]
            )

    # -- reading --------------------------------------------------------------------------
    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        if self.job_reader == "json":
            # 23.02 and later honour squeue's default state filter (pending and active) in --json;
            # 22.05 ignores filters and lists recently finished jobs too. Filtered client-side.
            argv = ["squeue", "--json"] if states is None else ["squeue", "--json", "--states=all"]
            return parse_squeue_json(self._json(argv), states)
        wanted = list(states) if states is not None else None
        argv = squeue_format_argv(ACTIVE_STATES if wanted is None else "all")
        env = dict(self._env if self._env is not None else os.environ)
        env.update(TIME_FORMAT_ENV)
        return parse_squeue_format(self._run(argv, env=env).stdout, wanted, memo=self._lines)

    def gpu_allocations(self, node: str | None = None) -> list[GpuAllocation]:
        """GPU indices Slurm assigned to each running job (on ``node`` only, when given)."""
        return gpu_allocations(self._json(["squeue", "--json"]), node)

    def nodes(self, topology: Topology | None = None) -> list[Node]:
        topo = topology if topology is not None else self.topology()
        return parse_sinfo_json(self._json(list(self.dialect().node_command)), topo)

    def partitions(self) -> list[Partition]:
        return parse_partitions(self._run(["scontrol", "-o", "show", "partition"]).stdout)

    def topology(self) -> Topology:
        if (
            self._topology is not None
            and time.monotonic() - self._topology[0] < self.topology_ttl_s
        ):
            return self._topology[1]
        topo = parse_topology(self._run(["scontrol", "show", "topology"]).stdout)
        if self.topology_ttl_s > 0:
            self._topology = (time.monotonic(), topo)
        return topo

    def site_factors(self) -> dict[int, int]:
        return self._sprio.parse(self._run(["sprio", "-h", "-o", "%i|%S"]).stdout)

    def snapshot(self, now: float | None = None) -> ClusterSnapshot:
        taken_at = time.time() if now is None else float(now)
        topo = self.topology()
        nodes = self.nodes(topo)
        jobs = with_node_gpu_types(with_site_factors(self.jobs(), self.site_factors()), nodes)
        return ClusterSnapshot(
            taken_at=taken_at,
            jobs=jobs,
            nodes=nodes,
            partitions=self.partitions(),
            topology=topo,
        )

    # -- writing --------------------------------------------------------------------------
    def submit(
        self, script: str | Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> int:
        """A ``Path`` is submitted as a file; a ``str`` is the script text (fed on stdin)."""
        argv = ["sbatch", "--parsable", *[str(a) for a in args]]
        text = None
        if isinstance(script, Path):
            if not script.is_file():
                raise SlurmError(f"sbatch: script {script} does not exist")
            argv.append(str(script))
        else:
            text = script
        run_env = None
        if env:
            run_env = dict(self._env if self._env is not None else os.environ)
            run_env.update(env)
        done = self._run(argv, input=text, env=run_env)
        out = done.stdout.strip()
        self.submit_notices = [
            line.strip().removeprefix("sbatch: ")
            for line in (done.stderr or "").splitlines()
            if line.strip()
        ]
        try:
            return int(out.splitlines()[-1].split(";")[0])
        except (ValueError, IndexError):
            raise SlurmError(f"sbatch printed no job id: {out!r}", command=argv) from None

    def cancel(self, job_id: int | JobRef) -> None:
        """A job, or array tasks / a hetjob component named in Slurm's form (``scancel 2_9``).
        -v: without it scancel says nothing (exit 0) about an unknown job id."""
        self._run(["scancel", "-v", _job_id(job_id)])

    def set_site_factor(self, factors: Mapping[int, int]) -> SiteFactorResult:
        """One ``scontrol update jobid=a,b,c SiteFactor=V`` per distinct value (and per chunk)."""
        calls, missing = 0, []
        for value, ids in group_by_value(factors).items():
            for chunk in chunked(ids, self.site_factor_chunk):
                argv = [
                    "scontrol",
                    "update",
                    "jobid=" + ",".join(map(str, chunk)),
                    f"SiteFactor={value}",
                ]
                calls += 1
                try:
                    self._run(argv)
                except SlurmError as e:
                    if e.returncode is None:  # unreachable / timeout: nothing per job to salvage
                        raise
                    gone, other = split_gone_jobs(e.stderr or _stderr_of(e))
                    if other or not (e.stderr or gone):
                        raise
                    missing.extend(gone)
        return SiteFactorResult(
            updated=len(factors) - len(missing), calls=calls, missing=tuple(sorted(missing))
        )

    def signal_batch(self, job_id: int, signal: str = "USR2") -> None:
        sig = signal.upper()
        if not _SIGNAL.match(sig):
            raise SlurmError(f"bad signal name {signal!r}")
        self._run(
            ["scancel", "-v", "--batch", f"--signal={sig.removeprefix('SIG')}", _job_id(job_id)],
            timeout=SIGNAL_TIMEOUT_S,
        )

    def signal_steps(self, job_id: int, signal: str = "USR2") -> None:
        """Signal every step of the job but its batch shell (what ``--signal=USR2@N`` without
        ``B:`` means): for jobs whose handler runs in an srun step."""
        sig = signal.upper()
        if not _SIGNAL.match(sig):
            raise SlurmError(f"bad signal name {signal!r}")
        self._run(
            ["scancel", "-v", f"--signal={sig.removeprefix('SIG')}", _job_id(job_id)],
            timeout=SIGNAL_TIMEOUT_S,
        )

    def set_comment(self, job_id: int, text: str) -> None:
        """Replace the job's comment (``scontrol update JobId=N Comment=…``; one argument, so spaces are kept)."""
        if "\n" in text or "\r" in text:
            raise SlurmError(f"job {job_id}: a comment must be one line")
        self._run(["scontrol", "update", f"JobId={_job_id(job_id)}", f"Comment={text}"])

    def requeue(self, job_id: int) -> None:
        self._run(["scontrol", "requeue", _job_id(job_id)])

    def set_partition(self, job_id: int, partition: str) -> None:
        if not _SLURM_NAMES.match(partition):
            raise SlurmError(f"job {job_id}: bad partition list {partition!r}")
        self._update_retrying(job_id, f"Partition={partition}")

    def set_features(self, job_id: int, features: str) -> None:
        if not _FEATURES.match(features):
            raise SlurmError(f"job {job_id}: bad feature expression {features!r}")
        self._update_retrying(job_id, f"Features={features}")

    def set_nodes(self, job_id: int, nodes: str) -> None:
        """A pending job's required nodes (``ReqNodeList``; empty: any again)."""
        if nodes and not _SLURM_NAMES.match(nodes):
            raise SlurmError(f"job {job_id}: bad node list {nodes!r}")
        self._update_retrying(job_id, f"ReqNodeList={nodes}")

    def set_power(self, nodes: Sequence[str], up: bool) -> None:
        try:
            argv = power_update_argv(list(nodes), up)
        except ValueError as e:
            raise SlurmError(str(e)) from None
        self._run(argv)

    def reserved_nodes(self, now: float, within_s: float) -> set[str]:
        text = self._run(["scontrol", "-o", "show", "reservation"]).stdout
        return reserved_nodes(text, now, within_s)

    def requeue_hold(self, job_id: int) -> None:
        """``scontrol requeuehold``: requeue a running job and hold it (pending, priority 0) so
        its size can change before it may start again. A pending job: JobPendingError."""
        self._run(["scontrol", "requeuehold", _job_id(job_id)])

    def resize_pending(self, job_id: int, size: PendingSize) -> None:
        """Change a pending (best: held) job's size. Slurm takes any size while a job is held,
        even one no node fits (it then waits with ``PartitionNodeLimit``): check sizes first."""
        self._update_retrying(job_id, *size.scontrol_fields())

    def _update_retrying(self, job_id: int, *changes: str) -> None:
        """``scontrol update`` of a pending job's partition or features. Slurm 24.11 and 26.05
        without slurmdbd fail such an update at random with EAGAIN ("Resource temporarily
        unavailable": a stale errno in slurmctld's job update); a retry succeeds."""
        for attempt in range(EAGAIN_TRIES):
            try:
                self._run(["scontrol", "update", f"JobId={_job_id(job_id)}", *changes])
                return
            except SlurmError as e:
                if (
                    "Resource temporarily unavailable" not in (e.stderr or str(e))
                    or attempt == EAGAIN_TRIES - 1
                ):
                    raise

    def job_end(self, job_id: int) -> JobEnd:
        env = {**(self._env if self._env is not None else os.environ), **TIME_FORMAT_ENV}
        out = self._run(["scontrol", "-o", "show", "job", _job_id(job_id)], env=env).stdout
        return job_end_from_scontrol(out, job_id)

    def hold(self, job_id: int) -> None:
        self._run(["scontrol", "hold", _job_id(job_id)])

    def release(self, job_id: int) -> None:
        self._run(["scontrol", "release", _job_id(job_id)])


def _stderr_of(error: SlurmError) -> str:
    """Slurm's message inside one of our errors (``"scontrol update: <stderr>"``)."""
    text = str(error)
    _, sep, rest = text.partition(": ")
    return rest if sep else text
