"""Why a job has its priority: the factors, its LAS queue, attained service, slack, account usage.

Pure: :func:`explain_job` turns a job, the policy context and the cycle's numbers into a plain
dict (the daemon stores one per job each cycle); :func:`slurm_dl.explain_view.render_explanation`
turns that dict and the job's recorded decisions into text for ``slurm-dl explain JOBID``.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any, Iterable, Mapping

from .idle.freshness import age_words
from .model import Job, JobState
from .policy.base import PolicyContext, PriorityPolicy
from .policy.deadline import DEMOTED_TAG, SOFT_FROM_TAG, slack
from .preemption import resume_kind


def _components(policy: PriorityPolicy) -> dict[str, PriorityPolicy]:
    comps = getattr(policy, "components", None)
    return dict(comps) if isinstance(comps, dict) else {policy.name: policy}


def _safe_score(p: PriorityPolicy, job: Job, ctx: PolicyContext) -> float | None:
    try:
        s = p.score(job, ctx)
    except NotImplementedError:
        return None
    return round(float(s), 6) if math.isfinite(s) else None


def order_key(policy: PriorityPolicy, job: Job, ctx: PolicyContext) -> list[list[Any]]:
    """The policy's sort key for the job as ``[label, value]`` pairs (smaller runs first), so a
    reader can see which step of the order separates two jobs. Labels: ``tier:a+b`` (the
    negated weighted sum of a tier), ``tiebreak:c`` (a component's own tiebreak inside its
    tier), ``submit`` and ``job_id``; other policies' leading fields are ``key:N``."""
    try:
        key = list(policy.key(job, ctx))
    except Exception:  # noqa: BLE001 - an explanation must not fail the cycle
        return []
    labels: list[str] = []
    tiers = getattr(policy, "tiers", None)
    tiebreaks = getattr(policy, "_tier_tiebreaks", None)
    if tiers is not None and tiebreaks is not None:
        for names, tbs in zip(tiers, tiebreaks):
            labels.append("tier:" + "+".join(names))
            for tb in tbs:
                owner = getattr(getattr(tb, "__self__", None), "name", "component")
                labels.extend(f"tiebreak:{owner}" for _ in tb(job, ctx))
    labels = labels[: max(0, len(key) - 2)]
    labels += [f"key:{i}" for i in range(len(labels), len(key) - 2)] + ["submit", "job_id"]
    return [[lab, _plain(v)] for lab, v in zip(labels, key)]


