"""``[prioritizer]``: the daemon's cycle, its SiteFactor range and its endpoints."""

from __future__ import annotations

from pydantic import Field

from .base import SECONDS_PER_DAY, Strict, num


class PrioritizerConfig(Strict):
    interval_seconds: float = num(
        5.0,
        ge=0.1,
        le=SECONDS_PER_DAY,
        description="seconds between the daemon's "
        "cycles (snapshot, ledger, scores, SiteFactor, preemption): two to three "
        "times a steady cycle's length",
    )
    site_factor_levels: int = num(
        64,
        ge=2,
        le=10000,
        description="distinct SiteFactor values the scores are "
        "rounded to: fewer values, fewer scontrol calls",
    )
    site_factor_max: int = num(
        1_000_000,
        ge=1,
        le=2_147_483_645,
        description="the top of the SiteFactor range "
        "the prioritizer sets: above a PriorityWeight* of slurm.conf, its order overrides "
        "that factor (config check --slurm-conf warns)",
    )
    max_pushes_per_cycle: int = num(
        1000,
        ge=0,
        le=1_000_000,
        description="SiteFactor changes pushed per cycle, "
        "top of the queue first; the rest follow in later cycles (0: no limit)",
    )
    backoff_max_seconds: float = num(
        60.0,
        ge=1,
        le=SECONDS_PER_DAY,
        description="when a cycle fails "
        "(slurmctld or the database unreachable), the next ones wait 1, 2, 4 ... "
        "seconds, at most this long",
    )
    slow_slurm_seconds: float = num(
        5.0,
        ge=0,
        le=3600,
        description="a cycle whose Slurm calls take longer "
        "spaces the next cycles out and pushes fewer SiteFactor updates, until "
        "slurmctld answers in time again (0: never)",
    )
    store_failures_max: int = num(
        5,
        ge=1,
        le=1000,
        description="cycles in a row the database may fail "
        "(damaged, locked, unreachable) before the daemon exits non-zero, "
        "so systemd restarts it and the alert on it fires",
    )
    lease_seconds: float = num(
        15.0,
        ge=1,
        le=3600,
        description="the leader lease: one prioritizer acts, others on the same database "
        "stand by and take over once the leader has not renewed it for this long (killed, "
        "stopped, cut off from the database); renewed every third of it",
    )
    user: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$",
        description="the user the prioritizer daemon runs as (its unit's User=): "
        "`slurm-dl filter install` lets it move jobs between GPU-type partitions after "
        "submission, and doctor checks its operator rights; unset: slurm.conf's SlurmUser",
    )
    metrics_port: int | None = num(
        None,
        ge=1,
        le=65535,
        description="Prometheus endpoint port (http://HOST:PORT/metrics); unset: no endpoint",
    )
    metrics_address: str = Field(
        default="0.0.0.0",
        min_length=1,
        max_length=255,
        description="address the metrics endpoint listens on",
    )
    explain_port: int | None = num(
        None,
        ge=1,
        le=65535,
        description="port of the explain endpoint that "
        "answers `slurm-dl explain` for users away from the store, each about "
        "their own jobs (MUNGE-authenticated); unset: no endpoint",
    )
    explain_address: str = Field(
        default="0.0.0.0",
        min_length=1,
        max_length=255,
        description="address the explain endpoint listens on",
    )
    explain_host: str = Field(
        default="localhost",
        min_length=1,
        max_length=255,
        description="host where `slurm-dl explain` reaches the explain endpoint "
        "(the prioritizer's host as login nodes know it)",
    )
    munge_socket: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="munged's socket (unset: MUNGE's default)",
    )
