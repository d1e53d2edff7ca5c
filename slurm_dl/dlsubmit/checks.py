"""What dlsubmit checks around a submission: the live cluster (partitions, GPU types, time
limits), Slurm's refusals made readable, and jobs that would quietly run one process.

The cluster is read through ``slurm_dl.slurm``'s backend; everything else here is pure.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..core.errors import SlurmDLError, SlurmError, SlurmNotInstalledError, SlurmUnavailableError
from ..core.model import Job, Node, Partition
from ..core.policy.admission import admitted_now
from ..core.tags import parse_tag
from ..core.units import format_time


@dataclass
class ClusterFacts:
    """What the reachable cluster offers; ``checked`` False with ``why`` when it could not be read."""

    checked: bool
    why: str = ""
    partitions: list[Partition] = field(default_factory=list)
    gpu_types: list[str] = field(default_factory=list)
    gpus_per_node: list[int] = field(default_factory=list)
    """Each node's GPUs (empty: not read)."""

    @property
    def partition_names(self) -> list[str]:
        return [p.name for p in self.partitions]


def read_cluster(backend: Any) -> ClusterFacts:
    """Partitions and GPU types from Slurm; never raises for an unreachable cluster."""
    try:
        partitions = backend.partitions()
    except (SlurmUnavailableError, SlurmNotInstalledError):
        return ClusterFacts(checked=False, why="no Slurm cluster reachable from here")
    except SlurmDLError as e:
        text = str(e)
        if any(s in text for s in _NO_CONFIG):
            return ClusterFacts(
                checked=False, why="no Slurm configuration here; is SLURM_CONF set?"
            )
        return ClusterFacts(
            checked=False, why=_short(refusal_lines(e)[0] if isinstance(e, SlurmError) else text)
        )
    try:
        nodes: list[Node] = backend.nodes()
        types = sorted({n.gpu_type for n in nodes if n.gpu_type})
        per_node = [n.gpus for n in nodes]
    except SlurmDLError:
        types, per_node = [], []
    return ClusterFacts(
        checked=True, partitions=list(partitions), gpu_types=types, gpus_per_node=per_node
    )


def too_many_gpus(gpus: int, facts: ClusterFacts) -> str | None:
    """A request for more GPUs than the whole cluster has, said with what it has. Pure."""
    total = sum(facts.gpus_per_node)
    if not facts.checked or not facts.gpus_per_node or gpus <= total:
        return None
    nodes = len(facts.gpus_per_node)
    shape = (
        f"{nodes} nodes x {facts.gpus_per_node[0]}"
        if len(set(facts.gpus_per_node)) == 1
        else f"{nodes} nodes"
    )
    return (
        f"--gpus {gpus}: this cluster has {total} GPUs in all ({shape}); ask for {total} or fewer"
    )


def command_problem(command: Sequence[str], found: bool) -> str | None:
    """A warning when the program is not found here (it may still be on the compute nodes). Pure."""
    if not command or found:
        return None
    return (
        f"{command[0]!r} is not a program here (not on PATH, not a file); unless the compute "
        "nodes have it, the job fails at once (exit code 127)"
    )


_NO_CONFIG = (
    "configuration source",
    "resolve_ctls",
    "fetch_config",
    "configuration file",
    "ClusterName",
)


def cluster_problems(facts: ClusterFacts, directives: Sequence[str]) -> list[str]:
    """Problems Slurm would refuse the job for, each with the valid choices. Pure."""
    if not facts.checked:
        return []
    values = dict(d.split("=", 1) for d in directives if "=" in d)
    problems = []
    part = values.get("--partition")
    chosen = None
    if part:
        chosen = next((p for p in facts.partitions if p.name == part), None)
        if chosen is None:
            problems.append(
                f"partition {part!r} does not exist; valid: {', '.join(facts.partition_names) or 'none'}"
            )
    else:
        chosen = next((p for p in facts.partitions if p.default), None)
    gpn = values.get("--gpus-per-node", "")
    if ":" in gpn and facts.gpu_types:
        gtype = gpn.rsplit(":", 1)[0]
        if gtype not in facts.gpu_types:
            problems.append(
                f"GPU type {gtype!r} is not on this cluster; valid: {', '.join(facts.gpu_types)}"
            )
    if chosen is not None and chosen.max_time_s and "--time" in values:
        from ..core.units import parse_time_seconds

        try:
            asked = parse_time_seconds(values["--time"])
        except SlurmDLError:
            asked = 0
        if asked > chosen.max_time_s:
            problems.append(
                f"--time {values['--time']} is over partition {chosen.name}'s limit of "
                f"{format_time(int(chosen.max_time_s))}"
            )
    return problems


_PREFIX = re.compile(
    r"^(?:(?:sbatch|scancel|scontrol|squeue)(?: -v)?:\s*|error:\s*)+", re.IGNORECASE
)


def refusal_lines(error: SlurmError) -> list[str]:
    """Slurm's refusal as readable lines, without the doubled ``sbatch: error:`` prefixes."""
    text = str(error)
    pieces = re.split(r";\s+(?=(?:sbatch|scancel|scontrol|error)\b)", text)
    out: list[str] = []
    for piece in pieces:
        line = _PREFIX.sub("", piece.strip()).strip()
        if line and line not in out:
            out.append(line)
    return out or [text]


