"""What the filter decides about one job, and the data the rules need besides the job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from ..model import JobClass

# Slurm error codes the shim returns on rejection. Names are looked up in the Lua ``slurm`` table
# (the ones 22.05 exports); numbers are passed as they are.
ESLURM_INVALID_GRES = 2072
CODE_TIME_LIMIT = "ESLURM_INVALID_TIME_LIMIT"
CODE_MISSING_TIME_LIMIT = "ESLURM_MISSING_TIME_LIMIT"
CODE_NODE_COUNT = "ESLURM_INVALID_NODE_COUNT"
CODE_POLICY = "ESLURM_ACCOUNTING_POLICY"
CODE_ACCESS_DENIED = "ESLURM_ACCESS_DENIED"


@dataclass(frozen=True, slots=True)
class FilterContext:
    """Facts from outside the job that the service gathers at its edge and passes in as data.

    ``now``: Unix seconds. ``user_deadline_jobs``: live (pending or running) deadline jobs the
    submitting user already holds. ``user_class_gpus``: GPUs the user already holds in live jobs,
    per class name. (The service counts both from Slurm's live jobs.)
    """

    now: float
    user_deadline_jobs: int = 0
    user_class_gpus: Mapping[str, int] = field(default_factory=dict)
    leaf_nodes: tuple[tuple[str, ...], ...] | None = None
    """The leaf switches' nodes from Slurm (topology source "slurm"); None: not known."""
    user_accounts: frozenset[str] | None = None
    """The accounts Slurm's associations let the submitting user name (lower case); None: Slurm
    keeps no associations (no slurmdbd), so an account cannot be checked."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """A rejection: what was asked, what is allowed, and how to fix it, in one message."""

    rule: str
    message: str
    code: str | int = CODE_ACCESS_DENIED


@dataclass(frozen=True, slots=True)
class Draft:
    """The decision being built, rule by rule."""

    job_class: JobClass = JobClass.TRAIN
    class_source: str = "default"
    checkpointable: bool = False
    changes: dict[str, Any] = field(default_factory=dict)
    notices: tuple[str, ...] = ()
    shape: str = "any"
    gpus: int = 0
    deadline: int | None = None
    signal_target: str = "batch"
    signal: str | None = None  # the preemption signal the job's --signal names (None: the site's)
    lead_s: int | None = None  # the lead time its --signal gives the handler
    gpu_types: tuple[str, ...] = ()  # the GPU types it accepts (): not decided
    shards: tuple[int, int] | None = None  # on GPU shards: (shards, shards per GPU)
    soft_deadlines: tuple[tuple[int, float], ...] = ()  # (Unix seconds, share of the top value)
    shard_gpus: int = 0  # the GPUs its own shard request (--gres=shard:K) counts as
    elastic: Any = None  # the GPU counts it may run at (ElasticSizes); None: rigid

    @property
    def counted_gpus(self) -> int:
        """GPUs the job counts as in caps, quotas and the tag: whole GPUs and shards together."""
        return self.gpus + self.shard_gpus

    def evolve(self, **changes: Any) -> "Draft":
        """A copy with ``changes`` (like dataclasses.replace, without its per-call field scan)."""
        g = changes.get
        return Draft(
            g("job_class", self.job_class),
            g("class_source", self.class_source),
            g("checkpointable", self.checkpointable),
            g("changes", self.changes),
            g("notices", self.notices),
            g("shape", self.shape),
            g("gpus", self.gpus),
            g("deadline", self.deadline),
            g("signal_target", self.signal_target),
            g("signal", self.signal),
            g("lead_s", self.lead_s),
            g("gpu_types", self.gpu_types),
            g("shards", self.shards),
            g("soft_deadlines", self.soft_deadlines),
            g("shard_gpus", self.shard_gpus),
            g("elastic", self.elastic),
        )


@dataclass(frozen=True, slots=True)
class FilterDecision:
    """Accept (with ``changes`` to write into job_desc) or reject (with ``message`` and ``code``).

    ``notices`` are shown to the submitting user on acceptance; ``summary`` is the log line.
    """

    action: Literal["accept", "reject"]
    job_class: JobClass | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    code: str | int | None = None
    rule: str | None = None
    notices: tuple[str, ...] = ()
    summary: str = ""

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the service sends back to the Lua shim."""
        if self.accepted:
            return {
                "v": 1,
                "action": "accept",
                "set": dict(self.changes),
                "notices": list(self.notices),
            }
        return {"v": 1, "action": "reject", "message": self.message, "code": self.code}
