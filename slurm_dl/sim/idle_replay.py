"""What the idle-allocation policy would have done to a trace, and what that does to the others (pure).

Per job with a utilisation profile (:mod:`slurm_dl.sim.workloads.utilisation`), the daemon's own decision
code (:func:`slurm_dl.core.idle.decide`) is asked about the samples a gpu-agent would have published:
one per GPU every ``sample_seconds`` of run time from the job's start. Within each idle stretch
of the profile the verdict only grows with the idle time, so a binary search over the sample
times finds when the policy would first flag the job (its warning) and when it would act. No
limit, grace or job-class rule is repeated here: the verdicts are ``decide``'s.

An enforced ``cancel`` ends the job at that run time: the what-if trace is the same trace with
that job's duration cut there (no engine change), replayed beside the original under the same
policy. ``deprioritize`` is counted but reclaims nothing here: the daemon holds such a job at the
bottom and preempts it first, which this trace transform cannot express (it would need the engine
to rank the job last from that time on). ``report``, ``warn`` and ``dry_run`` flag jobs and
reclaim nothing.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..core.config import TelemetryConfig
from ..core.idle.decide import IdleDecision, Verdict, decide
from ..core.model import Job
from ..telemetry.samples import JobGpuSample
from .engine.loop import ClusterResult
from .reports.metrics import jct
from .ranking.ranker import Ranker
from .simulate import SimSetup, clusters_for, simulate
from .workloads.utilisation import Profile, idle_segments

_RANK = {Verdict.OK: 0, Verdict.WARN: 1, Verdict.DEPRIORITIZE: 2, Verdict.CANCEL: 2}


@dataclass(frozen=True)
class IdleOutcome:
    """One job under the idle policy. Times are seconds of the job's run time."""

    idle_gpu_s: float  # GPU-seconds at or below the idle threshold in the trace
    verdict: Verdict = Verdict.OK  # the strongest verdict the job reaches
    enforce: bool = False  # whether the daemon would enforce it (not report/dry-run)
    flagged_at: float | None = None  # first warning
    acted_at: float | None = None  # first deprioritize/cancel verdict
    reclaimed_gpu_s: float = 0.0  # GPU-seconds an enforced cancel frees

    @property
    def cancelled(self) -> bool:
        return self.verdict is Verdict.CANCEL and self.enforce


def _decision(job: Job, since: float, t: float, cfg: TelemetryConfig) -> IdleDecision:
    """``decide`` on every GPU of the job idle from run time ``since`` through the sample at ``t``."""
    samples = [
        JobGpuSample(job.job_id, "sim", g, 0.0, 0, None, 0, at)
        for g in range(max(1, job.num_gpus))
        for at in ((since, t) if t > since else (since,))
    ]
    return decide(samples, {job.job_id: job}, cfg)[0]


