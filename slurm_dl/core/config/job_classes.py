"""``[classes.NAME]``: each job class's time limits, partition, preemption and who may use it."""

from __future__ import annotations

from pydantic import Field, model_validator

from .base import MAX_WEIGHT, MINUTES_PER_YEAR, Strict, num


class JobClassConfig(Strict):
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


def default_classes() -> dict[str, JobClassConfig]:
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
