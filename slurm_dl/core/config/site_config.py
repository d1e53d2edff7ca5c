"""The root of the site config: :class:`SiteConfig`, its sections, the checks across them and
the views derived from them."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..hostlist import expand_hostlist
from ..model import JobClass
from .base import Strict
from .cluster import GpuType, NodeGroup, Partition, TopologyConfig
from .filter import Caps, FilterConfig
from .elastic import ElasticConfig
from .job_classes import JobClassConfig, default_classes
from .policy import PolicyConfig
from .power import PowerConfig
from .preemption import PreemptionConfig
from .prioritizer import PrioritizerConfig
from .sharing import SharingConfig
from .simulate import SimulateConfig
from .slurm import SlurmConfig
from .site import SiteInfo
from .telemetry import TelemetryConfig
from .throughput import ThroughputConfig


class SiteConfig(Strict):
    site: SiteInfo = Field(
        default_factory=SiteInfo, description="the site's name and the prioritizer's database"
    )
    gpu_types: list[GpuType] = Field(min_length=1, description="the cluster's GPU types")
    node_groups: list[NodeGroup] = Field(
        min_length=1, description="the GPU nodes, in groups of one shape and GPU type"
    )
    partitions: list[Partition] = Field(
        default_factory=lambda: [Partition(name="gpu", default=True)],
        min_length=1,
        description='the cluster\'s partitions, as in slurm.conf; unset: one, "gpu", the default',
    )
    topology: TopologyConfig = Field(
        default_factory=TopologyConfig,
        description="the switch tree the filter and preemption place multi-node jobs in",
    )
    caps: Caps = Field(
        default_factory=Caps,
        description="CPUs, memory and GPUs a job may hold, and what becomes of jobs without GPUs",
    )
    classes: dict[JobClass, JobClassConfig] = Field(
        default_factory=default_classes,
        description="the job "
        "classes (train, inference, serve, sweep, interactive): "
        "a class named here overrides its defaults key by key",
    )
    policy: PolicyConfig = Field(
        default_factory=PolicyConfig, description="how the prioritizer orders the queue"
    )
    preemption: PreemptionConfig = Field(
        default_factory=PreemptionConfig,
        description="when and how the prioritizer stops an opted-in running job for a waiting one",
    )
    filter: FilterConfig = Field(
        default_factory=FilterConfig,
        description="the job_submit filter: its "
        "service, the shim's failure mode and the rules it runs",
    )
    prioritizer: PrioritizerConfig = Field(
        default_factory=PrioritizerConfig,
        description="the daemon's cycle, its SiteFactor range and its endpoints",
    )
    telemetry: TelemetryConfig = Field(
        default_factory=TelemetryConfig,
        description="GPU samples from the gpu-agents and what becomes of jobs that hold idle GPUs",
    )
    throughput: ThroughputConfig = Field(
        default_factory=ThroughputConfig,
        description="what the throughput model knows beyond each GPU type's speed",
    )
    simulate: SimulateConfig = Field(
        default_factory=SimulateConfig,
        description="defaults of slurm-dl "
        "simulate --via-slurm (the replays as one Slurm job array)",
    )
    sharing: SharingConfig = Field(
        default_factory=SharingConfig,
        description="GPUs offered in parts (Slurm shards, MPS) to small jobs",
    )
    power: PowerConfig = Field(
        default_factory=PowerConfig,
        description="powering idle GPU nodes down ahead of demand, and the node power model "
        "the what-if counts energy with",
    )
    elastic: ElasticConfig = Field(
        default_factory=ElasticConfig,
        description="how jobs that run on a range of GPUs are started, grown and shrunk",
    )
    slurm: SlurmConfig = Field(
        default_factory=SlurmConfig,
        description="how slurm-dl talks to Slurm (its commands, or pyslurm)",
    )

    @field_validator("throughput")
    @classmethod
    def _throughput_types(cls, v: ThroughputConfig, info: ValidationInfo) -> ThroughputConfig:
        """The matrix names only the site's GPU types."""
        types = {g.name for g in info.data.get("gpu_types") or []}
        if types and v.matrix_rows:
            unknown = sorted({t for r in v.matrix_rows.values() for t in r} - types)
            if unknown:
                raise ValueError(
                    f"{v.matrix}: unknown GPU types {unknown}; allowed: {sorted(types)} "
                    "(from gpu_types)"
                )
        return v

    @field_validator("classes", mode="before")
    @classmethod
    def _merge_classes(cls, v: Any) -> Any:
        """Classes not named in the file keep their defaults; named ones override field by field."""
        if not isinstance(v, dict):
            return v
        merged: dict[Any, Any] = {k: c.model_dump() for k, c in default_classes().items()}
        for k, c in v.items():
            if isinstance(c, dict) and k in merged:
                merged[k] = {**merged[k], **c}
            else:
                merged[k] = c
        return merged

    @model_validator(mode="after")
    def _cross_checks(self) -> "SiteConfig":
        problems: list[str] = []
        types = {g.name for g in self.gpu_types}
        if len(types) != len(self.gpu_types):
            problems.append("gpu_types: names must be unique")
        parts = {p.name for p in self.partitions}
        if len(parts) != len(self.partitions):
            problems.append("partitions: names must be unique")
        seen_nodes: set[str] = set()
        for i, g in enumerate(self.node_groups):
            if g.gpu_type not in types:
                problems.append(
                    f"node_groups[{i}].gpu_type: got {g.gpu_type!r}; allowed: {sorted(types)} (from gpu_types)"
                )
            for p in g.partitions:
                if p not in parts:
                    problems.append(
                        f"node_groups[{i}].partitions: unknown partition {p!r}; allowed: {sorted(parts)}"
                    )
            dup = seen_nodes.intersection(g.node_names)
            if dup:
                problems.append(f"node_groups[{i}].nodes: nodes listed twice: {sorted(dup)[:5]}")
            seen_nodes.update(g.node_names)
        for name, c in self.classes.items():
            if c.partition is not None and c.partition not in parts:
                problems.append(
                    f"classes.{name.value}.partition: got {c.partition!r}; allowed: {sorted(parts)}"
                )
        if self.topology.source == "config":
            sw_names = {s.name for s in self.topology.switches}
            for i, s in enumerate(self.topology.switches):
                for child in s.switches:
                    if child not in sw_names:
                        problems.append(
                            f"topology.switches[{i}].switches: unknown switch {child!r}"
                        )
                if s.nodes:
                    try:
                        unknown = set(expand_hostlist(s.nodes)) - seen_nodes
                    except ValueError as e:
                        problems.append(f"topology.switches[{i}].nodes: {e}")
                        continue
                    if unknown:
                        problems.append(
                            f"topology.switches[{i}].nodes: nodes not in any node group: {sorted(unknown)[:5]}"
                        )
        route = self.caps.cpu_only_partition
        if route is not None and route not in parts:
            problems.append(f"caps.cpu_only_partition: got {route!r}; allowed: {sorted(parts)}")
        elif (
            route is not None
            and self.caps.cpu_only_jobs == "route"
            and route in self.gpu_partitions
        ):
            problems.append(
                f"caps.cpu_only_partition: {route!r} has GPU nodes; name a partition without them"
            )
        if sum(1 for p in self.partitions if p.default) > 1:
            problems.append("partitions: at most one partition may be default = true")
        problems += self._sharing_problems()
        problems += [
            f"power.gpu_types.{name}: not a GPU type; allowed: {sorted(types)} (from gpu_types)"
            for name in sorted(set(self.power.gpu_types) - types)
        ]
        if problems:  # one line each (the error list shows them without the whole file)
            raise ValueError("\n".join(problems))
        return self

    def _sharing_problems(self) -> list[str]:
        """Each [[sharing.groups]] names a node group with GPUs, once; a shard's memory fits
        its share of the GPU's."""
        groups = {
            g.name: g for g in self.node_groups
        }  # every node group has GPUs (gpus_per_node >= 1)
        memory = {t.name: t.memory_gb for t in self.gpu_types}
        problems, seen = [], set()
        for i, sg in enumerate(self.sharing.groups):
            key = f"sharing.groups[{i}]"
            g = groups.get(sg.node_group)
            if g is None:
                problems.append(
                    f"{key}.node_group: got {sg.node_group!r}: no node group with GPUs of that "
                    f"name; allowed: {sorted(groups)}"
                )
                continue
            if sg.node_group in seen:
                problems.append(f"{key}.node_group: {sg.node_group!r} is named twice")
            seen.add(sg.node_group)
            mem = memory.get(g.gpu_type)
            if (
                sg.shard_memory_gb is not None
                and sg.shards_per_gpu
                and mem is not None
                and sg.shard_memory_gb * sg.shards_per_gpu > mem
            ):
                problems.append(
                    f"{key}.shard_memory_gb: {sg.shard_memory_gb:g} GB x {sg.shards_per_gpu} shards "
                    f"is more than a {g.gpu_type}'s {mem:g} GB"
                )
        return problems

    # --- derived views -------------------------------------------------------------------
    @property
    def gpu_type_names(self) -> list[str]:
        return [g.name for g in self.gpu_types]

    @property
    def max_gpus_per_node(self) -> int:
        return max(g.gpus_per_node for g in self.node_groups)

    @property
    def total_gpus(self) -> int:
        return sum(g.gpus_per_node * len(g.node_names) for g in self.node_groups)

    @property
    def gpu_partitions(self) -> frozenset[str]:
        """Partitions with GPU nodes (a node group that names none is in every partition)."""
        if any(not g.partitions for g in self.node_groups):
            return frozenset(p.name for p in self.partitions)
        return frozenset(p for g in self.node_groups for p in g.partitions)

    @property
    def default_partition(self) -> str:
        for p in self.partitions:
            if p.default:
                return p.name
        return self.partitions[0].name if self.partitions else ""

    def class_config(self, job_class: JobClass | str) -> JobClassConfig:
        return self.classes[JobClass(job_class)]


def cluster_only(nodes: int = 8, gpus_per_node: int = 8, gpu_type: str = "gpu") -> dict[str, Any]:
    """The data of a site config that names only the cluster: one GPU type and one node group of
    ``nodes`` nodes with ``gpus_per_node`` GPUs each; every other setting is the default. What
    ``simulate`` and ``tune`` replay without ``--config``: the scheduler a site that sets
    nothing else runs."""
    names = "n1" if nodes == 1 else f"n[1-{nodes}]"
    return {
        "gpu_types": [{"name": gpu_type, "memory_gb": 80}],
        "node_groups": [
            {"name": gpu_type, "nodes": names, "gpus_per_node": gpus_per_node, "gpu_type": gpu_type}
        ],
    }
