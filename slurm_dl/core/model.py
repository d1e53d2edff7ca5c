"""The plain-data model shared by the filter, the prioritizer, dlsubmit and the simulator.

Nothing here does I/O or reads a clock. Times are seconds (floats) on one clock chosen by the
caller: Unix epoch seconds for live Slurm, trace seconds in the simulator.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, Mapping


class JobClass(str, enum.Enum):
    """What kind of DL work a job is; decides defaults, preemptibility and class weights."""

    TRAIN = "train"
    INFERENCE = "inference"
    SERVE = "serve"
    SWEEP = "sweep"
    INTERACTIVE = "interactive"

    @classmethod
    def parse(cls, value: str) -> "JobClass":
        try:
            return cls(value.strip().lower())
        except ValueError:
            allowed = ", ".join(c.value for c in cls)
            raise ValueError(f"unknown job class {value!r}; allowed: {allowed}") from None


class JobState(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, value: str) -> "JobState":
        try:
            return cls(value.strip().upper())
        except ValueError:
            return cls.OTHER

    @property
    def finished(self) -> bool:
        return self in _FINISHED

    @property
    def active(self) -> bool:
        """Holding resources now (running or winding down)."""
        # identity with module constants: a str enum compares by value and looks members up
        # through its class, both slow in the simulator's hot loops
        return self is _RUNNING or self is _COMPLETING or self is _SUSPENDED


HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})
"""Slurm's reasons for a pending job under a hold: by its owner (``--hold``, ``scontrol uhold``),
by an operator (``scontrol hold``, ``requeuehold``)."""

_PENDING, _RUNNING = JobState.PENDING, JobState.RUNNING
_COMPLETING, _SUSPENDED = JobState.COMPLETING, JobState.SUSPENDED
_FINISHED = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.PREEMPTED,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
    }
)


@dataclass(slots=True)
class Job:
    """One job (one array task counts as one job).

    ``num_gpus`` is the job's total GPU count. ``gpus_per_node``/``num_nodes`` give its shape
    when the user (or the filter) fixed one; ``None`` means "any shape Slurm finds".

    ``attained_gpu_s`` is the attained service (GPUs × executed seconds) over all runs of the
    job, requeues included; ``executed_s`` the wall-clock seconds it ran in all its runs.
    ``duration`` is the true run time and is only known to the simulator (oracle policies).

    Who writes each field: one stage fills it, and a later one only where it says so.

    - **The snapshot** (``slurm_dl.slurm``'s readers of squeue; in the simulator, the trace
      readers): identity (``job_id``, ``user``, ``account``, ``name``, ``qos``, the array
      fields), the request (``num_gpus``, ``gpus_per_node``, ``num_nodes``, ``gpu_type``,
      ``shards``, ``partition``, ``features``, ``time_limit``, ``requeue``), times
      (``submit_time``, ``eligible_time``, ``start_time``), ``state``, ``state_reason``,
      ``nodes``, Slurm's ``priority``, ``site_factor``, ``nice``, ``comment``,
      ``admin_comment``, a deadline of Slurm's own (``deadline``), ``restarts`` (Slurm's count);
      the simulator's readers also ``duration``, ``model`` and their ``tags``.
    - **The filter's tag** (the prioritizer's ``apply_tags``, from ``admin_comment``):
      ``job_class``, ``checkpointable``, ``signal_target``, ``preempt_signal``, ``lead_s``,
      ``accepted_types``; ``deadline``/``soft_deadlines`` where Slurm has none; ``num_gpus``
      where the tag counts more (a pending job's every GPU form, a job on shards).
    - **The ledger** (``apply_ledger``, across requeues and restarts): ``attained_gpu_s``,
      ``executed_s``, ``restarts`` (never lower), ``preemptions``, ``waited_s``,
      ``norm_executed_s``.
    - **The cycle's own decisions**, undone before the next snapshot (``CycleChanges``): a class
      demoted to train, a deadline set aside, the admission's marks in ``tags``.
    """

    job_id: int
    user: str = ""
    account: str = ""
    name: str = ""
    job_class: JobClass = JobClass.TRAIN
    num_gpus: int = 0
    gpus_per_node: int | None = None
    num_nodes: int | None = None
    gpu_type: str | None = None
    partition: str = ""
    submit_time: float = 0.0
    eligible_time: float | None = None
    start_time: float | None = None
    time_limit: float | None = None
    deadline: float | None = None
    soft_deadlines: tuple[tuple[float, float], ...] = ()
    checkpointable: bool = True
    state: JobState = JobState.PENDING
    state_reason: str = ""
    attained_gpu_s: float = 0.0
    executed_s: float = 0.0
    restarts: int = 0
    norm_executed_s: float | None = None
    """Run time normalised by the speed of the GPU types it ran on (a cluster of several types:
    LAS by run time reads it); None: its run time as it is."""
    features: str = ""
    """Its ``--constraint`` as Slurm holds it."""
    accepted_types: tuple[str, ...] = ()
    """The GPU types it accepts (its tag's ``types``; empty: not recorded)."""
    preemptions: int = 0
    """Times slurm-dl preempted it (the prioritizer's ledger), however each ended: a job that
    saved and kept running, or requeued itself, paid for a restart all the same."""
    nodes: tuple[str, ...] = ()
    priority: int = 0
    site_factor: int = 0
    nice: int = 0
    comment: str = ""
    admin_comment: str = ""
    qos: str = ""
    duration: float | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    requeue: bool | None = None
    """Slurm's Requeue flag (None: not known, e.g. in a trace)."""
    array_job_id: int | None = None
    """The job array this job (an array task, or the array's pending record) belongs to."""
    array_tasks: int = 1
    """Tasks this record stands for: an array's pending record holds all its waiting tasks."""
    array_throttle: int | None = None
    """An array's ``%N``: at most N of its tasks run at once (None: no throttle)."""
    signal_target: str = "batch"
    """Where a checkpointable job wants its preemption signal: the batch shell or its steps."""
    preempt_signal: str | None = None
    """The signal its own ``--signal`` names (``USR1`` for Lightning); None: the site's."""
    shards: int = 0
    """GPU shards it asks per node (GPU sharing; ``num_gpus`` is then 0)."""
    lead_s: float | None = None
    """The lead time its ``--signal=…@N`` gives its handler before a requeue; None: the site's."""
    waited_s: float | None = None
    """Seconds the job has waited to run since submission, as of now, counting only time it was
    pending, not held and past its eligible time (the prioritizer's ledger counts them cycle by
    cycle). None: ``now - submit_time - executed_s`` (the simulator's jobs, never held)."""
    model: str | None = None
    """The DL model (or job kind) the throughput model knows the job by: a row of the site's
    ``[throughput] matrix`` (slurm_dl.core.throughput); None: not known (the job's class, then
    the matrix's ``*`` row, then the GPU types' default speeds)."""
    elastic: object | None = None
    """The GPU counts it may run at (the tag's ``ElasticSizes``); None: rigid, never resized."""

    @property
    def held(self) -> bool:
        """Pending under a hold (``sbatch --hold``, ``scontrol hold``/``uhold``, ``requeuehold``)."""
        return self.state is _PENDING and self.state_reason in HELD_REASONS

    @property
    def pending(self) -> bool:
        return self.state is _PENDING

    @property
    def running(self) -> bool:
        return self.state.active

    def remaining_limit(self, now: float) -> float | None:
        """Seconds of time limit left if the job (re)started now; None without a limit."""
        if self.time_limit is None:
            return None
        if self.state.active and self.start_time is not None:
            return max(0.0, self.time_limit - (now - self.start_time))
        return self.time_limit


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU node: its GPUs (total and in use), GPU type and the leaf switch it hangs off."""

    name: str
    gpus: int
    gpu_type: str | None = None
    gpus_used: int = 0
    cpus: int = 0
    memory_mb: int = 0
    switch: str | None = None
    partitions: tuple[str, ...] = ()
    state: str = "IDLE"
    available: bool = True

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_used) if self.available else 0


@dataclass(frozen=True, slots=True)
class Switch:
    """A switch of the topology tree: leaves list nodes, upper switches list child switches."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    switches: tuple[Switch, ...] = ()

    def leaf_of(self) -> dict[str, str]:
        """Node name → name of the leaf switch that lists it."""
        out: dict[str, str] = {}
        for sw in self.switches:
            for n in sw.nodes:
                out.setdefault(n, sw.name)
        return out

    @property
    def empty(self) -> bool:
        return not self.switches

    def leaf_nodes(self) -> tuple[tuple[str, ...], ...] | None:
        """The node lists of the leaf switches (None when it has none)."""
        found = tuple(tuple(s.nodes) for s in self.switches if s.nodes)
        return found or None


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    nodes: tuple[str, ...] = ()
    max_time_s: float | None = None
    default: bool = False
    state: str = "UP"


@dataclass(slots=True)
class ClusterSnapshot:
    """What the cluster looked like at ``taken_at``: jobs (pending and running), nodes, partitions."""

    taken_at: float
    jobs: list[Job] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)
    topology: Topology = field(default_factory=Topology)

    @property
    def pending(self) -> list[Job]:
        return [j for j in self.jobs if j.state is JobState.PENDING]

    @property
    def running(self) -> list[Job]:
        return [j for j in self.jobs if j.state.active]

    def job(self, job_id: int) -> Job | None:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        return None

    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


def nodes_by_name(nodes: Iterable[Node]) -> dict[str, Node]:
    return {n.name: n for n in nodes}
