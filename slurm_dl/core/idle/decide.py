"""Pure idle-allocation policy: from per-GPU job samples, decide per job ok / warn / deprioritize / cancel.

A GPU sample is idle when its utilisation is at most ``idle_util_percent`` AND no process holds
the GPU. A job is idle since the latest start of the trailing idle run over all its GPUs (every
GPU, on every node, must be idle); the idle time runs to the oldest of its GPUs' latest samples,
so missing data never lengthens it. After ``idle_minutes`` the job is warned; after a further
``warn_grace_minutes`` the configured ``idle_action`` applies (``report``/``warn`` never go past a
warning). ``cancel`` applies only to a job that opted in to preemption (it can resume:
:func:`~slurm_dl.core.preemption.resume_kind`); any other job is deprioritized instead (its
priority only: such a job is never signalled, requeued or cancelled by slurm-dl). Interactive jobs use ``interactive_idle_minutes`` and are left alone when it is unset.
With ``dry_run`` (or ``idle_action = "report"``) decisions are reported and never enforced.

The sample window the prioritizer keeps is bounded (:func:`horizon_minutes`) and lost when the
daemon restarts. A job whose whole window is idle may therefore carry an earlier ``idle since``
from its stored utilisation summary (:func:`carried_idle_since`), provided the summary's last
sample is at most :func:`~.freshness.stale_after_seconds` older than the window's first: a
daemon restarted after a kill -9 neither resets the idle clock nor restarts the warning, while a
long gap with no data never counts as idle time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..config import TelemetryConfig
from ..model import Job, JobClass
from ..preemption import RESUME_NEVER, resume_kind
from ..samples import JobGpuSample
from .freshness import stale_after_seconds


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
    idle_since: float | None = None
    opted_in: bool = True
    """Whether the job opted in to preemption: only such a job is ever requeued or cancelled."""


def _idle(s: JobGpuSample, threshold: float) -> bool:
    return s.util_percent <= threshold and s.processes == 0


def _idle_runs(
    samples: Iterable[JobGpuSample], threshold: float
) -> list[tuple[float | None, float, float]]:
    """Per GPU: (start of its trailing idle run or None, its first sample time, its last sample time)."""
    per_gpu: dict[tuple[str, int], list[JobGpuSample]] = {}
    for s in samples:
        per_gpu.setdefault((s.node, s.gpu), []).append(s)
    runs = []
    for series in per_gpu.values():
        series.sort(key=lambda s: s.time)
        start = None
        for s in reversed(series):
            if not _idle(s, threshold):
                break
            start = s.time
        runs.append((start, series[0].time, series[-1].time))
    return runs


def idle_span(samples: Iterable[JobGpuSample], threshold: float) -> tuple[float | None, float, int]:
    """(idle since, end of evidence, GPUs seen) for one job's samples; idle since is None when busy."""
    runs = _idle_runs(samples, threshold)
    if not runs:
        return None, 0.0, 0
    end = min(last for _, _, last in runs)
    if any(start is None for start, _, _ in runs):
        return None, end, len(runs)
    return max(start for start, _, _ in runs), end, len(runs)


def whole_window_idle(samples: Iterable[JobGpuSample], threshold: float) -> bool:
    """True when every GPU's samples are all idle (the idle run may have begun before the window)."""
    runs = _idle_runs(samples, threshold)
    return bool(runs) and all(start is not None and start == first for start, first, _ in runs)


def carried_idle_since(
    summaries: Mapping[int, Any], samples: Iterable[JobGpuSample], cfg: TelemetryConfig
) -> dict[int, float]:
    """Per job: the stored ``idle_since`` that extends the window's idle run back in time.

    ``summaries`` maps job id to an object with ``idle_since`` and ``last_sample_at`` (a
    :class:`~slurm_dl.telemetry.summary.JobUtilisationSummary` as stored before this window's
    samples were folded in). Carried only when the whole window is idle and joins the stored
    evidence without a gap longer than :func:`~.freshness.stale_after_seconds` (samples
    older than that are stale: the data has a gap).
    """
    by_job: dict[int, list[JobGpuSample]] = {}
    for s in samples:
        by_job.setdefault(s.job_id, []).append(s)
    out: dict[int, float] = {}
    for job_id, rows in by_job.items():
        summary = summaries.get(job_id)
        since = getattr(summary, "idle_since", None)
        last = getattr(summary, "last_sample_at", None)
        if since is None or last is None:
            continue
        first = min(s.time for s in rows)
        if first - last <= stale_after_seconds(cfg) and whole_window_idle(
            rows, cfg.idle_util_percent
        ):
            out[job_id] = float(since)
    return out


def decide(
    samples: Iterable[JobGpuSample],
    jobs: Mapping[int, Job],
    cfg: TelemetryConfig,
    *,
    carried: Mapping[int, float] | None = None,
    site: Any = None,
) -> list[IdleDecision]:
    """One decision per job in ``jobs`` that has samples, sorted by job id.

    ``carried`` (job id -> idle since, from :func:`carried_idle_since`) moves the start of a
    job's idle run back when the whole window is idle. ``site`` (a SiteConfig, or None for the
    default classes) tells which jobs opted in to preemption."""
    by_job: dict[int, list[JobGpuSample]] = {}
    for s in samples:
        if s.job_id in jobs:
            by_job.setdefault(s.job_id, []).append(s)
    enforce = not cfg.dry_run and cfg.idle_action != "report"
    out = []
    for job_id in sorted(by_job):
        out.append(
            _decide_one(
                jobs[job_id], by_job[job_id], cfg, enforce, (carried or {}).get(job_id), site
            )
        )
    return out


