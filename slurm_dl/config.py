"""Site configuration: one TOML file per site, validated with pydantic.

A bad file fails loudly: :class:`~slurm_dl.errors.ConfigError` lists every problem as
``key.path: got VALUE; allowed: …``. Unknown keys are errors too (a typo must not be ignored).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .hostlist import expand_hostlist
from .model import JobClass
from .site_paths import DEFAULT_DATABASE_URL, relative_sqlite_problem


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SiteInfo(_Strict):
    name: str = "site"
    database_url: str = DEFAULT_DATABASE_URL

    @field_validator("database_url")
    @classmethod
    def _absolute_sqlite(cls, v: str) -> str:
        problem = relative_sqlite_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class GpuType(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    memory_gb: float | None = Field(default=None, gt=0)
    speed: float = Field(default=1.0, gt=0, description="relative throughput, 1.0 = reference")


class NodeGroup(_Strict):
    """Nodes of one shape. ``nodes`` is a Slurm hostlist (``gpu[01-16]``)."""

    name: str
    nodes: str
    gpus_per_node: int = Field(ge=1, le=64)
    gpu_type: str
    cpus: int = Field(default=32, ge=1)
    memory_gb: float = Field(default=256, gt=0)
    partitions: list[str] = Field(default_factory=list)

    @field_validator("nodes")
    @classmethod
    def _hostlist(cls, v: str) -> str:
        expand_hostlist(v)  # raises ValueError with the reason
        return v

    @property
    def node_names(self) -> list[str]:
        return expand_hostlist(self.nodes)


class Switch(_Strict):
    name: str
    nodes: str | None = None
    switches: list[str] = Field(default_factory=list)


class TopologyConfig(_Strict):
    """Where the switch tree comes from: Slurm's topology.conf, this file, or nowhere."""

    source: Literal["slurm", "config", "none"] = "slurm"
    switches: list[Switch] = Field(default_factory=list)


class Partition(_Strict):
    name: str
    default: bool = False
    max_time_minutes: int | None = Field(default=None, ge=1)


class Caps(_Strict):
    max_cpus_per_gpu: int = Field(default=16, ge=1)
    max_mem_per_gpu_gb: float = Field(default=128, gt=0)
    max_gpus_per_job: int | None = Field(default=None, ge=1)


class JobClassConfig(_Strict):
    default_time_minutes: int = Field(default=240, ge=1)
    max_time_minutes: int = Field(default=4320, ge=1)
    partition: str | None = None
    checkpointable: bool = True
    preemptible: bool = True
    weight: float = Field(default=1.0, gt=0, description="class weight in the policy mix")

    @model_validator(mode="after")
    def _limits(self) -> "JobClassConfig":
        if self.default_time_minutes > self.max_time_minutes:
            raise ValueError(
                f"default_time_minutes ({self.default_time_minutes}) exceeds max_time_minutes "
                f"({self.max_time_minutes})"
            )
        return self


def _default_classes() -> dict[str, JobClassConfig]:
    return {
        "train": JobClassConfig(default_time_minutes=720, max_time_minutes=4320, weight=1.0),
        "inference": JobClassConfig(default_time_minutes=240, max_time_minutes=1440, weight=1.0),
        "serve": JobClassConfig(
            default_time_minutes=1440, max_time_minutes=10080, checkpointable=False, preemptible=False, weight=4.0
        ),
        "sweep": JobClassConfig(default_time_minutes=240, max_time_minutes=1440, weight=1.0),
        "interactive": JobClassConfig(
            default_time_minutes=60, max_time_minutes=480, checkpointable=False, preemptible=False, weight=3.0
        ),
    }


class LasConfig(_Strict):
    """LAS: queue k holds jobs whose attained service is below thresholds[k]."""

    thresholds_gpu_s: list[float] = Field(default_factory=lambda: [3250.0, 7200.0, 18000.0],
                                          description="queue thresholds, in the unit of 'service'")
    service: Literal["seconds", "gpu-seconds"] = Field(
        default="seconds",
        description="'seconds': run time, so a job split into many smaller ones ranks like the whole "
                    "(fair share charges the GPUs); 'gpu-seconds': Tiresias' 2D-LAS, which favours "
                    "narrow jobs and so rewards splitting")
    starvation_factor: float | None = Field(
        default=None, gt=0, description="promote a job that waited longer than S × its executed time"
    )

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("at least one threshold is needed")
        if any(not math.isfinite(t) or t <= 0 for t in v):
            raise ValueError(f"thresholds must be positive and finite, got {v}")
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"thresholds must be strictly increasing, got {v}")
        return v


class GittinsConfig(_Strict):
    prior: str = Field(
        default="tiresias", description="'tiresias' (built-in sample) or a CSV path with a 'duration' column"
    )
    prior_weight: float = Field(default=1.0, ge=0, description="weight of the prior against observed history")
    bins: int = Field(default=32, ge=2, le=4096)