def refusal_message(error: SlurmError, facts: ClusterFacts | None) -> list[str]:
    """The first line says Slurm refused and why, adding the valid choices where known."""
    lines = refusal_lines(error)
    first = lines[0]
    low = " ".join(lines).lower()
    if facts is not None and facts.checked:
        if "partition" in low and facts.partition_names:
            first += f" (valid partitions: {', '.join(facts.partition_names)})"
        elif ("gres" in low or "node configuration" in low) and facts.gpu_types:
            first += f" (GPU types here: {', '.join(facts.gpu_types)})"
    return [f"Slurm refused the job: {first}", *lines[1:]]


_LAUNCHERS = (
    "torchrun",
    "accelerate",
    "deepspeed",
    "mpirun",
    "srun",
    "horovodrun",
    "python -m torch.distributed",
)


def single_process_warning(
    kind: str,
    gpus_per_node: int,
    launcher: str,
    command: Sequence[str],
    torchrun_here: bool | None = None,
    nodes: int = 1,
) -> str | None:
    """A multi-GPU job that will start one process on each of its nodes: say so at submit time."""
    if kind != "train" or gpus_per_node < 2 or not command:
        return None
    head = " ".join(command[:3])
    if any(word in head for word in _LAUNCHERS):
        return None  # the command starts its own processes
    if launcher == "none":
        return (
            f"--launcher none: your command runs once per node and must use all "
            f"{gpus_per_node} GPUs itself"
        )
    if launcher == "auto":
        if torchrun_here is None:
            torchrun_here = shutil.which("torchrun") is not None
        if not torchrun_here:
            if nodes > 1:
                return (
                    f"no torchrun here: unless the compute nodes have it, this {gpus_per_node * nodes}-GPU "
                    f"job on {nodes} nodes runs ONE process per node; --launcher torchrun requires it"
                )
            return (
                f"no torchrun here: unless the compute node has it, this {gpus_per_node}-GPU job "
                "runs ONE process; --launcher torchrun requires it"
            )
    return None


def sharing_warning(
    kind: str, gpus: int, share: bool, gpu_mem: str | None, offers_shards: bool
) -> str | None:
    """``--share`` or ``--gpu-mem`` on a job that could run on part of a GPU, where the site
    config offers no GPU shards (no ``[sharing]`` group with shards): it gets a whole GPU."""
    if offers_shards or gpus != 1 or kind == "train" or not (share or gpu_mem):
        return None
    if share:
        return (
            "--share: this site offers no GPU shards (its slurm-dl config has no "
            "[sharing]), so the job gets a whole GPU"
        )
    return (
        f"--gpu-mem {gpu_mem}: this site offers no GPU shards (its slurm-dl config has "
        f"no [sharing]), so the job gets a whole GPU with at least {gpu_mem}"
    )


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no answer"
    return line if len(line) <= 60 else line[:57] + "..."


def _with_tag(job: Job) -> Job:
    """A queued job's deadline, steps and GPUs as the filter tagged them (what the prioritizer
    reads): a user's jobs come from Slurm without them."""
    tag = parse_tag(job.admin_comment)
    if tag is None:
        return job
    if job.deadline is None and tag.deadline is not None:
        job.deadline = float(tag.deadline)
    if job.deadline is None and tag.soft_deadlines:
        job.soft_deadlines = tuple((float(t), v) for t, v in tag.soft_deadlines)
    if job.pending and tag.gpus > job.num_gpus:
        job.num_gpus = tag.gpus
    return job


def deadline_outlook(
    tag_text: str,
    time_limit_min: int | None,
    user: str,
    jobs: Sequence[Job],
    nodes: Sequence[Node],
    now: float,
    share: float,
) -> str | None:
    """Whether the deadline in the filter's tag ``tag_text`` would be promised now, next to the
    deadline jobs of the queue (``jobs``, ``nodes``: a snapshot), by the prioritizer's own test
    (:func:`~slurm_dl.core.policy.admission.admitted_now`); None when the job has no deadline."""
    tag = parse_tag(tag_text)
    if tag is None or (tag.deadline is None and not tag.soft_deadlines):
        return None
    candidate = Job(
        job_id=max((j.job_id for j in jobs), default=0) + 1,
        user=user,
        num_gpus=tag.gpus,
        time_limit=None if time_limit_min is None else time_limit_min * 60.0,
        submit_time=now,
        deadline=None if tag.deadline is None else float(tag.deadline),
        soft_deadlines=tuple((float(t), v) for t, v in tag.soft_deadlines or ()),
    )
    live = [_with_tag(j) for j in jobs if j.pending or j.running]
    why = admitted_now(candidate, live, now, sum(n.gpus for n in nodes), share)
    others = sum(1 for j in live if j.deadline is not None or j.soft_deadlines)
    if why is None:
        return (
            f"deadline: would be promised if submitted now, next to the {others} deadline "
            "job(s) in the queue (the prioritizer decides when it first sees the job)"
        )
    return (
        f"deadline: would not be promised now: {why}; the job would run as best effort "
        "(a later deadline or a shorter --time may be)"
    )