def _plain(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else None
    return v if isinstance(v, (int, str)) or v is None else str(v)


def explain_job(
    job: Job,
    ctx: PolicyContext,
    policy: PriorityPolicy,
    *,
    score: float | None,
    site_factor: int | None,
    rank: int | None,
    ranked: int,
    waiting_for: str = "",
) -> dict[str, Any]:
    """The explanation of one job as a JSON-able dict."""
    factors: dict[str, Any] = {}
    for name, comp in _components(policy).items():
        entry: dict[str, Any] = {"score": _safe_score(comp, job, ctx)}
        weights = getattr(policy, "weights", None)
        if isinstance(weights, dict) and name in weights:
            entry["weight"] = weights[name]
        if name == "las" and hasattr(comp, "queue"):
            entry["queue"] = comp.queue(job, ctx)
            entry["thresholds"] = list(getattr(comp, "thresholds", ()))
            entry["service"] = getattr(comp, "service", "gpu-seconds")
            if hasattr(comp, "attained"):
                entry["attained"] = round(float(comp.attained(job)), 3)
            if hasattr(comp, "promoted"):
                entry["starvation_promoted"] = bool(comp.promoted(job, ctx.now))
        if name == "fairshare" and hasattr(comp, "factor"):
            entry["factor"] = round(comp.factor(job.account, ctx), 6)
        if name == "class" and hasattr(comp, "weight"):
            entry["class_weight"] = comp.weight(job)
            entry["class_weight_max"] = max(
                getattr(comp, "weights", {None: comp.weight(job)}).values()
            )
        factors[name] = entry
    tiers = (
        [list(t) for t in policy.tiers] if hasattr(policy, "tiers") else None
    )  # scores: tier_scores()
    s = slack(job, ctx.now)
    led = ctx.ledger
    return {
        "job_id": job.job_id,
        "at": ctx.now,
        "state": job.state.value,
        "state_reason": job.state_reason,
        "user": job.user,
        "account": job.account,
        "name": job.name,
        "class": job.job_class.value,
        "checkpointable": job.checkpointable,
        "preemption": _preemption(job, ctx),
        "num_gpus": job.num_gpus,
        "num_nodes": job.num_nodes,
        "gpus_per_node": job.gpus_per_node,
        "time_limit": job.time_limit,
        "submit_time": job.submit_time,
        "factors_at": ctx.now,  # kept with the factors: a cycle may reuse them for a job deep in the queue
        "order_key": order_key(policy, job, ctx),
        "policy": policy.name,
        "score": None if score is None else round(score, 6),
        "rank": rank,
        "ranked": ranked,
        "site_factor": site_factor,
        "tiers": tiers,
        "factors": factors,
        "attained_gpu_s": round(job.attained_gpu_s, 3),
        "executed_s": round(job.executed_s, 3),
        "restarts": job.restarts,
        "max_restarts": _max_restarts(ctx),
        "deadline": job.deadline,
        "deadline_slack_s": None if s is None else round(s, 3),
        "deadline_demoted": (job.tags or {}).get(DEMOTED_TAG),
        "deadline_steps": [[t, v] for t, v in job.soft_deadlines]
        if job.deadline is None and job.soft_deadlines
        else None,
        "deadline_step_promised": _float_or_none((job.tags or {}).get(SOFT_FROM_TAG)),
        "account_usage_gpu_s": round(led.usage(job.account, ctx.now), 3)
        if led is not None
        else None,
        "usage_half_life_hours": led.half_life_s / 3600.0 if led is not None else None,
        "waiting_for": waiting_for,
    }


def _max_restarts(ctx) -> int | None:
    """The site's cap on a job's restarts for preemption (``[preemption] max_restarts``)."""
    cfg = getattr(ctx, "config", None)
    return getattr(getattr(cfg, "preemption", None), "max_restarts", None)


def _float_or_none(text) -> float | None:
    try:
        return float(text) if text is not None else None
    except (TypeError, ValueError):
        return None


def _preemption(job: Job, ctx) -> dict[str, str]:
    kind, why = resume_kind(job, getattr(ctx, "config", None))
    return {"kind": kind, "why": why}


def waiting_reason(job: Job, free_gpus: int, preempting_for: Iterable[int] = ()) -> str:
    """A short sentence on what a pending job waits for."""
    if not job.pending:
        return ""
    return _waiting_text(job.state_reason, job.num_gpus, free_gpus, preempting_for)


def _waiting_text(
    state_reason: str | None,
    num_gpus: int | None,
    free_gpus: int,
    preempting_for: Iterable[int] = (),
) -> str:
    victims = sorted(preempting_for)
    if victims:
        return f"preemption of job(s) {', '.join(map(str, victims))} to free GPUs"
    reason = state_reason or "None"
    if reason in ("Priority", "Resources", "None"):
        if num_gpus is not None and num_gpus > free_gpus:
            return f"{num_gpus} GPU(s); {free_gpus} free now (Slurm reason: {reason})"
        return f"Slurm's next scheduling pass (Slurm reason: {reason})"
    return f"Slurm reason: {reason}"


ROUNDED = {"score": 6, "attained_gpu_s": 3, "executed_s": 3, "deadline_slack_s": 3}
"""The digits a stored explanation's numbers are shown with (as :func:`explain_job` rounds them)."""


def finish_numbers(e: dict[str, Any], derive: Mapping[str, Any]) -> dict[str, Any]:
    """Complete an explanation whose numbers a cycle stored raw (the prioritizer stores them for
    every job each cycle, so it does the least per job): round them as :func:`explain_job`
    does, and add its account's usage and what it waits for from the cycle's ``derive``
    figures (``usage`` per account, ``half_life_hours``, ``free_gpus``, ``victims`` per
    waiting job)."""
    for key, digits in ROUNDED.items():
        v = e.get(key)
        if isinstance(v, float):
            e[key] = round(v, digits)
    e["account_usage_gpu_s"] = (derive.get("usage") or {}).get(e.get("account"))
    e["usage_half_life_hours"] = derive.get("half_life_hours")
    if e.get("state") != JobState.PENDING.value:
        e["waiting_for"] = ""
    else:
        victims = (derive.get("victims") or {}).get(str(e.get("job_id")), ())
        e["waiting_for"] = _waiting_text(
            e.get("state_reason"), e.get("num_gpus"), int(derive.get("free_gpus", 0)), victims
        )
    return e


def tier_scores(expl: Mapping[str, Any]) -> list[float]:
    """Each tier's weighted score sum, from the stored factor scores and weights."""
    factors = expl.get("factors") or {}
    out = []
    for names in expl.get("tiers") or []:
        total = 0.0
        for n in names:
            f = factors.get(n, {})
            total += f.get("weight", 1.0) * (f.get("score") or 0.0)
        out.append(round(total, 6))
    return out


def utilisation_lines(gpu: Mapping[str, Any]) -> list[str]:
    """The GPU-telemetry lines: the recent window, then the job's stored summary (idle clock, warning, action)."""
    lines = []
    if "gpus" in gpu:
        idle = (
            f"; idle {gpu['idle_minutes']} min -> {gpu['idle_verdict']}"
            if "idle_verdict" in gpu
            else ""
        )
        lines.append(
            f"  GPU utilisation: {gpu['gpus']} GPU(s), mean {gpu['mean_util_percent']}% max "
            f"{gpu['max_util_percent']}%, {gpu['processes']} process(es), {gpu['power_watts']} W{idle}"
        )
        if gpu.get("share_bytes") is not None:
            lines.extend(share_lines(gpu["mem_used_bytes"], gpu["share_bytes"]))
    if gpu.get("samples_seen"):
        peak_gib = (gpu.get("peak_gpu_mem_bytes") or 0) / 2**30
        lines.append(
            f"  GPU lifetime: {gpu['samples_seen']} sample(s), mean {gpu['lifetime_mean_util_percent']}%, "
            f"peak {gpu['peak_util_percent']}%, peak memory {peak_gib:.1f} GiB per GPU, "
            f"last busy {_t(gpu.get('last_busy_at'))}, idle since {_t(gpu.get('idle_since'))}"
        )
    lines.extend(sample_age_lines(gpu))
    if gpu.get("share_hint"):
        lines.extend(
            textwrap.wrap(
                gpu["share_hint"], 80, initial_indent="  GPU share tip: ", subsequent_indent="    "
            )
        )
    if gpu.get("warned_at") is not None or gpu.get("action"):
        action = f"; {gpu['action']} at {_t(gpu.get('action_at'))}" if gpu.get("action") else ""
        lines.append(f"  idle GPUs: warned {_t(gpu.get('warned_at'))}{action}")
    return lines


def sample_age_lines(gpu: Mapping[str, Any]) -> list[str]:
    """How old the job's newest GPU sample is (``sample_age_s``, set where the viewer's clock is
    known) and, past ``stale_after_s``, that its idle time is not counted until new ones come."""
    age = gpu.get("sample_age_s")
    if age is None:
        return []
    words = f"  GPU samples: the newest is {age_words(age)} old"
    limit = gpu.get("stale_after_s")
    if limit is None or age <= limit:
        return [words]
    return [
        words + f", too old to use (over {age_words(limit)}):",
        "    the gpu-agent on its node may be down; its idle time is not counted",
        "    until new samples come",
    ]


def share_lines(used: int, share: int) -> list[str]:
    """A job on GPU shards: its memory against what its shards guarantee, and whether it is over."""
    head = f"  GPU share: {used / 2**30:.1f} GiB used of the {share / 2**30:.1f} GiB its shards guarantee"
    if used <= share:
        return [head + " (within)"]
    return [
        head,
        "    OVER its share: its neighbours on the GPU may run out of memory;",
        "    ask for more shards or a whole GPU (--comment=dl:share=0)",
    ]


def _t(at: Any) -> str:
    import time as _time

    return "-" if at is None else _time.strftime("%m-%d %H:%M", _time.localtime(float(at)))