def _first(lo: int, hi: int, holds: Callable[[int], bool]) -> int | None:
    """Smallest k in [lo, hi] where the monotone ``holds`` is true; None when it never is."""
    if lo > hi or not holds(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def judge(job: Job, profile: Profile, cfg: TelemetryConfig) -> IdleOutcome:
    """The idle policy's verdicts on one job whose GPUs follow ``profile`` over its run."""
    duration = float(job.duration or 0.0)
    gpus = max(1, job.num_gpus)
    step = cfg.sample_seconds
    segments = idle_segments(profile, duration, cfg.idle_util_percent)
    out = IdleOutcome(idle_gpu_s=sum((e - s for s, e in segments), 0.0) * gpus)
    for start, end in segments:
        k0 = math.ceil(start / step)  # first sample at or after the GPUs went idle
        k1 = math.ceil(end / step) - 1  # last sample before the stretch (or the job) ends
        if k0 > k1:
            continue
        since = k0 * step
        last = _decision(job, since, k1 * step, cfg)
        if last.verdict is Verdict.OK:
            continue
        cache: dict[int, IdleDecision] = {k1: last}

        def at(k: int) -> IdleDecision:
            if k not in cache:
                cache[k] = _decision(job, since, k * step, cfg)
            return cache[k]

        warn_k = _first(k0, k1, lambda k: _RANK[at(k).verdict] >= 1)
        if out.flagged_at is None:
            out = dataclasses.replace(out, flagged_at=warn_k * step)
        if _RANK[last.verdict] > _RANK[out.verdict]:
            out = dataclasses.replace(out, verdict=last.verdict)
        out = dataclasses.replace(
            out, enforce=last.enforce
        )  # the same for every decision under one cfg
        if _RANK[last.verdict] < 2:
            continue
        act_k = _first(warn_k, k1, lambda k: _RANK[at(k).verdict] >= 2)
        if out.acted_at is None:
            out = dataclasses.replace(out, acted_at=act_k * step)
        if last.verdict is Verdict.CANCEL and last.enforce:
            return dataclasses.replace(out, reclaimed_gpu_s=(duration - act_k * step) * gpus)
    return out


def judge_all(
    jobs: Sequence[Job], profiles: Sequence[Profile | None], cfg: TelemetryConfig
) -> list[IdleOutcome | None]:
    return [judge(j, p, cfg) if p is not None else None for j, p in zip(jobs, profiles)]


def apply_outcomes(jobs: Sequence[Job], outcomes: Sequence[IdleOutcome | None]) -> list[Job]:
    """The what-if trace: every job the policy cancels ends at that run time; the rest unchanged."""
    return [
        dataclasses.replace(j, duration=o.acted_at) if o is not None and o.cancelled else j
        for j, o in zip(jobs, outcomes)
    ]


def counts(outcomes: Sequence[IdleOutcome | None]) -> dict:
    """Trace-level figures of the outcomes (independent of the scheduling policy)."""
    seen = [o for o in outcomes if o is not None]
    flagged = [o for o in seen if o.verdict is not Verdict.OK]
    idle = sum(o.idle_gpu_s for o in seen)
    reclaimed = sum(o.reclaimed_gpu_s for o in seen)
    return {
        "jobs_with_utilisation": len(seen),
        "idle_gpu_hours": idle / 3600.0,
        "jobs_flagged": len(flagged),
        "jobs_warned": sum(1 for o in flagged if o.enforce),
        "jobs_deprioritized": sum(
            1 for o in flagged if o.verdict is Verdict.DEPRIORITIZE and o.enforce
        ),
        "jobs_cancelled": sum(1 for o in flagged if o.cancelled),
        "jobs_report_only": sum(1 for o in flagged if not o.enforce),
        "reclaimed_gpu_hours": reclaimed / 3600.0,
        "reclaimed_share_of_idle": reclaimed / idle if idle else 0.0,
    }


OUTCOME_COLUMNS = (
    "job_id",
    "account",
    "num_gpus",
    "duration_s",
    "verdict",
    "enforced",
    "warned_at_s",
    "acted_at_s",
    "idle_gpu_h",
    "reclaimed_gpu_h",
)


def outcome_rows(jobs: Sequence[Job], outcomes: Sequence[IdleOutcome | None]) -> list[tuple]:
    """One row per job with utilisation (``OUTCOME_COLUMNS``; times in seconds of the job's run time)."""
    return [
        (
            j.job_id,
            j.account,
            j.num_gpus,
            float(j.duration or 0.0),
            o.verdict.value,
            int(o.enforce),
            "" if o.flagged_at is None else o.flagged_at,
            "" if o.acted_at is None else o.acted_at,
            round(o.idle_gpu_s / 3600.0, 4),
            round(o.reclaimed_gpu_s / 3600.0, 4),
        )
        for j, o in zip(jobs, outcomes)
        if o is not None
    ]


def _per_job(
    jobs: Sequence[Job],
    results: Sequence[ClusterResult],
    clusters: Sequence[tuple[object, list[Job]]],
) -> dict[int, tuple[float, float]]:
    """Trace position → (JCT, queueing delay) of one replay."""
    pos = {id(j): i for i, j in enumerate(jobs)}
    out = {}
    for r, (_, js) in zip(results, clusters):
        for sj in r.jobs:
            out[pos[id(js[sj.seq])]] = (jct(sj), sj.queue_s)
    return out


def _change(before: float, after: float) -> float | None:
    return (after - before) / before if before else None


def others_change(
    jobs: Sequence[Job],
    whatif: Sequence[Job],
    outcomes: Sequence[IdleOutcome | None],
    base: tuple[Sequence[ClusterResult], Sequence],
    replay: tuple[Sequence[ClusterResult], Sequence],
) -> dict:
    """JCT and queueing of the jobs the policy does NOT cancel, in the original vs the what-if replay.

    ``base``/``replay``: (cluster results, the ``clusters_for`` list they were run on)."""
    a = _per_job(jobs, *base)
    b = _per_job(whatif, *replay)
    keep = [
        i
        for i, o in enumerate(outcomes)
        if not (o is not None and o.cancelled) and i in a and i in b
    ]
    n = len(keep)
    if not n:
        return {"jobs": 0}
    jct0 = sum(a[i][0] for i in keep) / n
    jct1 = sum(b[i][0] for i in keep) / n
    q0 = sum(a[i][1] for i in keep) / n
    q1 = sum(b[i][1] for i in keep) / n
    return {
        "jobs": n,
        "avg_jct_s_before": jct0,
        "avg_jct_s_after": jct1,
        "avg_jct_change": _change(jct0, jct1),
        "avg_queue_s_before": q0,
        "avg_queue_s_after": q1,
        "avg_queue_change": _change(q0, q1),
    }


def policy_block(cfg: TelemetryConfig) -> dict:
    return {
        "idle_util_percent": cfg.idle_util_percent,
        "idle_minutes": cfg.idle_minutes,
        "warn_grace_minutes": cfg.warn_grace_minutes,
        "idle_action": cfg.idle_action,
        "interactive_idle_minutes": cfg.interactive_idle_minutes,
        "dry_run": cfg.dry_run,
        "sample_seconds": cfg.sample_seconds,
    }


def what_if(
    jobs: Sequence[Job],
    outcomes: Sequence[IdleOutcome | None],
    cfg: TelemetryConfig,
    make_ranker: Callable[[], Ranker],
    setup: SimSetup,
    base_results: Sequence[ClusterResult],
) -> dict:
    """The ``idle`` block of one policy: trace figures, and the what-if replay against ``base_results``
    (the same policy on the unchanged trace). The replay is skipped when nothing is cancelled."""
    block = {"policy": policy_block(cfg), **counts(outcomes)}
    whatif = apply_outcomes(jobs, outcomes)
    base = (base_results, clusters_for(jobs, setup))
    if block["jobs_cancelled"]:
        summary, results = simulate(whatif, make_ranker, dataclasses.replace(setup, fairness=False))
        replay = (results, clusters_for(whatif, setup))
    else:
        summary, replay = None, base
    block["other_jobs"] = others_change(jobs, whatif, outcomes, base, replay)
    if summary is not None:
        block["with_idle_policy"] = {
            k: summary[k] for k in ("avg_jct_s", "avg_queue_s", "makespan_s", "utilization")
        }
    return block
