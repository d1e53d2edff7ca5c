"""What the filter enforces and how it runs: ``[caps]`` and ``[filter]``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Strict, num


class Caps(Strict):
    max_cpus_per_gpu: int = num(
        16,
        ge=1,
        le=1024,
        description="CPUs a job may hold per GPU, however it asks "
        "(-c, -n, --cpus-per-gpu, --exclusive, ...): the filter refuses more, so CPUs "
        "do not strand a node's GPUs",
    )
    max_mem_per_gpu_gb: float = num(
        128,
        gt=0,
        le=100_000,
        description="memory, in GB, a job may hold per GPU, "
        "however it asks (--mem, --mem-per-cpu, --mem-per-gpu, --exclusive): the "
        "filter refuses more",
    )
    max_gpus_per_job: int | None = num(
        None,
        ge=1,
        le=1_000_000,
        description="GPUs one job may ask at most "
        "(the filter refuses more); unset: as many as the cluster has",
    )
    cpu_only_jobs: Literal["refuse", "cap", "route", "allow"] = Field(
        default="cap",
        description="jobs without GPUs in a partition with GPU nodes: refused, held to "
        "cpu_only_max_cpus and cpu_only_max_mem_gb (cap), sent to cpu_only_partition (route), or let be (allow)",
    )
    cpu_only_max_cpus: int | None = num(
        None,
        ge=1,
        le=100_000,
        description="CPUs a job without GPUs may "
        'hold under cpu_only_jobs = "cap"; unset: max_cpus_per_gpu',
    )
    cpu_only_max_mem_gb: float | None = num(
        None,
        gt=0,
        le=1_000_000,
        description="memory a job without GPUs "
        'may hold under cpu_only_jobs = "cap"; unset: max_mem_per_gpu_gb',
    )
    cpu_only_partition: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description='the partition cpu_only_jobs = "route" sends jobs without GPUs to',
    )

    @model_validator(mode="after")
    def _route(self) -> "Caps":
        if self.cpu_only_jobs == "route" and not self.cpu_only_partition:
            raise ValueError(
                'cpu_only_jobs = "route" needs cpu_only_partition (a partition without GPU nodes)'
            )
        return self

    @property
    def cpu_only_cpus(self) -> int:
        return self.cpu_only_max_cpus or self.max_cpus_per_gpu

    @property
    def cpu_only_mem_mb(self) -> int:
        return int((self.cpu_only_max_mem_gb or self.max_mem_per_gpu_gb) * 1024)


class FilterConfig(Strict):
    socket: str = Field(
        "/run/slurm-dl/filter.sock",
        description="the Unix socket the filter service listens "
        "on and job_submit.lua asks (written into the shim by filter install)",
    )
    timeout_ms: int = num(
        200,
        ge=1,
        le=200,
        description="how long the shim waits for the service's answer "
        "(slurmctld holds its job lock meanwhile), and the service for a free worker; "
        "past it the job follows failure_mode",
    )
    failure_mode: Literal["accept", "reject"] = Field(
        "accept",
        description="what the shim does with a "
        "submission when the service is down or slow: let it in "
        "unfiltered (accept) or refuse it with a message (reject)",
    )
    max_concurrent: int = num(
        16,
        ge=1,
        le=1024,
        description="jobs the service decides at once (its worker "
        "threads); a submission that finds none free within timeout_ms is answered busy",
    )
    classify: bool = Field(
        True,
        description="give each job a class (train, inference, serve, sweep, "
        "interactive) from its hints and shape; false: every job is train",
    )
    validate_jobs: bool = Field(
        True,
        description="refuse jobs the site cannot or will not run (unknown GPU "
        "types, impossible counts, time limits, caps, deadlines, accounts); false: "
        "no job is refused for them",
    )
    reshape: bool = Field(
        True,
        description="turn a GPU count into nodes x GPUs per node that fit the node "
        "groups and ask multi-node jobs to wait for one switch; false: jobs keep their shape",
    )
    defaults: bool = Field(
        True,
        description="give a job without a time limit or partition its class's, and "
        "turn requeue on for jobs that declared a checkpoint handler; false: validation "
        "refuses a job without a time limit",
    )
    tag: bool = Field(
        True,
        description="write the decision (class, GPUs, deadline, checkpoint signal) into "
        "the job's admin_comment for the prioritizer; false: no tag (one a user forged is still "
        "removed), and the prioritizer takes every job as one that went by the filter: a train "
        "job, checkpointable only by its own dl:ckpt comment",
    )
    switch_wait_minutes: int = num(
        10,
        ge=0,
        le=10_080,
        description="how long a multi-node job may wait for "
        "the fewest leaf switches that hold it (--switches=N@TIME) before Slurm "
        "places it anyway",
    )
    unhandled_signal: Literal["warn", "refuse"] = Field(
        default="warn",
        description="a job that opts in to preemption with the signal going to its batch "
        "shell, whose script traps no such signal (the signal would end it): accepted but never preempted, "
        "with a warning (warn), or refused (refuse)",
    )
    time_limit_guard: Literal["class_max", "any", "off"] = Field(
        default="class_max",
        description="users raising a time limit after submission: refused past the tagged "
        "class's maximum (class_max), refused always (any), or left to Slurm (off)",
    )
    breaker_failures: int = num(
        3, ge=1, le=1000, description="failed asks in a row that open the shim's circuit breaker"
    )
    breaker_cooldown_seconds: float = num(
        5.0,
        gt=0,
        le=3600,
        description="how long the open breaker "
        "skips the service (jobs follow failure_mode at once), then one probe",
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
    live_refresh_seconds: float = num(
        10.0,
        gt=0,
        le=3600,
        description="how often the service "
        "re-reads the live jobs its quotas count (deadline jobs, high-class GPUs)",
    )