class QssfConfig(_Strict):
    default_gpu_s: float = Field(default=3600.0, gt=0, description="prediction when a job has no history")


class FairShareConfig(_Strict):
    half_life_hours: float = Field(default=168.0, gt=0)
    shares: dict[str, float] = Field(default_factory=dict)
    default_share: float = Field(default=1.0, gt=0)

    @field_validator("shares")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: s for k, s in v.items() if not (s > 0 and math.isfinite(s))}
        if bad:
            raise ValueError(f"shares must be positive, got {bad}")
        return v


class DeadlineConfig(_Strict):
    boost_slack_minutes: float = Field(default=60.0, gt=0, description="boost jobs whose slack falls below this")
    max_deadline_days: float = Field(default=7.0, gt=0, description="deadline quota: furthest deadline allowed")
    max_deadline_jobs_per_user: int = Field(default=4, ge=0)


PolicyName = Literal[
    "fifo", "fifo-firstfit", "fifo-backfill", "las", "gittins", "qssf", "fairshare", "deadline", "combined"
]
ComponentName = Literal["fifo", "las", "gittins", "qssf", "fairshare", "deadline", "class"]


class CombinedConfig(_Strict):
    """Tiers are compared in order; within a tier, component scores are summed with weights."""

    tiers: list[list[ComponentName]] = Field(
        default_factory=lambda: [["deadline"], ["class"], ["las", "fairshare"]]
    )
    weights: dict[ComponentName, float] = Field(default_factory=dict)

    @field_validator("tiers")
    @classmethod
    def _nonempty(cls, v: list[list[str]]) -> list[list[str]]:
        if not v or any(not t for t in v):
            raise ValueError("tiers must be a non-empty list of non-empty lists")
        seen: set[str] = set()
        for tier in v:
            for name in tier:
                if name in seen:
                    raise ValueError(f"component {name!r} appears in more than one tier")
                seen.add(name)
        return v

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: w for k, w in v.items() if not (w >= 0 and math.isfinite(w))}
        if bad:
            raise ValueError(f"weights must be non-negative, got {bad}")
        return v


class PolicyConfig(_Strict):
    mix: PolicyName = "combined"
    las: LasConfig = Field(default_factory=LasConfig)
    gittins: GittinsConfig = Field(default_factory=GittinsConfig)
    qssf: QssfConfig = Field(default_factory=QssfConfig)
    fairshare: FairShareConfig = Field(default_factory=FairShareConfig)
    deadline: DeadlineConfig = Field(default_factory=DeadlineConfig)
    combined: CombinedConfig = Field(default_factory=CombinedConfig)


class PreemptionConfig(_Strict):
    enabled: bool = True
    signal: Literal["USR2", "USR1", "TERM", "INT", "HUP"] = "USR2"
    grace_seconds: float = Field(default=120.0, ge=0)
    min_runtime_seconds: float = Field(default=600.0, ge=0)
    max_restarts: int = Field(default=5, ge=0)
    hysteresis: float = Field(
        default=0.1, ge=0, le=1, description="a waiting job must beat a victim's score by this margin"
    )
    checkpoint_recent_seconds: float = Field(default=900.0, ge=0)
    restart_delay_seconds: float = Field(default=30.0, ge=0, description="simulator: requeue to restart")
    checkpoint_interval_seconds: float = Field(default=1800.0, gt=0, description="simulator: work lost bound")
    requeue_without_signal: bool = Field(
        default=False, description="also requeue, without a signal, running jobs that are requeueable but declared "
        "no checkpoint handler (they restart from the beginning and lose their work)")
    requeue_timeout_seconds: float = Field(
        default=300.0, gt=0, le=86400, description="after the grace period, how long a requeue may keep failing "
        "(slurmctld unreachable) before the preemption is given up")

    @field_validator("signal")
    @classmethod
    def _not_usr1(cls, v: str) -> str:
        if v == "USR1":
            raise ValueError("USR1 is taken by NCCL; use USR2")
        return v


class FilterConfig(_Strict):
    socket: str = "/run/slurm-dl/filter.sock"
    timeout_ms: int = Field(default=200, ge=1, le=200)
    failure_mode: Literal["accept", "reject"] = "accept"
    max_concurrent: int = Field(default=16, ge=1, le=1024)
    classify: bool = True
    validate_jobs: bool = True
    reshape: bool = True
    defaults: bool = True
    tag: bool = True
    switch_wait_minutes: int = Field(default=10, ge=0)
    time_limit_guard: Literal["class_max", "any", "off"] = Field(
        default="class_max", description="users raising a time limit after submission: refused past the tagged "
        "class's maximum (class_max), refused always (any), or left to Slurm (off)")
    breaker_failures: int = Field(default=3, ge=1, le=1000, description="failed asks in a row that open the "
                                  "shim's circuit breaker")
    breaker_cooldown_seconds: float = Field(default=5.0, gt=0, le=3600, description="how long the open breaker "
                                            "skips the service (jobs follow failure_mode at once), then one probe")


