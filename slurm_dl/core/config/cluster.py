"""The cluster's shape: ``[[gpu_types]]``, ``[[node_groups]]``, ``[topology]`` and ``[[partitions]]``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..hostlist import expand_hostlist
from .base import MINUTES_PER_YEAR, Strict, num


class GpuType(Strict):
    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="the type as Slurm names it in gres.conf and "
        "--gres=gpu:NAME (and, best, as a node feature and a partition of its own)",
    )
    memory_gb: float | None = num(
        None,
        gt=0,
        le=100_000,
        description="memory of one GPU, in GB: jobs that ask "
        "for GPU memory (dl:gpu_mem, dlsubmit --gpu-mem) go only to types that have it, "
        "and a shard's share of it is counted from it; unset: unknown (a job's need is "
        "not checked against this type)",
    )
    speed: float = num(
        1.0,
        gt=0,
        le=1000,
        description="relative throughput, 1.0 = reference: the prioritizer "
        "steers jobs to faster types and charges a GPU-second at its type's speed",
    )


class NodeGroup(Strict):
    """Nodes of one shape. ``nodes`` is a Slurm hostlist (``gpu[01-16]``)."""

    name: str = Field(
        description="a name for the group ([[sharing.groups]] name it; messages show it)"
    )
    nodes: str = Field(
        description="the group's nodes as a Slurm hostlist (gpu[01-16]); each node in one "
        "group only"
    )
    gpus_per_node: int = num(
        ge=1,
        le=64,
        description="GPUs on each node: the filter reshapes a GPU count "
        "into nodes x GPUs per node that fit",
    )
    gpu_type: str = Field(description="the [[gpu_types]] name of the nodes' GPUs")
    cpus: int = num(
        32,
        ge=1,
        le=100_000,
        description="CPUs of each node (what --exclusive holds per node); "
        "config check --slurm-conf compares it with slurm.conf",
    )
    memory_gb: float = num(
        256,
        gt=0,
        le=1_000_000,
        description="memory of each node, in GB (what --exclusive "
        "holds per node); config check --slurm-conf compares it with RealMemory",
    )
    partitions: list[str] = Field(
        default_factory=list,
        description="the [[partitions]] the nodes are in; empty: every partition",
    )

    @field_validator("nodes")
    @classmethod
    def _hostlist(cls, v: str) -> str:
        expand_hostlist(v)  # raises ValueError with the reason
        return v

    @property
    def node_names(self) -> list[str]:
        return expand_hostlist(self.nodes)


class Switch(Strict):
    name: str = Field(description="the switch's name (other switches list it under switches)")
    nodes: str | None = Field(
        None,
        description="a leaf switch's nodes as a Slurm hostlist; every node must be in a node group",
    )
    switches: list[str] = Field(
        default_factory=list, description="names of the switches below this one"
    )


class TopologyConfig(Strict):
    """Where the switch tree comes from: Slurm's topology.conf, this file, or nowhere."""

    source: Literal["slurm", "config", "none"] = Field(
        "slurm",
        description="where the switch tree comes "
        "from: Slurm's topology.conf (read at most once a minute), the switches below, or nowhere; the "
        "filter asks a multi-node job to wait for the fewest leaf switches that can hold it, and "
        "preemption frees nodes under one switch",
    )
    switches: list[Switch] = Field(
        default_factory=list,
        description='with source = "config": the switches, leaves with their nodes',
    )


class Partition(Strict):
    name: str = Field(description="the partition's name in slurm.conf")
    default: bool = Field(
        False,
        description="Slurm's default partition (at most one): jobs that name none "
        "and whose class names none are checked against it; unset everywhere: the first "
        "partition",
    )
    max_time_minutes: int | None = num(
        None,
        ge=1,
        le=MINUTES_PER_YEAR,
        description="the longest time limit "
        "the partition allows (its MaxTime): the filter refuses longer ones "
        "and users may not raise a job past it; unset: the class maximum only",
    )
