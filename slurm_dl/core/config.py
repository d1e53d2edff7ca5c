"""Site configuration: one TOML file per site, validated with pydantic.

A bad file fails loudly: :class:`~slurm_dl.core.errors.ConfigError` lists every problem as
``key.path: got VALUE; allowed: …``. Unknown keys are errors too (a typo must not be ignored).

Every reader (``slurm-dl config check``, the filter service, the prioritizer, dlsubmit) goes
through :func:`load_config`, so they accept exactly the same files. Every number has a finite
range stated on its field: ``inf``, ``nan`` (TOML allows both), booleans and strings are refused
where a number is expected, and so are values far outside what a site could mean.
"""

from __future__ import annotations

import csv
import re
import tomllib
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from .errors import ConfigError
from .hostlist import expand_hostlist
from .model import JobClass
from .throughput import parse_matrix_csv
from .database_url import DEFAULT_DATABASE_URL, relative_sqlite_problem


# Upper ends of the ranges, named once.
MINUTES_PER_YEAR = 525_600
SECONDS_PER_DAY = 86_400
SECONDS_PER_30_DAYS = 30 * SECONDS_PER_DAY
MAX_WEIGHT = 1e6
MAX_GPU_S = 1e12  # service and predictions, in (GPU-)seconds: far beyond any real job


def num(default: Any = ..., *, le: float, gt: float | None = None, ge: float | None = None,
        description: str | None = None) -> Any:
    """A number field: finite (the models refuse inf and nan), no booleans or strings, inside
    ``[ge or gt, le]``. Every numeric key of the site config is declared with this."""
    return Field(default, gt=gt, ge=ge, le=le, strict=True, description=description)


