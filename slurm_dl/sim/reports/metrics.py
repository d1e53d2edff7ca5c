"""Metrics over finished simulated jobs (pure)."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..engine.loop import ClusterResult
from ..engine.power import summary as power_summary
from ..engine.state import SimJob


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values."""
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index: (Σx)² / (n Σx²); 1.0 = all equal."""
    xs = [v for v in values]
    if not xs:
        return 1.0
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if sq else 1.0


def jct(sj: SimJob) -> float:
    return (sj.end_time or 0.0) - sj.submit


def job_rhos(results: Sequence[ClusterResult]) -> list[float]:
    """Each finished job's finish-time fairness as Themis measures it: its JCT here over the
    time it would take alone on 1/N of its cluster, N the mean number of jobs contending
    (waiting or running, itself included) during its stay, i.e. its run time × max(1, its GPUs
    over G/N). Work scaling linearly with GPUs is assumed, as Themis does."""
    out = []
    for r in results:
        done = [sj for sj in r.jobs if sj.end_time is not None and sj.end_time > sj.submit]
        total = r.cluster.total_gpus
        if not done or not total:
            continue
        deltas: dict[float, int] = {}
        for sj in done:
            deltas[sj.submit] = deltas.get(sj.submit, 0) + 1
            deltas[sj.end_time] = deltas.get(sj.end_time, 0) - 1
        area: dict[float, float] = {}  # ∫ N(t) dt from the first event to each event time
        n, acc, last = 0, 0.0, None
        for t in sorted(deltas):
            if last is not None:
                acc += n * (t - last)
            area[t] = acc
            n += deltas[t]
            last = t
        for sj in done:
            stay = sj.end_time - sj.submit
            contending = max(1.0, (area[sj.end_time] - area[sj.submit]) / stay)
            alone = sj.duration * max(1.0, sj.gpus * contending / total)
            if alone > 0:
                out.append(stay / alone)
    return out


def summarize(results: Sequence[ClusterResult]) -> dict:
    """The per-policy JSON object (without ``per_account`` ρ, which needs isolated runs)."""
    jobs = [sj for r in results for sj in r.jobs]
    total_gpus = sum(r.cluster.total_gpus for r in results)
    jcts = sorted(jct(sj) for sj in jobs)
    n = len(jobs)
    first = min((sj.submit for sj in jobs), default=0.0)
    last = max((sj.end_time or 0.0 for sj in jobs), default=0.0)
    makespan = last - first
    gpu_time = sum(sj.gpus * sj.executed0 for sj in jobs)
    deadline_jobs = [sj for sj in jobs if sj.deadline is not None]
    strict = [sj for sj in deadline_jobs if sj.job.tags.get("job_type", "strict") == "strict"]
    soft = [sj for sj in jobs if sj.job.soft_deadlines and sj.job.tags.get("job_type") == "soft"]
    best = [sj for sj in jobs if sj.job.tags.get("job_type") == "best"]
    out = {
        "jobs": n,
        "avg_jct_s": sum(jcts) / n if n else 0.0,
        "median_jct_s": percentile(jcts, 50),
        "p99_jct_s": percentile(jcts, 99),
        "avg_queue_s": sum(sj.queue_s for sj in jobs) / n if n else 0.0,
        "makespan_s": makespan,
        "utilization": gpu_time / (total_gpus * makespan) if total_gpus and makespan > 0 else 0.0,
        "preemptions": sum(sj.preemptions for sj in jobs),
        "preemptions_per_job": sum(sj.preemptions for sj in jobs) / n if n else 0.0,
        "total_gpus": total_gpus,
    }
    rhos = sorted(job_rhos(results))
    out["job_rho_p50"] = percentile(rhos, 50) if rhos else None
    out["job_rho_p99"] = percentile(rhos, 99) if rhos else None
    out["job_rho_max"] = rhos[-1] if rhos else None
    err = start_errors(jobs)
    if err is not None:  # a history: how far the replayed starts are from the recorded ones
        out["start_error_s"] = err
    if any(r.type_busy is not None for r in results):  # several GPU types: of the preemptions,
        out["type_moves"] = sum(r.moves for r in results)  # moves to a faster type
    if strict:
        hits = sum(1 for sj in strict if (sj.end_time or 0.0) <= sj.deadline)
        out["deadline_jobs"] = len(strict)
        out["deadline_hit_rate"] = hits / len(strict)
        out["deadline_miss_rate"] = 1.0 - hits / len(strict)
        if best:
            out["best_effort_avg_jct_s"] = sum(jct(sj) for sj in best) / len(best)
    if soft:
        earned = 0.0
        top = 0.0
        for sj in soft:
            steps = sj.job.soft_deadlines
            top += max(v for _, v in steps)
            earned += next((v for t, v in steps if (sj.end_time or 0.0) <= t), 0.0)
        out["soft_jobs"] = len(soft)
        out["value_earned"] = earned
        out["value_earned_fraction"] = earned / top if top else 0.0
    valued = [sj for sj in jobs if sj.job.soft_deadlines]
    if valued:  # every job with utility steps (Chronus: strict jobs carry one, soft ones several)
        earned = top = 0.0
        for sj in valued:
            steps = sj.job.soft_deadlines
            top += max(v for _, v in steps)
            earned += next((v for t, v in steps if (sj.end_time or 0.0) <= t), 0.0)
        out["utility_earned"] = earned
        out["utility_max"] = top
        out["utility_fraction"] = earned / top if top else 0.0
    powered = [r.power for r in results if r.power is not None]
    if powered:  # --power-save: the nodes' energy, power cycles and boot waits
        out.update(power_summary(powered, n))
    per_type = type_utilisation(results, makespan)
    if per_type:
        out["per_type"] = per_type
    per: dict[str, dict] = {}
    for sj in jobs:
        a = per.setdefault(
            sj.account, {"jobs": 0, "sum_jct": 0.0, "sum_queue": 0.0, "preemptions": 0}
        )
        a["jobs"] += 1
        a["sum_jct"] += jct(sj)
        a["sum_queue"] += sj.queue_s
        a["preemptions"] += sj.preemptions
    out["per_account"] = {
        k: {
            "jobs": v["jobs"],
            "avg_jct_s": v["sum_jct"] / v["jobs"],
            "avg_queue_s": v["sum_queue"] / v["jobs"],
            "preemptions": v["preemptions"],
        }
        for k, v in sorted(per.items())
    }
    return out


def type_utilisation(results: Sequence[ClusterResult], makespan: float) -> dict[str, dict]:
    """Per GPU type (node groups only): its GPUs, GPU-hours run and utilisation over the
    makespan; empty on one type."""
    acc: dict[str, list] = {}
    for r in results:
        for t, (n, busy) in (r.type_busy or {}).items():
            row = acc.setdefault(t, [0, 0.0])
            row[0] += n
            row[1] += busy
    return {
        t: {
            "gpus": n,
            "gpu_hours": busy / 3600.0,
            "utilization": busy / (n * makespan) if n and makespan > 0 else 0.0,
        }
        for t, (n, busy) in acc.items()
    }


def _recorded_start(job) -> float | None:
    s = job.tags.get("recorded_start") if job.tags else None
    return float(s) if s is not None else None


def start_errors(sims: Sequence[SimJob]) -> dict | None:
    """Median and p90 of |replayed start - recorded start| over the jobs of a history (None
    for a trace without recorded starts)."""
    errors = sorted(
        abs(sj.first_start - r)
        for sj in sims
        if sj.first_start is not None and (r := _recorded_start(sj.job)) is not None
    )
    if not errors:
        return None
    return {"jobs": len(errors), "median": percentile(errors, 50), "p90": percentile(errors, 90)}


def recorded_figures(jobs: Sequence) -> dict | None:
    """What the history itself says, to set beside a replay: mean, median and p99 JCT, mean
    wait and makespan of the jobs with a recorded start (None when none has one); a job's end
    is its recorded end (else its first start plus its run time)."""
    rows = [
        (j.submit_time, r, float(j.tags.get("recorded_end") or r + j.duration))
        for j in jobs
        if (r := _recorded_start(j)) is not None
    ]
    if not rows:
        return None
    jcts = sorted(e - s for s, _r, e in rows)
    n = len(rows)
    return {
        "jobs": n,
        "avg_jct_s": sum(jcts) / n,
        "median_jct_s": percentile(jcts, 50),
        "p99_jct_s": percentile(jcts, 99),
        "avg_queue_s": sum(r - s for s, r, _e in rows) / n,
        "makespan_s": max(e for _s, _r, e in rows) - min(s for s, _r, _e in rows),
    }


def add_fairness(summary: dict, isolated_avg_jct: dict[str, float] | None) -> None:
    """ρ per account = mean JCT here / mean JCT in its isolated run; Jain's index and worst ρ.
    ``None``: not computed (no isolated runs): every ρ figure is ``None``, never a number."""
    if isolated_avg_jct is None:
        for row in summary["per_account"].values():
            row["isolated_avg_jct_s"] = None
            row["rho"] = None
        summary["jain_rho"] = None
        summary["max_rho"] = None
        return
    rhos = []
    for acct, row in summary["per_account"].items():
        iso = isolated_avg_jct.get(acct)
        rho = row["avg_jct_s"] / iso if iso else 1.0
        row["isolated_avg_jct_s"] = iso
        row["rho"] = rho
        rhos.append(rho)
    summary["jain_rho"] = jain(rhos)
    summary["max_rho"] = max(rhos) if rhos else 1.0


def queue_series(
    results: Sequence[ClusterResult], points: int = 2000
) -> tuple[list[float], list[int]]:
    """Pending-job count over time (all clusters together), down-sampled to about ``points``.
    The count at a time is the one after everything at that time: a job that starts in the
    second it was submitted never shows as a start before its submission (below zero)."""
    at: dict[float, int] = {}
    for r in results:
        for t, d in r.queue_deltas:
            at[t] = at.get(t, 0) + d
    if not at:
        return [], []
    moments = sorted(at)
    times, counts = [], []
    q = 0
    step = max(1, len(moments) // points)
    for i, t in enumerate(moments):
        q += at[t]
        if i % step == 0 or i == len(moments) - 1:
            times.append(t)
            counts.append(q)
    return times, counts