def _decide_one(
    job: Job,
    samples: list[JobGpuSample],
    cfg: TelemetryConfig,
    enforce: bool,
    carried: float | None = None,
    site: Any = None,
) -> IdleDecision:
    since, end, seen = idle_span(samples, cfg.idle_util_percent)
    if since is None:
        return IdleDecision(job.job_id, Verdict.OK, 0.0, False, "GPUs in use")
    if (
        carried is not None
        and carried < since
        and whole_window_idle(samples, cfg.idle_util_percent)
    ):
        since = carried
    opted_in = resume_kind(job, site)[0] != RESUME_NEVER
    d = _verdict(job, since, end, seen, cfg, enforce)
    verdict, reason = d.verdict, d.reason
    if verdict is Verdict.CANCEL and not opted_in:
        verdict = Verdict.DEPRIORITIZE
        reason += "; not cancelled: the job did not opt in to preemption"
    return IdleDecision(d.job_id, verdict, d.idle_minutes, d.enforce, reason, since, opted_in)


def _verdict(
    job: Job, since: float, end: float, seen: int, cfg: TelemetryConfig, enforce: bool
) -> IdleDecision:
    idle_min = max(0.0, end - since) / 60.0
    if job.num_gpus and seen < job.num_gpus:
        return IdleDecision(
            job.job_id,
            Verdict.OK,
            idle_min,
            False,
            f"samples from {seen} of {job.num_gpus} GPUs; not enough evidence",
        )
    limit = cfg.idle_minutes
    if job.job_class is JobClass.INTERACTIVE:
        if cfg.interactive_idle_minutes is None:
            return IdleDecision(
                job.job_id, Verdict.OK, idle_min, False, "interactive job: no idle limit set"
            )
        limit = cfg.interactive_idle_minutes
    what = f"{seen} GPU(s) at <= {cfg.idle_util_percent:g}% with no process for {idle_min:.0f} min"
    if idle_min < limit:
        return IdleDecision(
            job.job_id, Verdict.OK, idle_min, False, f"{what} (limit {limit:g} min)"
        )
    if idle_min < limit + cfg.warn_grace_minutes or cfg.idle_action in ("report", "warn"):
        return IdleDecision(
            job.job_id, Verdict.WARN, idle_min, enforce, f"{what} (limit {limit:g} min)"
        )
    verdict = Verdict(cfg.idle_action)
    return IdleDecision(
        job.job_id,
        verdict,
        idle_min,
        enforce,
        f"{what} (limit {limit:g} min + {cfg.warn_grace_minutes:g} min after the warning)",
    )


def on_job_nodes(samples: Iterable[JobGpuSample], jobs: Mapping[int, Job]) -> list[JobGpuSample]:
    """The samples of the jobs in ``jobs`` that were taken on one of that job's own nodes
    (``Job.nodes``, as Slurm reports them): a sample naming a node the job does not run on says
    nothing about the job, whoever wrote it."""
    return [s for s in samples if (j := jobs.get(s.job_id)) is not None and s.node in j.nodes]


def merge_window(
    window: Iterable[JobGpuSample], new: Iterable[JobGpuSample], horizon_start: float
) -> list[JobGpuSample]:
    """The sample history kept between cycles: old and new, de-duplicated, none before ``horizon_start``."""
    keep = {
        (s.job_id, s.node, s.gpu, s.time): s for s in (*window, *new) if s.time >= horizon_start
    }
    return [keep[k] for k in sorted(keep, key=lambda k: (k[3], k[0], k[1], k[2]))]


def horizon_minutes(cfg: TelemetryConfig) -> float:
    """How much history the idle policy can need: the longest limit, the grace, two sample periods."""
    limit = max(cfg.idle_minutes, cfg.interactive_idle_minutes or 0.0)
    return limit + cfg.warn_grace_minutes + 2 * cfg.sample_seconds / 60.0


def utilisation_entry(util: Any, decision: IdleDecision | None) -> dict:
    """A JSON-able per-job summary (``util``: a telemetry.attribution.JobUtilisation) for the explanations."""
    entry = {
        "gpus": util.gpus,
        "mean_util_percent": round(util.mean_util_percent, 1),
        "max_util_percent": round(util.max_util_percent, 1),
        "mem_used_bytes": util.mem_used_bytes,
        "power_watts": round(util.power_watts, 1),
        "processes": util.processes,
    }
    share = getattr(util, "share_bytes", None)
    if share is not None:
        entry.update(share_bytes=share, over_share=util.mem_used_bytes > share)
    if decision is not None:
        entry.update(
            idle_minutes=round(decision.idle_minutes, 1),
            idle_verdict=decision.verdict.value,
            idle_enforced=decision.enforce,
            idle_reason=decision.reason,
        )
    return entry
