"""``[classes.NAME]``: each job class's time limits, partition, preemption and who may use it."""

from __future__ import annotations

from pydantic import Field, model_validator

from ..model import JobClass
from .base import MAX_WEIGHT, MINUTES_PER_YEAR, Strict, num


class JobClassConfig(Strict):
    default_time_minutes: int = num(
        240,
        ge=1,
        le=MINUTES_PER_YEAR,
        description="the time limit a job of the "
        "class gets when it asks none (at most max_time_minutes)",
    )
    max_time_minutes: int = num(
        4320,
        ge=1,
        le=MINUTES_PER_YEAR,
        description="the longest time limit a job "
        "of the class may ask: the filter refuses longer ones (checkpoint to run longer)",
    )
    partition: str | None = Field(
        None,
        description="a [[partitions]] name: jobs of the class that name no "
        "partition go there; unset: Slurm's default partition",
    )
    checkpointable: bool = Field(
        True,
        description="jobs of the class may declare a checkpoint handler "
        "(dl:ckpt) and so opt in to preemption; false: dl:ckpt is ignored",
    )
    preemptible: bool = Field(
        True,
        description="running jobs of the class may be preempted for others; "
        "false: never (the class then ranks above train and is closed until opened)",
    )
    weight: float = num(
        1.0,
        gt=0,
        le=MAX_WEIGHT,
        description="class weight in the policy mix (the class "
        "component of policy.combined): a class above train's weight is closed until "
        "opened",
    )
    allow_accounts: list[str] | None = Field(
        default=None,
        max_length=10000,
        description='accounts that may use this class (any allow-list admits; "*": everyone)',
    )
    allow_qos: list[str] | None = Field(
        default=None, max_length=10000, description="QOS that may use this class"
    )
    allow_users: list[str] | None = Field(
        default=None, max_length=10000, description="users that may use this class"
    )
    max_gpus_per_user: int | None = num(
        None,
        ge=1,
        le=1_000_000,
        description="GPUs one user may hold in live jobs of this class at once; unset: no quota",
    )

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
        return (not lists and self.max_gpus_per_user is not None) or any(
            "*" in v for v in lists.values()
        )

    @model_validator(mode="after")
    def _limits(self) -> "JobClassConfig":
        if self.default_time_minutes > self.max_time_minutes:
            raise ValueError(
                f"default_time_minutes ({self.default_time_minutes}) exceeds max_time_minutes "
                f"({self.max_time_minutes})"
            )
        return self


def default_classes() -> dict[JobClass, JobClassConfig]:
    return {
        JobClass(name): entry
        for name, entry in {
            "train": JobClassConfig(default_time_minutes=720, max_time_minutes=4320, weight=1.0),
            "inference": JobClassConfig(
                default_time_minutes=240, max_time_minutes=1440, weight=1.0
            ),
            "serve": JobClassConfig(
                default_time_minutes=1440,
                max_time_minutes=10080,
                checkpointable=False,
                preemptible=False,
                weight=4.0,
            ),
            "sweep": JobClassConfig(default_time_minutes=240, max_time_minutes=1440, weight=1.0),
            "interactive": JobClassConfig(
                default_time_minutes=60,
                max_time_minutes=480,
                checkpointable=False,
                preemptible=False,
                weight=3.0,
            ),
        }.items()
    }
