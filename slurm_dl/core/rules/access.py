"""access: who may use a high class (serve, interactive) and how much of it.

A class that ranks above train is closed unless the site opens it: allow-lists
(``allow_accounts`` / ``allow_qos`` / ``allow_users``: a job any of them names is admitted) and a
per-user GPU quota over live jobs (``max_gpus_per_user``, which alone opens the class to every
user within it). A job that hints such a class without being admitted is refused with the
reason; one that lands there by evidence alone (an allocation without a batch script) runs as
train instead, with a notice.
"""

from __future__ import annotations

from ..config import SiteConfig
from ..model import JobClass
from ..classes import is_privileged, not_admitted, over_quota
from .decision import CODE_ACCESS_DENIED, CODE_POLICY, Draft, FilterContext, Rejection
from .request import JobRequest

PREFIX = "slurm-dl: "


def check_account(req: JobRequest, ctx: FilterContext) -> Rejection | None:
    """An account the user has no association with is refused where Slurm keeps associations:
    fair share and account allow-lists take a job's account on trust otherwise (Slurm itself
    refuses it only with ``AccountingStorageEnforce=associations``)."""
    if ctx.user_accounts is None or not req.account:
        return None
    asked = req.account.strip().lower()
    if asked in ctx.user_accounts:
        return None
    yours = ", ".join(sorted(ctx.user_accounts)[:8]) or "none"
    shown = asked if len(asked) <= 40 else asked[:37] + "..."
    return Rejection(
        "validate.account",
        f"{PREFIX}account {shown!r} is not one of yours on this cluster (yours: {yours}). "
        "Fix: -A with one of your accounts, or none for your default.",
        "ESLURM_INVALID_ACCOUNT",
    )


def check_access(
    req: JobRequest, draft: Draft, config: SiteConfig, ctx: FilterContext
) -> Draft | Rejection:
    refused = check_account(req, ctx)
    if refused is not None:
        return refused
    job_class = draft.job_class
    if not is_privileged(job_class, config):
        return draft
    account = req.account or req.default_account
    qos = req.qos or req.default_qos
    why = not_admitted(job_class, account, qos, config, req.user_name)
    rule = "validate.class_access"
    if why is None:
        why = over_quota(
            job_class,
            req.total_gpus + draft.shard_gpus,
            int(ctx.user_class_gpus.get(job_class.value, 0)),
            config,
        )
        rule = "validate.class_quota"
    if why is None:
        return draft
    if draft.class_source != "hint" and not draft.shard_gpus:  # by evidence: run as train instead
        # (not a job on shards: training never runs on shards, so it is refused with the reason)
        notices = (*draft.notices, f"{PREFIX}runs as class train: {why}")
        return draft.evolve(job_class=JobClass.TRAIN, class_source="default", notices=notices)
    fix = (
        "Fix: submit without dl:class="
        + job_class.value
        + " (it runs as train), "
        + (
            "or use an allowed account (-A) or QOS (--qos)."
            if rule == "validate.class_access"
            else "or wait until your other jobs of this class end."
        )
    )
    if draft.shard_gpus:  # shards never run as train
        fix = (
            "Fix: wait until your other jobs of this class end (a node's GPU shards count as one GPU)."
            if rule == "validate.class_quota"
            else "Fix: use an allowed account (-A) or QOS (--qos)."
        )
    return Rejection(
        rule,
        f"{PREFIX}{why}. {fix}",
        CODE_ACCESS_DENIED if rule == "validate.class_access" else CODE_POLICY,
    )