class PrioritizerConfig(_Strict):
    interval_seconds: float = Field(default=5.0, gt=0)
    site_factor_levels: int = Field(default=64, ge=2, le=10000)
    site_factor_max: int = Field(default=1_000_000, ge=1, le=2_147_483_645)
    max_pushes_per_cycle: int = Field(default=1000, ge=0, description="SiteFactor changes pushed per cycle, top of "
                                      "the queue first; the rest follow in later cycles (0: no limit)")
    backoff_max_seconds: float = Field(default=60.0, gt=0)


class TelemetryConfig(_Strict):
    sample_seconds: float = Field(default=30.0, gt=0)
    idle_util_percent: float = Field(default=2.0, ge=0, le=100)
    idle_minutes: float = Field(default=60.0, gt=0)
    idle_action: Literal["report", "warn", "deprioritize", "cancel"] = "report"
    warn_grace_minutes: float = Field(default=30.0, ge=0, description="idle time after the warning before acting")
    interactive_idle_minutes: float | None = Field(default=None, gt=0, description="interactive jobs' own idle "
                                                   "limit; unset: interactive jobs are never acted on")
    dry_run: bool = Field(default=False, description="decide as configured but only report")
    exposition_dir: str | None = Field(default=None, description="directory of the gpu-agents' <node>.prom "
                                       "files the prioritizer reads; unset: no telemetry in the prioritizer")
    warn_via: list[Literal["log", "comment"]] = Field(
        default_factory=lambda: ["log", "comment"],
        description="how an idle job is warned: a prioritizer log line and/or a note appended to the job's comment")

    @field_validator("warn_via")
    @classmethod
    def _warn_via(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one of 'log', 'comment'")
        if len(set(v)) != len(v):
            raise ValueError(f"each way at most once, got {v}")
        return v


class SiteConfig(_Strict):
    site: SiteInfo = Field(default_factory=SiteInfo)
    gpu_types: list[GpuType]
    node_groups: list[NodeGroup]
    partitions: list[Partition] = Field(default_factory=lambda: [Partition(name="gpu", default=True)])
    topology: TopologyConfig = Field(default_factory=TopologyConfig)
    caps: Caps = Field(default_factory=Caps)
    classes: dict[JobClass, JobClassConfig] = Field(default_factory=_default_classes)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    prioritizer: PrioritizerConfig = Field(default_factory=PrioritizerConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    @field_validator("classes", mode="before")
    @classmethod
    def _merge_classes(cls, v: Any) -> Any:
        """Classes not named in the file keep their defaults; named ones override field by field."""
        if not isinstance(v, dict):
            return v
        merged: dict[Any, Any] = {k: c.model_dump() for k, c in _default_classes().items()}
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
                    problems.append(f"node_groups[{i}].partitions: unknown partition {p!r}; allowed: {sorted(parts)}")
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
                        problems.append(f"topology.switches[{i}].switches: unknown switch {child!r}")
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
        if sum(1 for p in self.partitions if p.default) > 1:
            problems.append("partitions: at most one partition may be default = true")
        if problems:
            raise ValueError("; ".join(problems))
        return self

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
    def default_partition(self) -> str:
        for p in self.partitions:
            if p.default:
                return p.name
        return self.partitions[0].name if self.partitions else ""

    def class_config(self, job_class: JobClass | str) -> JobClassConfig:
        return self.classes[JobClass(job_class)]


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _format_errors(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors(include_url=False):
        loc = _format_loc(tuple(x for x in e["loc"] if x not in ("function-after", "function-before")))
        value = e.get("input")
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            problems.append(f"{loc}: unknown key (check the spelling; see site-configs/ for the allowed keys)")
        elif e["type"] == "missing":
            problems.append(f"{loc}: required key is missing")
        else:
            shown = repr(value)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            problems.append(f"{loc}: got {shown}; {msg}")
    return problems


def parse_config(data: dict[str, Any], source: str = "<config>") -> SiteConfig:
    try:
        return SiteConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(source, _format_errors(e)) from None


def load_config(path: str | Path) -> SiteConfig:
    """Read and validate a site config file; every failure is a :class:`ConfigError`."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(str(p), [f"cannot read the file: {e.strerror or e}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(str(p), [f"not UTF-8 text: {e}"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(p), [f"not valid TOML: {e}"]) from None
    return parse_config(data, str(p))


def config_warnings(config: SiteConfig) -> list[str]:
    """Settings that are valid but risky: each a line for ``config check`` and the daemons' logs."""
    out = []
    if config.preemption.enabled and config.preemption.requeue_without_signal:
        out.append("preemption.requeue_without_signal = true: jobs that declared no checkpoint handler "
                   "but are requeueable may be requeued and restart from the beginning, losing their work")
    return out
