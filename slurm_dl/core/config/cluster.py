"""The cluster's shape: ``[[gpu_types]]``, ``[[node_groups]]``, ``[topology]`` and ``[[partitions]]``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..hostlist import expand_hostlist
from .base import MINUTES_PER_YEAR, Strict, num


class GpuType(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    memory_gb: float | None = num(None, gt=0, le=100_000)
    speed: float = num(1.0, gt=0, le=1000, description="relative throughput, 1.0 = reference")


class NodeGroup(Strict):
    """Nodes of one shape. ``nodes`` is a Slurm hostlist (``gpu[01-16]``)."""

    name: str
    nodes: str
    gpus_per_node: int = num(ge=1, le=64)
    gpu_type: str
    cpus: int = num(32, ge=1, le=100_000)
    memory_gb: float = num(256, gt=0, le=1_000_000)
    partitions: list[str] = Field(default_factory=list)

    @field_validator("nodes")
    @classmethod
    def _hostlist(cls, v: str) -> str:
        expand_hostlist(v)  # raises ValueError with the reason
        return v

    @property
    def node_names(self) -> list[str]:
        return expand_hostlist(self.nodes)


class Switch(Strict):
    name: str
    nodes: str | None = None
    switches: list[str] = Field(default_factory=list)


class TopologyConfig(Strict):
    """Where the switch tree comes from: Slurm's topology.conf, this file, or nowhere."""

    source: Literal["slurm", "config", "none"] = "slurm"
    switches: list[Switch] = Field(default_factory=list)


class Partition(Strict):
    name: str
    default: bool = False
    max_time_minutes: int | None = num(None, ge=1, le=MINUTES_PER_YEAR)
