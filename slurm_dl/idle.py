"""Pure idle-allocation policy: from per-GPU job samples, decide per job ok / warn / deprioritize / cancel.

A GPU sample is idle when its utilisation is at most ``idle_util_percent`` AND no process holds
the GPU. A job is idle since the latest start of the trailing idle run over all its GPUs (every
GPU, on every node, must be idle); the idle time runs to the oldest of its GPUs' latest samples,
so missing data never lengthens it. After ``idle_minutes`` the job is warned; after a further
``warn_grace_minutes`` the configured ``idle_action`` applies (``report``/``warn`` never go past a
warning). Interactive jobs use ``interactive_idle_minutes`` and are left alone when it is unset.
With ``dry_run`` (or ``idle_action = "report"``) decisions are reported and never enforced.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .config import TelemetryConfig
from .model import Job, JobClass
from .telemetry.samples import JobGpuSample


class Verdict(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    DEPRIORITIZE = "deprioritize"
    CANCEL = "cancel"


@dataclass(frozen=True)
class IdleDecision:
    job_id: int
    verdict: Verdict
    idle_minutes: float
    enforce: bool
    reason: str


def _idle(s: JobGpuSample, threshold: float) -> bool:
    return s.util_percent <= threshold and s.processes == 0


def idle_span(samples: Iterable[JobGpuSample], threshold: float) -> tuple[float | None, float, int]:
    """(idle since, end of evidence, GPUs seen) for one job's samples; idle since is None when busy."""
    per_gpu: dict[tuple[str, int], list[JobGpuSample]] = {}
    for s in samples:
        per_gpu.setdefault((s.node, s.gpu), []).append(s)
    since: float | None = float("-inf")
    end = float("inf")
    for series in per_gpu.values():
        series.sort(key=lambda s: s.time)
        end = min(end, series[-1].time)
        start = None
        for s in reversed(series):
            if not _idle(s, threshold):
                break
            start = s.time
        if start is None:
            since = None
        elif since is not None:
            since = max(since, start)
    if not per_gpu:
        return None, 0.0, 0
    return since, end, len(per_gpu)


def decide(samples: Iterable[JobGpuSample], jobs: Mapping[int, Job], cfg: TelemetryConfig) -> list[IdleDecision]:
    """One decision per job in ``jobs`` that has samples, sorted by job id."""
    by_job: dict[int, list[JobGpuSample]] = {}
    for s in samples:
        if s.job_id in jobs:
            by_job.setdefault(s.job_id, []).append(s)
    enforce = not cfg.dry_run and cfg.idle_action != "report"
    out = []
    for job_id in sorted(by_job):
        out.append(_decide_one(jobs[job_id], by_job[job_id], cfg, enforce))
    return out


def _decide_one(job: Job, samples: list[JobGpuSample], cfg: TelemetryConfig, enforce: bool) -> IdleDecision:
    since, end, seen = idle_span(samples, cfg.idle_util_percent)
    if since is None:
        return IdleDecision(job.job_id, Verdict.OK, 0.0, False, "GPUs in use")
    idle_min = max(0.0, end - since) / 60.0
    if job.num_gpus and seen < job.num_gpus:
        return IdleDecision(job.job_id, Verdict.OK, idle_min, False,
                            f"samples from {seen} of {job.num_gpus} GPUs; not enough evidence")
    limit = cfg.idle_minutes
    if job.job_class is JobClass.INTERACTIVE:
        if cfg.interactive_idle_minutes is None:
            return IdleDecision(job.job_id, Verdict.OK, idle_min, False, "interactive job: no idle limit set")
        limit = cfg.interactive_idle_minutes
    what = f"{seen} GPU(s) at <= {cfg.idle_util_percent:g}% with no process for {idle_min:.0f} min"
    if idle_min < limit:
        return IdleDecision(job.job_id, Verdict.OK, idle_min, False, f"{what} (limit {limit:g} min)")
    if idle_min < limit + cfg.warn_grace_minutes or cfg.idle_action in ("report", "warn"):
        return IdleDecision(job.job_id, Verdict.WARN, idle_min, enforce, f"{what} (limit {limit:g} min)")
    verdict = Verdict(cfg.idle_action)
    return IdleDecision(job.job_id, verdict, idle_min, enforce,
                        f"{what} (limit {limit:g} min + {cfg.warn_grace_minutes:g} min after the warning)")


def merge_window(window: Iterable[JobGpuSample], new: Iterable[JobGpuSample], horizon_start: float) -> list[JobGpuSample]:
    """The sample history kept between cycles: old and new, de-duplicated, none before ``horizon_start``."""
    keep = {(s.job_id, s.node, s.gpu, s.time): s for s in (*window, *new) if s.time >= horizon_start}
    return [keep[k] for k in sorted(keep, key=lambda k: (k[3], k[0], k[1], k[2]))]


def horizon_minutes(cfg: TelemetryConfig) -> float:
    """How much history the idle policy can need: the longest limit, the grace, two sample periods."""
    limit = max(cfg.idle_minutes, cfg.interactive_idle_minutes or 0.0)
    return limit + cfg.warn_grace_minutes + 2 * cfg.sample_seconds / 60.0


def utilisation_entry(util: Any, decision: IdleDecision | None) -> dict:
    """A JSON-able per-job summary (``util``: a telemetry.attribution.JobUtilisation) for the explanations."""
    entry = {"gpus": util.gpus, "mean_util_percent": round(util.mean_util_percent, 1),
             "max_util_percent": round(util.max_util_percent, 1), "mem_used_bytes": util.mem_used_bytes,
             "power_watts": round(util.power_watts, 1), "processes": util.processes}
    if decision is not None:
        entry.update(idle_minutes=round(decision.idle_minutes, 1), idle_verdict=decision.verdict.value,
                     idle_enforced=decision.enforce, idle_reason=decision.reason)
    return entry

