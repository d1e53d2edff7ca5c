"""The one interface every Slurm backend implements (CLI by default, pyslurm optionally).

Errors are ``slurm_dl.core.errors`` types: ``SlurmUnavailableError`` (slurmctld unreachable; retry),
``JobNotFoundError`` (unknown job id), ``SlurmNotInstalledError``, ``SlurmError`` otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Protocol, Sequence, runtime_checkable

from ..core.jobid import JobRef
from ..core.model import ClusterSnapshot, Job, JobState, Node, Partition, Topology
from .gpu_alloc import GpuAllocation

# Longest job id list one ``scontrol update jobid=…`` call carries (ARG_MAX is far above this).
SITE_FACTOR_CHUNK = 2000
SITE_FACTOR_MIN = -2147483645
SITE_FACTOR_MAX = 2147483645


@dataclass(frozen=True, slots=True)
class SiteFactorResult:
    """What ``set_site_factor`` did: how many Slurm calls, and the ids Slurm no longer knew
    (jobs that ended between a snapshot and the update: normal for a daemon, not an error)."""

    updated: int
    calls: int
    missing: tuple[int, ...] = field(default=())


def group_by_value(factors: Mapping[int, int]) -> dict[int, list[int]]:
    """{job_id: value} -> {value: [job ids, sorted]}: one Slurm call per value (and chunk)."""
    groups: dict[int, list[int]] = {}
    for job_id, value in factors.items():
        value = int(value)
        if not SITE_FACTOR_MIN <= value <= SITE_FACTOR_MAX:
            raise ValueError(
                f"SiteFactor {value} for job {job_id} is out of range [{SITE_FACTOR_MIN}, {SITE_FACTOR_MAX}]"
            )
        groups.setdefault(value, []).append(int(job_id))
    return {v: sorted(ids) for v, ids in sorted(groups.items())}


def chunked(ids: Sequence[int], size: int = SITE_FACTOR_CHUNK) -> list[list[int]]:
    if size < 1:
        raise ValueError("chunk size must be at least 1")
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


_GRES_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True, slots=True)
class PendingSize:
    """A pending job's new size, as ``scontrol update`` takes it (the same on 22.05, 24.11 and
    26.05): ``nodes`` x ``gpus_per_node`` (``NumNodes=N-N TresPerNode=gres/gpu:G``: ``NumNodes=N``
    alone moves only the minimum), or ``gpus`` over any nodes (``TresPerJob=gres/gpu:G``)."""

    gpus: int
    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_type: str | None = None

    def __post_init__(self) -> None:
        per_node = (self.nodes, self.gpus_per_node)
        if (per_node[0] is None) != (per_node[1] is None):
            raise ValueError("a per-node size names both nodes and GPUs per node")
        if self.nodes is not None and self.nodes * self.gpus_per_node != self.gpus:
            raise ValueError(
                f"{self.nodes} nodes x {self.gpus_per_node} GPUs is not {self.gpus} GPUs"
            )
        if min(v for v in (self.gpus, *per_node) if v is not None) < 1:
            raise ValueError(f"a size is at least 1 GPU on 1 node, not {self}")
        if self.gpu_type is not None and not _GRES_NAME.match(self.gpu_type):
            raise ValueError(f"bad GPU type {self.gpu_type!r}")

    def scontrol_fields(self) -> tuple[str, ...]:
        gres = f"gres/gpu:{self.gpu_type}" if self.gpu_type else "gres/gpu"
        if self.nodes is None:
            return (f"TresPerJob={gres}:{self.gpus}",)
        return (f"NumNodes={self.nodes}-{self.nodes}", f"TresPerNode={gres}:{self.gpus_per_node}")


@dataclass(frozen=True, slots=True)
class JobEnd:
    """What Slurm still knows of a job no longer in the queue's snapshot (``scontrol show job``,
    for ``MinJobAge`` after it ends): its state, the signal that ended it (0: none), when it
    ended and how often it was requeued."""

    state: JobState
    exit_signal: int = 0
    exit_code: int = 0
    end_time: float | None = None
    restarts: int = 0

    @property
    def died(self) -> bool:
        """Ended by a signal, or failed (a handler that was missing or crashed)."""
        return self.exit_signal != 0 or self.state in (
            JobState.FAILED,
            JobState.NODE_FAIL,
            JobState.OUT_OF_MEMORY,
        )


@runtime_checkable
class SlurmBackend(Protocol):
    """Read and write a Slurm cluster. Times are Unix epoch seconds."""

    name: str
    call_s: float
    """Wall seconds spent waiting on Slurm so far (the prioritizer backs off when a cycle's share
    grows)."""

    def slurm_release(self) -> str:
        """The release of the Slurm clients (``22.05``); an unsupported one is a SlurmError."""
        ...

    # -- reading --------------------------------------------------------------------------
    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """Jobs in ``states`` (default: pending and running/completing/suspended)."""
        ...

    def nodes(self) -> list[Node]:
        """Nodes with GPUs total and in use, and their leaf switch."""
        ...

    def partitions(self) -> list[Partition]: ...

    def topology(self) -> Topology: ...

    def site_factors(self) -> dict[int, int]:
        """SiteFactor of jobs Slurm is prioritising now (eligible pending jobs)."""
        ...

    def gpu_allocations(self, node: str | None = None) -> list[GpuAllocation]:
        """GPU indices Slurm assigned to each running job (on ``node`` only, when given)."""
        ...

    def snapshot(self, now: float | None = None) -> ClusterSnapshot:
        """Jobs, nodes, partitions and topology; ``taken_at`` = ``now`` or the current time."""
        ...

    # -- writing --------------------------------------------------------------------------
    def submit(
        self,
        script: str | Path,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> int:
        """``sbatch --parsable``: a script text (or a path to one) -> the new job id."""
        ...

    def cancel(self, job_id: int | JobRef) -> None:
        """Cancel a job; a JobRef may name array tasks or a hetjob component (Slurm's own form)."""
        ...

    def set_site_factor(self, factors: Mapping[int, int]) -> SiteFactorResult: ...

    def signal_batch(self, job_id: int, signal: str = "USR2") -> None:
        """Send ``signal`` to the job's batch shell only (checkpoint before a requeue)."""
        ...

    def signal_steps(self, job_id: int, signal: str = "USR2") -> None:
        """Send ``signal`` to every step of the job except its batch shell."""
        ...

    def set_comment(self, job_id: int, text: str) -> None:
        """Replace the job's comment (the idle policy appends its note to the user's text)."""
        ...

    def requeue(self, job_id: int) -> None: ...

    def set_partition(self, job_id: int, partition: str) -> None:
        """Move a pending job to ``partition`` (a list: ``a,b``): steering it to a GPU type."""
        ...

    def set_features(self, job_id: int, features: str) -> None:
        """Set a pending job's ``--constraint`` (``h100``): steering it to a GPU type."""
        ...

    def set_nodes(self, job_id: int, nodes: str) -> None:
        """A pending job's required nodes (empty: any again): steering a shard job to a GPU."""
        ...

    def job_end(self, job_id: int) -> JobEnd:
        """A job's state as Slurm keeps it after it left the queue (JobNotFoundError: forgotten)."""
        ...

    def hold(self, job_id: int) -> None: ...

    def release(self, job_id: int) -> None:
        """Release a held job (a user or admin hold, or ``requeue_hold``'s)."""
        ...

    def requeue_hold(self, job_id: int) -> None:
        """Requeue a running job and hold it, so its size can change before it starts again
        (a pending job: JobPendingError)."""
        ...

    def resize_pending(self, job_id: int, size: PendingSize) -> None:
        """Change a pending job's size (Slurm cannot change a running job's)."""
        ...

    def set_power(self, nodes: Sequence[str], up: bool) -> None:
        """Power nodes up or down through Slurm's power saving (``State=POWER_UP|POWER_DOWN``);
        a node's power state is in its ``Node.state`` flags (``slurm.power.node_power``)."""
        ...

    def reserved_nodes(self, now: float, within_s: float) -> set[str]:
        """Nodes in a reservation active now or starting within ``within_s`` seconds."""
        ...
