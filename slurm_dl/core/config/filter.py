"""What the filter enforces and how it runs: ``[caps]`` and ``[filter]``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Strict, num


class Caps(Strict):
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


class FilterConfig(Strict):
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
