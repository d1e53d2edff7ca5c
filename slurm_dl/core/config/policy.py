"""``[policy]`` and its components: LAS, Gittins, QSSF, fair share, deadlines and the combined mix."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from .base import MAX_GPU_S, MAX_WEIGHT, MINUTES_PER_YEAR, SECONDS_PER_30_DAYS, Strict, bounded, num
from .side_files import read_prior_csv, side_file_path


class LasConfig(Strict):
    """LAS: queue k holds jobs whose attained service is below thresholds[k]."""

    thresholds_gpu_s: list[bounded(float, gt=0, le=MAX_GPU_S)] = Field(  # type: ignore[valid-type]
        default_factory=lambda: [30000.0, 300000.0, 3000000.0],
        description="queue thresholds, in the unit of 'service' (the "
        "default is the best run-time setting of a sweep "
        "on a heavily loaded Philly trace)",
    )
    service: Literal["seconds", "gpu-seconds"] = Field(
        default="seconds",
        description="'seconds': run time, so a job split into many smaller ones ranks like the whole "
        "(fair share charges the GPUs); 'gpu-seconds': Tiresias' 2D-LAS, which favours "
        "narrow jobs and so rewards splitting",
    )
    starvation_factor: float | None = num(
        None,
        gt=0,
        le=MAX_WEIGHT,
        description="promote a job that waited longer than S × its executed time",
    )

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("at least one threshold is needed")
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"thresholds must be strictly increasing, got {v}")
        return v


HistoryKeys = Literal["full", "no-limit", "user-name", "account-gpus", "account", "global", "none"]


class GittinsConfig(Strict):
    prior: str = Field(
        default="tiresias",
        description="'tiresias' (built-in sample) or a CSV file with a 'duration' column "
        "of GPU-seconds (a relative path is taken from the config file's folder)",
    )
    prior_weight: float = num(
        0.1,
        ge=0,
        le=MAX_WEIGHT,
        description="weight of the prior against observed history (1 = the prior "
        "counts as its 1,001 jobs; the default 0.1, as 100, so a "
        "cluster's own finished jobs soon outweigh it)",
    )
    bins: int = num(
        32,
        ge=2,
        le=4096,
        description="service-time bins (quantiles of the prior and the "
        "history) the Gittins index is computed over: more bins, finer ranks",
    )
    history_keys: HistoryKeys = Field(
        default="full",
        description="learn each job's service distribution from finished jobs like it: "
        "'full' (user, job name, GPUs, partition, time limit, then coarser), "
        "'no-limit' (the same without the time limit), 'user-name', "
        "'account-gpus', 'account', 'global'; 'none' = table only",
    )
    min_jobs: int = num(3, ge=1, le=50, description="finished jobs a key needs before it is used")
    hold_factor: float = num(
        8.0,
        ge=1,
        le=MAX_WEIGHT,
        description="a running job is preempted only for a waiting job whose index is "
        "this many times its own (each preemption costs a restart); "
        "1 = plain Gittins",
    )
    _prior_samples: tuple[float, ...] | None = PrivateAttr(default=None)

    @property
    def prior_samples(self) -> tuple[float, ...] | None:
        """The durations read from ``prior`` when it names a file (None for 'tiresias')."""
        return self._prior_samples

    @field_validator("prior")
    @classmethod
    def _prior_file(cls, v: str, info: ValidationInfo) -> str:
        if v != "tiresias":  # read here, so a bad file is reported at policy.gittins.prior
            samples = read_prior_csv(side_file_path(v, info))
            if isinstance(info.context, dict):
                info.context.setdefault("prior_samples", {})[v] = samples
        return v

    @model_validator(mode="after")
    def _keep_prior(self, info: ValidationInfo) -> "GittinsConfig":
        if self.prior != "tiresias":
            read = info.context.get("prior_samples", {}) if isinstance(info.context, dict) else {}
            self._prior_samples = read.get(self.prior) or read_prior_csv(
                side_file_path(self.prior, info)
            )
        return self


class QssfConfig(Strict):
    default_gpu_s: float = num(
        3600.0, gt=0, le=MAX_GPU_S, description="prediction when a job has no history"
    )
    history_keys: Literal["full", "no-limit", "user-name", "account-gpus", "account", "global"] = (
        Field(
            default="full",
            description="which finished jobs predict a job: 'full' (user, job name, GPUs, "
            "partition, time limit, then coarser), 'no-limit' (the same without the "
            "time limit), 'user-name' (Helios), 'account-gpus', 'account', 'global'",
        )
    )
    min_jobs: int = num(3, ge=1, le=50, description="finished jobs a key needs before it is used")
    shrink_jobs: float = num(
        10.0,
        ge=0,
        le=1_000_000,
        description="a key's mean run time is blended "
        "with the coarser keys' estimate as if that were this many jobs more "
        "(0: the most specific key alone)",
    )
    use_time_limit: bool = Field(
        default=True,
        description="predict a job that asks a time limit as "
        "that limit times the run/limit ratio learnt from finished jobs",
    )
    preemptive: bool = Field(
        default=True,
        description="rank running jobs too, by predicted remaining "
        "GPU-time (a job that may be requeued yields to one predicted to end "
        "sooner); false: a queue order only",
    )


class FairShareConfig(Strict):
    half_life_hours: float = num(
        168.0,
        ge=0.01,
        le=87_600,
        description="half-life of an account's recorded GPU usage: usage this old counts half",
    )
    shares: dict[str, bounded(float, gt=0, le=MAX_WEIGHT)] = Field(  # type: ignore[valid-type]
        default_factory=dict,
        description="each account's share of the cluster, relative to the others "
        "(ACCOUNT = share); an account below its share of the decayed usage ranks first",
    )
    default_share: float = num(
        1.0, gt=0, le=MAX_WEIGHT, description="the share of an account that shares does not name"
    )
    lease_seconds: float = num(
        3600.0,
        ge=0,
        le=SECONDS_PER_30_DAYS,
        description="policy 'fairshare': "
        "useful run a job keeps its GPUs before it may yield them to an account "
        "below its fair share (its restart delay not counted)",
    )
    lease_hysteresis: float = num(
        0.1,
        ge=0,
        le=0.9,
        description="policy 'fairshare': GPUs move only from "
        "accounts above fair × (1 + h) to accounts below fair × (1 - h)",
    )
    lease_victims_by_type: bool = Field(
        False,
        description="policy 'fairshare', several GPU types: a job that GPUs are "
        "taken back for gets them on the type it runs fastest on where victims "
        "allow (else the fewest GPUs preempted, as on one type)",
    )


class DeadlineConfig(Strict):
    boost_slack_minutes: float = num(
        60.0, gt=0, le=MINUTES_PER_YEAR, description="boost jobs whose slack falls below this"
    )
    max_deadline_days: float = num(
        7.0, gt=0, le=366, description="deadline quota: furthest deadline allowed"
    )
    max_deadline_jobs_per_user: int = num(
        4,
        ge=0,
        le=1_000_000,
        description="deadline jobs one user may have "
        "at once, waiting, held or running (each array task counts); the "
        "filter refuses one more; 0: no deadlines",
    )
    admission: bool = Field(
        default=True,
        description="admit a deadline only if the cluster can keep it "
        "next to those already admitted; else best effort",
    )
    admission_share: float = num(
        0.9,
        gt=0,
        le=1.0,
        description="part of the cluster's GPUs that "
        "admitted deadlines may promise while "
        "best-effort work wants the rest",
    )
    soft_boost: Literal["utility", "strict-first", "value-rate"] = Field(
        default="utility",
        description="how a boosted soft-deadline job ranks: by the utility still "
        "reachable, below every strict one, or by value per GPU-second",
    )


PolicyName = Literal[
    "fifo",
    "fifo-firstfit",
    "fifo-backfill",
    "las",
    "gittins",
    "qssf",
    "fairshare",
    "deadline",
    "combined",
]
ComponentName = Literal["fifo", "las", "gittins", "qssf", "fairshare", "deadline", "class"]


class CombinedConfig(Strict):
    """Tiers are compared in order; within a tier, component scores are summed with weights."""

    tiers: list[list[ComponentName]] = Field(
        default_factory=lambda: [["deadline"], ["class"], ["las", "fairshare"]],
        description="the mix's components (fifo, las, gittins, qssf, fairshare, deadline, class) in tiers: "
        "jobs are ordered by the first tier, ties by the next; each component in one tier only",
    )
    weights: dict[ComponentName, bounded(float, ge=0, le=MAX_WEIGHT)] = Field(  # type: ignore[valid-type]
        default_factory=dict,
        description="COMPONENT = weight: within a tier, the scores are summed with "
        "these weights; a component not named weighs 1",
    )

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


class PolicyConfig(Strict):
    mix: PolicyName = Field(
        "combined",
        description="the policy that orders the queue: fifo (plus "
        "fifo-firstfit, fifo-backfill), las, gittins, qssf, fairshare (with leases that "
        "preempt), deadline, or combined (the tiers of [policy.combined])",
    )
    las: LasConfig = Field(
        default_factory=LasConfig,
        description="least attained service (Tiresias): jobs that have had the least service first",
    )
    gittins: GittinsConfig = Field(
        default_factory=GittinsConfig,
        description="Gittins index: the job most likely to finish soon, learnt from finished jobs",
    )
    qssf: QssfConfig = Field(
        default_factory=QssfConfig,
        description="quasi-shortest-service-first "
        "(Helios): the job predicted to need the least GPU-time first",
    )
    fairshare: FairShareConfig = Field(
        default_factory=FairShareConfig,
        description="fair share between accounts, by their decayed GPU usage against their shares",
    )
    deadline: DeadlineConfig = Field(
        default_factory=DeadlineConfig,
        description="jobs with a deadline "
        "(dl:deadline): quotas, admission and the boost near the deadline",
    )
    combined: CombinedConfig = Field(
        default_factory=CombinedConfig,
        description="the combined mix: tiers of components with weights",
    )
