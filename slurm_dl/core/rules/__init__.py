"""The job_submit filter's rules: pure functions of a job description and the site config.

``decide(job_desc, config, ctx)`` runs classify → validate → reshape → defaults → tag (each
switchable under ``[filter]`` in the site config) and returns a :class:`FilterDecision`. It
never raises for any input: a job description it cannot make sense of is rejected with a
message, never accepted unchecked and never an exception.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ..config import SiteConfig
from .classify import classify
from .decision import CODE_ACCESS_DENIED, Draft, FilterContext, FilterDecision, Rejection
from .defaults import defaults
from .elastic import elastic
from .request import JOB_DESC_FIELDS, JobRequest
from .reshape import reshape
from .share import share, shard_request
from .tag import tag
from .validate import requested_deadline, requested_soft, validate

__all__ = [
    "FilterContext",
    "FilterDecision",
    "JobRequest",
    "JOB_DESC_FIELDS",
    "decide",
    "decide_request",
    "unreadable",
]


def _summary(req: JobRequest, d: FilterDecision, source: str = "-") -> str:
    who = req.user_name or (str(req.user_id) if req.user_id is not None else "?")
    if d.accepted:
        changed = ",".join(f"{k}={v}" for k, v in sorted(d.changes.items()) if k != "admin_comment")
        cls = d.job_class.value if d.job_class else "-"
        return f"accept user={who} class={cls}({source}) asked={req.original_request()} set=[{changed}]"
    return f"reject user={who} rule={d.rule} asked={req.original_request()}"


def decide_request(req: JobRequest, config: SiteConfig, ctx: FilterContext) -> FilterDecision:
    f = config.filter
    draft = Draft()
    if f.classify:
        draft = classify(req, draft, config)
    shards = shard_request(req, config)  # a job's own shards count as GPUs, validated or not
    if isinstance(shards, Rejection):
        d = FilterDecision(
            "reject", draft.job_class, message=shards.message, code=shards.code, rule=shards.rule
        )
        return replace(d, summary=_summary(req, d))
    if shards is not None:
        draft = draft.evolve(shard_gpus=shards.gpus, shards=shards.tag)
    if f.validate_jobs:
        checked = validate(req, draft, config, ctx)
        if isinstance(checked, Rejection):
            d = FilterDecision(
                "reject",
                draft.job_class,
                message=checked.message,
                code=checked.code,
                rule=checked.rule,
            )
            return replace(d, summary=_summary(req, d))
        draft = checked
    else:
        deadline = requested_deadline(req, ctx.now)[0]
        steps = requested_soft(req, ctx.now)[0] if deadline is None else None
        draft = draft.evolve(deadline=deadline, soft_deadlines=tuple(steps or ()))
    if f.reshape:
        draft = reshape(req, draft, config, ctx)
    else:
        draft = draft.evolve(gpus=req.total_gpus, shape="any")
    shared = share(req, draft, config)
    if isinstance(shared, Rejection):
        d = FilterDecision(
            "reject", draft.job_class, message=shared.message, code=shared.code, rule=shared.rule
        )
        return replace(d, summary=_summary(req, d))
    draft = shared
    if f.defaults:
        draft = defaults(req, draft, config)
    sized = elastic(req, draft, config)
    if isinstance(sized, Rejection):
        d = FilterDecision(
            "reject", draft.job_class, message=sized.message, code=sized.code, rule=sized.rule
        )
        return replace(d, summary=_summary(req, d))
    draft = sized
    draft = tag(req, draft, config)
    d = FilterDecision("accept", draft.job_class, changes=draft.changes, notices=draft.notices)
    return replace(d, summary=_summary(req, d, draft.class_source))


UNREADABLE = (
    "slurm-dl: the job filter could not check this job ({why}); it was not "
    "submitted. Fix: check the options for absurd values, or tell the administrators."
)


def decide(job_desc: Mapping[str, Any], config: SiteConfig, ctx: FilterContext) -> FilterDecision:
    """The decision for one job description as the Lua shim sends it (``job_desc`` fields).

    Total: a job the rules cannot judge (a value no rule foresaw) is refused with a message,
    never let through unchecked, and never an exception that would count as the service failing."""
    try:
        return decide_request(JobRequest.from_job_desc(job_desc), config, ctx)
    except Exception as e:  # noqa: BLE001 - one job's odd values must never turn into an outage
        return unreadable(f"{type(e).__name__}")


def unreadable(why: str) -> FilterDecision:
    """The refusal of a job the filter cannot read or judge."""
    return FilterDecision(
        "reject",
        message=UNREADABLE.format(why=why[:60]),
        code=CODE_ACCESS_DENIED,
        rule="internal",
        summary=f"reject rule=internal ({why[:200]})",
    )