def _bounded(kind: type, *, le: float, gt: float | None = None, ge: float | None = None) -> Any:
    """The same rule for the items of a list or the values of a table."""
    return Annotated[kind, Field(gt=gt, ge=ge, le=le, strict=True)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _printable(cls, v: Any) -> Any:
        """Names, paths and URLs end up in Slurm commands, file names and log lines: no control
        characters (a NUL in a path would make every later open() fail)."""
        items = v if isinstance(v, list) else v.keys() if isinstance(v, dict) else [v]
        for s in items:
            if isinstance(s, str) and any(ord(c) < 32 or ord(c) == 127 for c in s):
                raise ValueError("control characters (newline, tab, NUL …) are not allowed")
        return v


class SiteInfo(_Strict):
    name: str = "site"
    database_url: str = Field(DEFAULT_DATABASE_URL, description="SQLAlchemy URL of the prioritizer's store")

    @field_validator("database_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z][A-Za-z0-9+_-]*://", v):  # the rest is checked when the store opens it
            raise ValueError(f"not a database URL; allowed: dialect://..., e.g. {DEFAULT_DATABASE_URL}")
        problem = relative_sqlite_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class GpuType(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    memory_gb: float | None = num(None, gt=0, le=100_000)
    speed: float = num(1.0, gt=0, le=1000, description="relative throughput, 1.0 = reference")


class NodeGroup(_Strict):
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
    max_time_minutes: int | None = num(None, ge=1, le=MINUTES_PER_YEAR)


class Caps(_Strict):
    max_cpus_per_gpu: int = num(16, ge=1, le=1024)
    max_mem_per_gpu_gb: float = num(128, gt=0, le=100_000)
    max_gpus_per_job: int | None = num(None, ge=1, le=1_000_000)
    cpu_only_jobs: Literal["refuse", "cap", "route", "allow"] = Field(
        default="cap", description="jobs without GPUs in a partition with GPU nodes: refused, held to "
        "cpu_only_max_cpus and cpu_only_max_mem_gb (cap), sent to cpu_only_partition (route), or let be (allow)")
    cpu_only_max_cpus: int | None = num(None, ge=1, le=100_000, description="CPUs a job without GPUs may "
                                        "hold under cpu_only_jobs = \"cap\"; unset: max_cpus_per_gpu")
    cpu_only_max_mem_gb: float | None = num(None, gt=0, le=1_000_000, description="memory a job without GPUs "
                                            "may hold under cpu_only_jobs = \"cap\"; unset: max_mem_per_gpu_gb")
    cpu_only_partition: str | None = Field(default=None, min_length=1, max_length=255, description="the "
                                           "partition cpu_only_jobs = \"route\" sends jobs without GPUs to")

    @model_validator(mode="after")
    def _route(self) -> "Caps":
        if self.cpu_only_jobs == "route" and not self.cpu_only_partition:
            raise ValueError('cpu_only_jobs = "route" needs cpu_only_partition (a partition without GPU nodes)')
        return self

    @property
    def cpu_only_cpus(self) -> int:
        return self.cpu_only_max_cpus or self.max_cpus_per_gpu

    @property
    def cpu_only_mem_mb(self) -> int:
        return int((self.cpu_only_max_mem_gb or self.max_mem_per_gpu_gb) * 1024)


class JobClassConfig(_Strict):
    default_time_minutes: int = num(240, ge=1, le=MINUTES_PER_YEAR)
    max_time_minutes: int = num(4320, ge=1, le=MINUTES_PER_YEAR)
    partition: str | None = None
    checkpointable: bool = True
    preemptible: bool = True
    weight: float = num(1.0, gt=0, le=MAX_WEIGHT, description="class weight in the policy mix")
    allow_accounts: list[str] | None = Field(default=None, max_length=10000, description="accounts that may "
                                             "use this class (any allow-list admits; \"*\": everyone)")
    allow_qos: list[str] | None = Field(default=None, max_length=10000, description="QOS that may use this class")
    allow_users: list[str] | None = Field(default=None, max_length=10000, description="users that may use "
                                          "this class")
    max_gpus_per_user: int | None = num(None, ge=1, le=1_000_000, description="GPUs one user may hold "
                                        "in live jobs of this class at once; unset: no quota")

    @property
    def allow_lists(self) -> dict[str, list[str]]:
        """The allow-lists this class carries, by what they name."""
        lists = {"accounts": self.allow_accounts, "QOS": self.allow_qos, "users": self.allow_users}
        return {k: v for k, v in lists.items() if v is not None}

    @property
    def opened(self) -> bool:
        """Has the site opened it at all? A class that ranks above train is closed until an
        allow-list or a per-user GPU quota opens it."""
        return bool(self.allow_lists) or self.max_gpus_per_user is not None

    @property
    def open_to_all(self) -> bool:
        """Open to every user: a quota without an allow-list, or an allow-list with ``*``."""
        lists = self.allow_lists
        return (not lists and self.max_gpus_per_user is not None) or any("*" in v for v in lists.values())

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

    thresholds_gpu_s: list[_bounded(float, gt=0, le=MAX_GPU_S)] = Field(  # type: ignore[valid-type]
                                          default_factory=lambda: [30000.0, 300000.0, 3000000.0],
                                          description="queue thresholds, in the unit of 'service' (the "
                                                      "default is the best run-time setting of a sweep "
                                                      "on a heavily loaded Philly trace)")
    service: Literal["seconds", "gpu-seconds"] = Field(
        default="seconds",
        description="'seconds': run time, so a job split into many smaller ones ranks like the whole "
                    "(fair share charges the GPUs); 'gpu-seconds': Tiresias' 2D-LAS, which favours "
                    "narrow jobs and so rewards splitting")
    starvation_factor: float | None = num(
        None, gt=0, le=MAX_WEIGHT, description="promote a job that waited longer than S × its executed time"
    )

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("at least one threshold is needed")
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"thresholds must be strictly increasing, got {v}")
        return v


MAX_PRIOR_SAMPLES = 10_000_000


HistoryKeys = Literal["full", "no-limit", "user-name", "account-gpus", "account", "global", "none"]


class GittinsConfig(_Strict):
    prior: str = Field(
        default="tiresias", description="'tiresias' (built-in sample) or a CSV file with a 'duration' column "
                                        "of GPU-seconds (a relative path is taken from the config file's folder)"
    )
    prior_weight: float = num(0.1, ge=0, le=MAX_WEIGHT,
                              description="weight of the prior against observed history (1 = the prior "
                                          "counts as its 1,001 jobs; the default 0.1, as 100, so a "
                                          "cluster's own finished jobs soon outweigh it)")
    bins: int = num(32, ge=2, le=4096)
    history_keys: HistoryKeys = Field(
        default="full", description="learn each job's service distribution from finished jobs like it: "
                                    "'full' (user, job name, GPUs, partition, time limit, then coarser), "
                                    "'no-limit' (the same without the time limit), 'user-name', "
                                    "'account-gpus', 'account', 'global'; 'none' = table only")
    min_jobs: int = num(3, ge=1, le=50, description="finished jobs a key needs before it is used")
    hold_factor: float = num(8.0, ge=1, le=MAX_WEIGHT,
                             description="a running job is preempted only for a waiting job whose index is "
                                         "this many times its own (each preemption costs a restart); "
                                         "1 = plain Gittins")
    _prior_samples: tuple[float, ...] | None = PrivateAttr(default=None)

    @property
    def prior_samples(self) -> tuple[float, ...] | None:
        """The durations read from ``prior`` when it names a file (None for 'tiresias')."""
        return self._prior_samples

    @field_validator("prior")
    @classmethod
    def _prior_file(cls, v: str, info: ValidationInfo) -> str:
        if v != "tiresias":  # read here, so a bad file is reported at policy.gittins.prior
            samples = read_prior_csv(_prior_path(v, info))
            if isinstance(info.context, dict):
                info.context.setdefault("prior_samples", {})[v] = samples
        return v

    @model_validator(mode="after")
    def _keep_prior(self, info: ValidationInfo) -> "GittinsConfig":
        if self.prior != "tiresias":
            read = info.context.get("prior_samples", {}) if isinstance(info.context, dict) else {}
            self._prior_samples = read.get(self.prior) or read_prior_csv(_prior_path(self.prior, info))
        return self


def _prior_path(prior: str, info: ValidationInfo) -> Path:
    base = info.context.get("base_dir") if isinstance(info.context, dict) else None
    return Path(base) / prior if base is not None else Path(prior)


def read_prior_csv(path: Path) -> tuple[float, ...]:
    """Sorted GPU-second durations from a CSV with a ``duration`` column; ValueError says why not."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if "duration" not in (reader.fieldnames or []):
                raise ValueError(f"{path}: no 'duration' column; allowed: 'tiresias' or a CSV file with one")
            out: list[float] = []
            for row in reader:
                raw = (row.get("duration") or "").strip()
                if not raw:
                    continue
                try:
                    x = float(raw)
                except ValueError:
                    raise ValueError(f"{path}, line {reader.line_num}: duration {raw[:40]!r} is not a number") from None
                if not (0 <= x <= MAX_GPU_S):
                    raise ValueError(f"{path}, line {reader.line_num}: duration {raw[:40]!r} is outside 0 to {MAX_GPU_S:g}")
                out.append(x)
                if len(out) > MAX_PRIOR_SAMPLES:
                    raise ValueError(f"{path}: more than {MAX_PRIOR_SAMPLES} durations")
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); "
                         "allowed: 'tiresias' or a readable CSV file") from None
    if not out:
        raise ValueError(f"{path}: no durations in the 'duration' column")
    return tuple(sorted(out))


class ThroughputConfig(_Strict):
    """``[throughput]``: what the throughput model (slurm_dl.core.throughput) knows beyond each
    type's ``[[gpu_types]] speed``."""

    matrix: str | None = Field(default=None, min_length=1, max_length=4096, description="CSV "
                               "kind,TYPE1,TYPE2,...: relative throughput of each job kind (model, job "
                               "class, or * for any) on each GPU type (a relative path is taken from the "
                               "config file's folder); unset: the types' speeds alone")
    min_samples: int = num(3, ge=1, le=1000, description="runs per GPU type of one user and job name before "
                           "a speedup learnt from history is used")
    _rows: dict | None = PrivateAttr(default=None)

    @property
    def matrix_rows(self) -> dict[str, dict[str, float]] | None:
        """The matrix read at load ({kind: {type: throughput}}), or None."""
        return self._rows

    @model_validator(mode="after")
    def _read_matrix(self, info: ValidationInfo) -> "ThroughputConfig":
        if self.matrix is not None:  # read at load, so a bad file fails here with its line
            self._rows = read_matrix_csv(_prior_path(self.matrix, info))
        return self


def read_matrix_csv(path: Path) -> dict[str, dict[str, float]]:
    """The throughput matrix CSV at ``path``; ValueError says why not (file, line, cell)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); allowed: a readable "
                         "CSV file kind,TYPE1,TYPE2,...") from None
    return parse_matrix_csv(text, str(path))


class QssfConfig(_Strict):
    default_gpu_s: float = num(3600.0, gt=0, le=MAX_GPU_S, description="prediction when a job has no history")
    history_keys: Literal["full", "no-limit", "user-name", "account-gpus", "account", "global"] = Field(
        default="full", description="which finished jobs predict a job: 'full' (user, job name, GPUs, "
                                    "partition, time limit, then coarser), 'user-name' (Helios), …")
    min_jobs: int = num(3, ge=1, le=50, description="finished jobs a key needs before it is used")
    shrink_jobs: float = num(10.0, ge=0, le=1_000_000, description="a key's mean run time is blended "
                             "with the coarser keys' estimate as if that were this many jobs more "
                             "(0: the most specific key alone)")
    use_time_limit: bool = Field(default=True, description="predict a job that asks a time limit as "
                                 "that limit times the run/limit ratio learnt from finished jobs")
    preemptive: bool = Field(default=True, description="rank running jobs too, by predicted remaining "
                             "GPU-time (a job that may be requeued yields to one predicted to end "
                             "sooner); false: a queue order only")


class FairShareConfig(_Strict):
    half_life_hours: float = num(168.0, ge=0.01, le=87_600)
    shares: dict[str, _bounded(float, gt=0, le=MAX_WEIGHT)] = Field(default_factory=dict)  # type: ignore[valid-type]
    default_share: float = num(1.0, gt=0, le=MAX_WEIGHT)
    lease_seconds: float = num(3600.0, ge=0, le=SECONDS_PER_30_DAYS, description="policy 'fairshare': "
                               "useful run a job keeps its GPUs before it may yield them to an account "
                               "below its fair share (its restart delay not counted)")
    lease_hysteresis: float = num(0.1, ge=0, le=0.9, description="policy 'fairshare': GPUs move only from "
                                  "accounts above fair × (1 + h) to accounts below fair × (1 - h)")


class DeadlineConfig(_Strict):
    boost_slack_minutes: float = num(60.0, gt=0, le=MINUTES_PER_YEAR,
                                     description="boost jobs whose slack falls below this")
    max_deadline_days: float = num(7.0, gt=0, le=366, description="deadline quota: furthest deadline allowed")
    max_deadline_jobs_per_user: int = num(4, ge=0, le=1_000_000)
    admission: bool = Field(default=True, description="admit a deadline only if the cluster can keep it "
                                                      "next to those already admitted; else best effort")
    admission_share: float = num(0.475, gt=0, le=1.0, description="part of the cluster's GPUs that "
                                                                  "admitted deadlines may promise while "
                                                                  "best-effort work wants the rest")
    soft_boost: Literal["utility", "strict-first", "value-rate"] = Field(
        default="utility", description="how a boosted soft-deadline job ranks: by the utility still "
                                       "reachable, below every strict one, or by value per GPU-second")


PolicyName = Literal[
    "fifo", "fifo-firstfit", "fifo-backfill", "las", "gittins", "qssf", "fairshare", "deadline", "combined"
]
ComponentName = Literal["fifo", "las", "gittins", "qssf", "fairshare", "deadline", "class"]


class CombinedConfig(_Strict):
    """Tiers are compared in order; within a tier, component scores are summed with weights."""

    tiers: list[list[ComponentName]] = Field(
        default_factory=lambda: [["deadline"], ["class"], ["las", "fairshare"]]
    )
    weights: dict[ComponentName, _bounded(float, ge=0, le=MAX_WEIGHT)] = Field(  # type: ignore[valid-type]
        default_factory=dict)

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
    grace_seconds: float = num(120.0, ge=0, le=SECONDS_PER_DAY)
    min_runtime_seconds: float = num(600.0, ge=0, le=SECONDS_PER_30_DAYS)
    max_restarts: int = num(5, ge=0, le=1000)
    hysteresis: float = num(0.1, ge=0, le=1, description="a waiting job must beat a victim's score by this margin")
    checkpoint_recent_seconds: float = num(900.0, ge=0, le=SECONDS_PER_30_DAYS)
    restart_delay_seconds: float = num(30.0, ge=0, le=SECONDS_PER_DAY, description="simulator: requeue to restart")
    checkpoint_interval_seconds: float = num(1800.0, gt=0, le=SECONDS_PER_30_DAYS,
                                             description="simulator: work lost bound")
    requeue_without_signal: bool = Field(
        default=False, description="also requeue, without a signal, running jobs that are requeueable but declared "
        "no checkpoint handler (they restart from the beginning and lose their work)")
    move_min_speedup: float = num(
        1.25, ge=0, le=1000, description="on several GPU types: a running job that opted in moves (checkpoint, "
        "requeue) to a type that frees with nobody waiting for it (under fair share, also one others wait "
        "for, when its account is within its share) when it runs this much faster there; 0: never moves")
    max_lead_seconds: float = num(
        300.0, ge=0, le=SECONDS_PER_DAY, description="the most a job's own --signal=SIG@N may make a "
        "preemption wait between its signal and the requeue (jobs without one get grace_seconds)")
    requeue_timeout_seconds: float = num(
        300.0, gt=0, le=SECONDS_PER_DAY, description="after the grace period, how long a requeue may keep failing "
        "(slurmctld unreachable) before the preemption is given up")

    @field_validator("signal")
    @classmethod
    def _not_usr1(cls, v: str) -> str:
        if v == "USR1":
            raise ValueError("USR1 is taken by NCCL; use USR2")
        return v


class FilterConfig(_Strict):
    socket: str = "/run/slurm-dl/filter.sock"
    timeout_ms: int = num(200, ge=1, le=200)
    failure_mode: Literal["accept", "reject"] = "accept"
    max_concurrent: int = num(16, ge=1, le=1024)
    classify: bool = True
    validate_jobs: bool = True
    reshape: bool = True
    defaults: bool = True
    tag: bool = True
    switch_wait_minutes: int = num(10, ge=0, le=10_080)
    unhandled_signal: Literal["warn", "refuse"] = Field(
        default="warn", description="a job that opts in to preemption with the signal going to its batch "
        "shell, whose script traps no such signal (the signal would end it): accepted but never preempted, "
        "with a warning (warn), or refused (refuse)")
    time_limit_guard: Literal["class_max", "any", "off"] = Field(
        default="class_max", description="users raising a time limit after submission: refused past the tagged "
        "class's maximum (class_max), refused always (any), or left to Slurm (off)")
    breaker_failures: int = num(3, ge=1, le=1000, description="failed asks in a row that open the "
                                "shim's circuit breaker")
    breaker_cooldown_seconds: float = num(5.0, gt=0, le=3600, description="how long the open breaker "
                                          "skips the service (jobs follow failure_mode at once), then one probe")
    metrics_port: int | None = num(None, ge=1, le=65535, description="Prometheus endpoint port "
                                   "(http://HOST:PORT/metrics); unset: no endpoint")
    metrics_address: str = Field(default="0.0.0.0", min_length=1, max_length=255,
                                 description="address the metrics endpoint listens on")
    live_refresh_seconds: float = num(10.0, gt=0, le=3600, description="how often the service "
                                      "re-reads the live jobs its quotas count (deadline jobs, high-class GPUs)")


class PrioritizerConfig(_Strict):
    interval_seconds: float = num(5.0, ge=0.1, le=SECONDS_PER_DAY)
    site_factor_levels: int = num(64, ge=2, le=10000)
    site_factor_max: int = num(1_000_000, ge=1, le=2_147_483_645)
    max_pushes_per_cycle: int = num(1000, ge=0, le=1_000_000, description="SiteFactor changes pushed per cycle, "
                                    "top of the queue first; the rest follow in later cycles (0: no limit)")
    backoff_max_seconds: float = num(60.0, ge=1, le=SECONDS_PER_DAY)
    slow_slurm_seconds: float = num(5.0, ge=0, le=3600, description="a cycle whose Slurm calls take longer "
                                    "spaces the next cycles out and pushes fewer SiteFactor updates, until "
                                    "slurmctld answers in time again (0: never)")
    store_failures_max: int = num(5, ge=1, le=1000, description="cycles in a row the database may fail "
                                  "(damaged, locked, unreachable) before the daemon exits non-zero, "
                                  "so systemd restarts it and the alert on it fires")
    metrics_port: int | None = num(None, ge=1, le=65535, description="Prometheus endpoint port "
                                   "(http://HOST:PORT/metrics); unset: no endpoint")
    metrics_address: str = Field(default="0.0.0.0", min_length=1, max_length=255,
                                 description="address the metrics endpoint listens on")
    explain_port: int | None = num(None, ge=1, le=65535, description="port of the explain endpoint that "
                                   "answers `slurm-dl explain` for users away from the store, each about "
                                   "their own jobs (MUNGE-authenticated); unset: no endpoint")
    explain_address: str = Field(default="0.0.0.0", min_length=1, max_length=255,
                                 description="address the explain endpoint listens on")
    explain_host: str = Field(default="localhost", min_length=1, max_length=255,
                              description="host where `slurm-dl explain` reaches the explain endpoint "
                                          "(the prioritizer's host as login nodes know it)")
    munge_socket: str | None = Field(default=None, min_length=1, max_length=4096,
                                     description="munged's socket (unset: MUNGE's default)")


class SimulateConfig(_Strict):
    """Defaults of `slurm-dl simulate --via-slurm` (the replays as one Slurm job array)."""

    partition: str | None = Field(default=None, min_length=1, max_length=255, description="the "
                                  "array's partition (CPU-only tasks); unset: Slurm's default partition")
    time_minutes: int = num(60, ge=1, le=30 * 24 * 60, description="each replay task's time limit")


class TelemetryConfig(_Strict):
    sample_seconds: float = num(30.0, ge=1, le=SECONDS_PER_DAY)
    idle_util_percent: float = num(2.0, ge=0, le=100)
    idle_minutes: float = num(60.0, gt=0, le=MINUTES_PER_YEAR)
    idle_action: Literal["report", "warn", "deprioritize", "cancel"] = Field(
        default="report", description="after the grace: report, warn, deprioritize (priority to the bottom; "
        "opted-in jobs are requeued first) or cancel (opted-in jobs only; any other job is deprioritized)")
    warn_grace_minutes: float = num(30.0, ge=0, le=MINUTES_PER_YEAR,
                                    description="idle time after the warning before acting")
    interactive_idle_minutes: float | None = num(None, gt=0, le=MINUTES_PER_YEAR, description="interactive jobs' "
                                                 "own idle limit; unset: interactive jobs are never acted on")
    dry_run: bool = Field(default=False, description="decide as configured but only report")
    exposition_dir: str | None = Field(default=None, description="directory of the gpu-agents' <node>.prom "
                                       "files the prioritizer reads; unset: no telemetry in the prioritizer")
    agent_user: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$",
                                   description="the user the gpu-agents write their files as, when not root: "
                                   "a file there is read only when owned by root, the directory's owner or "
                                   "this user, and writable by its owner alone")
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


class SharingGroup(_Strict):
    """One node group whose GPUs are offered in parts: Slurm ``shard`` GRES and/or MPS."""

    node_group: str = Field(description="a [[node_groups]] name (a group with GPUs)")
    shards_per_gpu: int | None = num(None, ge=1, le=128, description="shards each GPU offers "
                                     "(GresTypes=gpu,shard; gres.conf Name=shard); unset: no shards")
    mps_percent: float | None = num(None, gt=0, le=100, description="the compute share one job gets "
                                    "on MPS, in percent of a GPU; unset: no MPS")
    shard_memory_gb: float | None = num(None, gt=0, le=100_000, description="GPU memory one shard "
                                        "guarantees (the agent names a job over it)")

    @model_validator(mode="after")
    def _offers_something(self) -> "SharingGroup":
        if self.shards_per_gpu is None and self.mps_percent is None:
            raise ValueError(f"node group {self.node_group!r}: set shards_per_gpu and/or mps_percent")
        return self


class SharingConfig(_Strict):
    """Small jobs share GPUs: which node groups offer parts of GPUs, and which jobs go there."""

    groups: list[SharingGroup] = Field(default_factory=list, max_length=1000)
    classes: list[JobClass] = Field(default_factory=lambda: [JobClass.INFERENCE, JobClass.INTERACTIVE],
                                    max_length=16, description="classes whose 1-GPU jobs are routed to "
                                    "shards (training never is)")

    suggest_after_runs: int = num(3, ge=0, le=100, description="a user's job is told a shard would do "
                                  "when this many of its name's last runs each used a small part of one "
                                  "whole GPU (0: never)")
    suggest_max_fraction: float = num(0.25, gt=0, le=1, description="a small part: at most this fraction "
                                      "of the GPU's compute (mean) and memory (peak)")

    @field_validator("classes")
    @classmethod
    def _no_training(cls, v: list[JobClass]) -> list[JobClass]:
        if JobClass.TRAIN in v:
            raise ValueError("train cannot share GPUs; allowed: "
                             + ", ".join(c.value for c in JobClass if c is not JobClass.TRAIN))
        return v


class SiteConfig(_Strict):
    site: SiteInfo = Field(default_factory=SiteInfo)
    gpu_types: list[GpuType] = Field(min_length=1)
    node_groups: list[NodeGroup] = Field(min_length=1)
    partitions: list[Partition] = Field(default_factory=lambda: [Partition(name="gpu", default=True)], min_length=1)
    topology: TopologyConfig = Field(default_factory=TopologyConfig)
    caps: Caps = Field(default_factory=Caps)
    classes: dict[JobClass, JobClassConfig] = Field(default_factory=_default_classes)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    prioritizer: PrioritizerConfig = Field(default_factory=PrioritizerConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    simulate: SimulateConfig = Field(default_factory=SimulateConfig)
    sharing: SharingConfig = Field(default_factory=SharingConfig)

    @field_validator("throughput")
    @classmethod
    def _throughput_types(cls, v: ThroughputConfig, info: ValidationInfo) -> ThroughputConfig:
        """The matrix names only the site's GPU types."""
        types = {g.name for g in info.data.get("gpu_types") or []}
        if types and v.matrix_rows:
            unknown = sorted({t for r in v.matrix_rows.values() for t in r} - types)
            if unknown:
                raise ValueError(f"{v.matrix}: unknown GPU types {unknown}; allowed: {sorted(types)} "
                                 "(from gpu_types)")
        return v

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
        route = self.caps.cpu_only_partition
        if route is not None and route not in parts:
            problems.append(f"caps.cpu_only_partition: got {route!r}; allowed: {sorted(parts)}")
        elif route is not None and self.caps.cpu_only_jobs == "route" and route in self.gpu_partitions:
            problems.append(f"caps.cpu_only_partition: {route!r} has GPU nodes; name a partition without them")
        if sum(1 for p in self.partitions if p.default) > 1:
            problems.append("partitions: at most one partition may be default = true")
        problems += self._sharing_problems()
        if problems:  # one line each (the error list shows them without the whole file)
            raise ValueError("\n".join(problems))
        return self

    def _sharing_problems(self) -> list[str]:
        """Each [[sharing.groups]] names a node group with GPUs, once; a shard's memory fits
        its share of the GPU's."""
        groups = {g.name: g for g in self.node_groups}  # every node group has GPUs (gpus_per_node >= 1)
        memory = {t.name: t.memory_gb for t in self.gpu_types}
        problems, seen = [], set()
        for i, sg in enumerate(self.sharing.groups):
            key = f"sharing.groups[{i}]"
            g = groups.get(sg.node_group)
            if g is None:
                problems.append(f"{key}.node_group: got {sg.node_group!r}: no node group with GPUs of that "
                                f"name; allowed: {sorted(groups)}")
                continue
            if sg.node_group in seen:
                problems.append(f"{key}.node_group: {sg.node_group!r} is named twice")
            seen.add(sg.node_group)
            mem = memory.get(g.gpu_type)
            if sg.shard_memory_gb is not None and sg.shards_per_gpu and mem is not None \
                    and sg.shard_memory_gb * sg.shards_per_gpu > mem:
                problems.append(f"{key}.shard_memory_gb: {sg.shard_memory_gb:g} GB x {sg.shards_per_gpu} shards "
                                f"is more than a {g.gpu_type}'s {mem:g} GB")
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


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _constraints_at(loc: tuple[Any, ...]) -> tuple[type | None, dict[str, float]]:
    """The number type and the bounds (``ge``/``gt``/``le``) declared for the key at ``loc``."""
    ann: Any = SiteConfig
    bounds: dict[str, float] = {}
    for part in loc:
        bounds = {}
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            info = ann.model_fields.get(str(part))
            if info is None:
                return None, {}
            ann = info.annotation
            bounds = _bounds(info.metadata)
            continue
        ann, bounds = _inner(ann)
        if get_origin(ann) in (list, dict):
            args = get_args(ann)
            ann, bounds = _inner(args[-1])
    ann, extra = _inner(ann)
    bounds = bounds or extra
    return (ann if ann in (int, float) else None), bounds


def _inner(ann: Any) -> tuple[Any, dict[str, float]]:
    """Strip ``Optional`` and ``Annotated``; collect the bounds found on the way."""
    bounds: dict[str, float] = {}
    if get_origin(ann) is Annotated:
        base, *meta = get_args(ann)
        for m in meta:
            bounds.update(_bounds(getattr(m, "metadata", [m])))
        ann = base
    if get_origin(ann) in (Union, UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return _inner(args[0])[0], bounds
    return ann, bounds


def _bounds(metadata: list[Any]) -> dict[str, float]:
    return {k: getattr(m, k) for m in metadata for k in ("ge", "gt", "le") if getattr(m, k, None) is not None}


def _allowed(kind: type | None, bounds: dict[str, float]) -> str:
    """``allowed: a number from 0.01 to 87600`` for a number key, else an empty string."""
    if kind is None or "le" not in bounds:
        return ""
    noun = "a whole number" if kind is int else "a finite number"
    if "gt" in bounds:
        return f"allowed: {noun} above {_show(bounds['gt'], kind)} and at most {_show(bounds['le'], kind)}"
    return f"allowed: {noun} from {_show(bounds.get('ge', 0), kind)} to {_show(bounds['le'], kind)}"


def _show(x: float, kind: type) -> str:
    """Whole numbers as written in TOML; very large float bounds as 1e+12."""
    if kind is int or (float(x).is_integer() and abs(x) < 1e7):
        return str(int(x))
    return f"{x:g}"


def _format_errors(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors(include_url=False):
        raw_loc = tuple(x for x in e["loc"] if x not in ("function-after", "function-before"))
        loc = _format_loc(raw_loc)
        value = e.get("input")
        msg = e["msg"].removeprefix("Value error, ")
        allowed = _allowed(*_constraints_at(raw_loc)) if e["type"] != "value_error" else ""
        if allowed:  # a number of the wrong type or out of range: say the whole range at once
            msg = allowed
        if not raw_loc and e["type"] == "value_error":  # the cross-checks: each names its key
            problems.extend(msg.split("\n"))
        elif e["type"] == "extra_forbidden":
            problems.append(f"{loc}: unknown key (check the spelling; see site-configs/ for the allowed keys)")
        elif e["type"] == "missing":
            problems.append(f"{loc}: required key is missing")
        else:
            shown = repr(value)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            problems.append(f"{loc}: got {shown}; {msg}")
    return problems


def parse_config(data: dict[str, Any], source: str = "<config>", base_dir: str | Path | None = None) -> SiteConfig:
    """Validate parsed TOML; files the config names (a Gittins prior) are read from ``base_dir``."""
    try:
        return SiteConfig.model_validate(data, context={"base_dir": base_dir})
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
    return parse_config(data, str(p), p.parent)


def config_warnings(config: SiteConfig) -> list[str]:
    """Settings that are valid but risky: each a line for ``config check`` and the daemons' logs."""
    out = []
    if config.preemption.enabled and config.preemption.requeue_without_signal:
        out.append("preemption.requeue_without_signal = true: jobs that declared no checkpoint handler "
                   "but are requeueable may be requeued and restart from the beginning, losing their work")
    fs = config.policy.fairshare
    if config.policy.mix == "fairshare" and not config.preemption.enabled:
        out.append("policy.mix = \"fairshare\" with preemption.enabled = false: accounts below their fair "
                   "share get GPUs only as jobs end (the queue order alone)")
    elif config.policy.mix == "fairshare" and fs.lease_seconds < config.preemption.restart_delay_seconds:
        out.append(f"policy.fairshare.lease_seconds = {fs.lease_seconds:g} is shorter than a restart "
                   f"({config.preemption.restart_delay_seconds:g} s): jobs may spend more time restarting than running")
    for name, c in config.classes.items():
        if _ranks_above_train(config, name) and c.open_to_all and c.max_gpus_per_user is None:
            out.append(f"classes.{name.value} is open to every user with no per-user GPU quota: any job "
                       f"may claim its priority{'' if c.preemptible else ' and its protection from preemption'}"
                       " (limit it with allow_accounts, allow_qos, allow_users or max_gpus_per_user)")
    return out


def _ranks_above_train(config: SiteConfig, job_class: JobClass) -> bool:
    c, train = config.class_config(job_class), config.class_config(JobClass.TRAIN)
    return c.weight > train.weight or (not c.preemptible and train.preemptible)
