"""``[telemetry]``: GPU samples from the gpu-agents and what happens to jobs on idle GPUs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import MINUTES_PER_YEAR, SECONDS_PER_DAY, Strict, num


class TelemetryConfig(Strict):
    sample_seconds: float = num(
        30.0,
        ge=1,
        le=SECONDS_PER_DAY,
        description="how often the gpu-agents "
        "sample the GPUs (their default --interval); the prioritizer sizes its window "
        "of samples and its gaps in the data from it",
    )
    idle_util_percent: float = num(
        2.0,
        ge=0,
        le=100,
        description="a GPU sample at or below this utilisation, "
        "with no process on the GPU, is idle",
    )
    idle_minutes: float = num(
        60.0,
        gt=0,
        le=MINUTES_PER_YEAR,
        description="a job whose GPUs (all of them) "
        "have been idle this long is warned; idle_action follows after warn_grace_minutes",
    )
    idle_action: Literal["report", "warn", "deprioritize", "cancel"] = Field(
        default="report",
        description="after the grace: report, warn, deprioritize (priority to the bottom; "
        "opted-in jobs are requeued first) or cancel (opted-in jobs only; any other job is deprioritized)",
    )
    warn_grace_minutes: float = num(
        30.0, ge=0, le=MINUTES_PER_YEAR, description="idle time after the warning before acting"
    )
    interactive_idle_minutes: float | None = num(
        None,
        gt=0,
        le=MINUTES_PER_YEAR,
        description="interactive jobs' own idle limit; unset: interactive jobs are never acted on",
    )
    dry_run: bool = Field(default=False, description="decide as configured but only report")
    exposition_dir: str | None = Field(
        default=None,
        description="directory of the gpu-agents' <node>.prom "
        "files the prioritizer reads; unset: no telemetry in the prioritizer",
    )
    agent_user: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$",
        description="the user the gpu-agents write their files as, when not root: "
        "a file there is read only when owned by root, the directory's owner or "
        "this user, and writable by its owner alone",
    )
    warn_via: list[Literal["log", "comment"]] = Field(
        default_factory=lambda: ["log", "comment"],
        description="how an idle job is warned: a prioritizer log line and/or a note appended to the job's comment",
    )

    @field_validator("warn_via")
    @classmethod
    def _warn_via(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one of 'log', 'comment'")
        if len(set(v)) != len(v):
            raise ValueError(f"each way at most once, got {v}")
        return v
