"""``[preemption]``: when and how the prioritizer stops an opted-in job for another."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import SECONDS_PER_30_DAYS, SECONDS_PER_DAY, Strict, num


class PreemptionConfig(Strict):
    enabled: bool = Field(
        True,
        description="the prioritizer preempts: it signals opted-in running jobs to "
        "checkpoint and requeues them to make room for waiting jobs; false: it only orders "
        "the queue",
    )
    signal: Literal["USR2", "USR1", "TERM", "INT", "HUP"] = Field(
        "USR2",
        description="the signal a preempted "
        "job gets when its own --signal names none "
        "(USR1 is refused: NCCL takes it)",
    )
    grace_seconds: float = num(
        120.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="seconds between the signal and "
        "the requeue for a job that declared no lead time of its own (--signal=SIG@N)",
    )
    min_runtime_seconds: float = num(
        600.0,
        ge=0,
        le=SECONDS_PER_30_DAYS,
        description="a running job is not "
        "preempted (nor moved) before it has run this long since its last start",
    )
    max_restarts: int = num(
        5,
        ge=0,
        le=1000,
        description="a job restarted or preempted this many times is "
        "not preempted (nor moved) again",
    )
    hysteresis: float = num(
        0.1, ge=0, le=1, description="a waiting job must beat a victim's score by this margin"
    )
    checkpoint_recent_seconds: float = num(
        900.0,
        ge=0,
        le=SECONDS_PER_30_DAYS,
        description="victims "
        "signalled to checkpoint within this many seconds are taken first "
        "(they lose the least work)",
    )
    restart_delay_seconds: float = num(
        30.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="seconds a preempted job "
        "loses between its requeue and running again: the simulator adds it to "
        "each preemption, fair share's lease does not count it, and a move to a "
        "faster GPU type must save more than it",
    )
    checkpoint_interval_seconds: float = num(
        1800.0,
        gt=0,
        le=SECONDS_PER_30_DAYS,
        description="how often jobs checkpoint on their own; read by "
        "nothing yet (slurm-dl simulate takes it from "
        "--checkpoint-interval)",
    )
    requeue_without_signal: bool = Field(
        default=False,
        description="also requeue, without a signal, running jobs that are requeueable but declared "
        "no checkpoint handler (they restart from the beginning and lose their work)",
    )
    move_min_speedup: float = num(
        1.25,
        ge=0,
        le=1000,
        description="on several GPU types: a running job that opted in moves (checkpoint, "
        "requeue) to a type that frees with nobody waiting for it (under fair share, also one others wait "
        "for, when its account is within its share) when it runs this much faster there; 0: never moves",
    )
    max_lead_seconds: float = num(
        300.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="the most a job's own --signal=SIG@N may make a "
        "preemption wait between its signal and the requeue (jobs without one get grace_seconds)",
    )
    max_checkpoint_wait_seconds: float = num(
        600.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="the most a preemption waits between the signal and the requeue for a "
        "job whose past preemptions took longer to checkpoint than its lead time (learnt per "
        "job); the lead itself is always waited",
    )
    requeue_timeout_seconds: float = num(
        300.0,
        gt=0,
        le=SECONDS_PER_DAY,
        description="after the grace period, how long a requeue may keep failing "
        "(slurmctld unreachable) before the preemption is given up",
    )

    @field_validator("signal")
    @classmethod
    def _not_usr1(cls, v: str) -> str:
        if v == "USR1":
            raise ValueError("USR1 is taken by NCCL; use USR2")
        return v
