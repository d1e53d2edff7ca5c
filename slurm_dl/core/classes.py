"""Job classes above train: which rank higher, who may use them and within what quota. Pure.

A class that ranks above train (more weight, or protected from preemption) is closed unless the
site opens it: allow-lists (``allow_accounts`` / ``allow_qos`` / ``allow_users``) and a per-user
GPU quota over live jobs (``max_gpus_per_user``). The filter holds a job to them at submission
(:mod:`.rules.access`), the prioritizer every cycle (a job past them runs as train).
"""

from __future__ import annotations

from .config import SiteConfig
from .model import JobClass


def is_privileged(job_class: JobClass, config: SiteConfig) -> bool:
    """Does this class rank above train (more weight, or protected from preemption)?"""
    c = config.class_config(job_class)
    train = config.class_config(JobClass.TRAIN)
    return c.weight > train.weight or (not c.preemptible and train.preemptible)


def not_admitted(
    job_class: JobClass,
    account: str | None,
    qos: str | None,
    config: SiteConfig,
    user: str | None = None,
) -> str | None:
    """Why a job of ``user`` from ``account`` / ``qos`` may not use ``job_class`` (None when it
    may). A class above train is closed until the site opens it: an allow-list admits what it
    names (``*``: everyone), a per-user GPU quota alone opens it to every user within it."""
    c = config.class_config(job_class)
    lists = c.allow_lists
    if not lists:
        if c.max_gpus_per_user is not None:
            return None
        return (
            f"class {job_class.value} is not open on this cluster (the site opens it with an "
            "allow-list or a per-user GPU quota)"
        )
    for kind, value in (("accounts", account), ("QOS", qos), ("users", user)):
        names = lists.get(kind)
        if names is not None and ("*" in names or (value and value in names)):
            return None
    allowed = " or ".join(
        f"{kind} " + (", ".join(names) or "(none)") for kind, names in lists.items()
    )
    who = f"account {account!r}" if account else "a job without an account"
    if qos:
        who += f" with QOS {qos!r}"
    if "users" in lists:
        who += f" of user {user!r}" if user else " of an unknown user"
    return f"class {job_class.value} is open to {allowed}, not to {who}"


def over_quota(
    job_class: JobClass, gpus: int, held: int, config: SiteConfig, who: str = "you hold"
) -> str | None:
    quota = config.class_config(job_class).max_gpus_per_user
    if quota is None or held + gpus <= quota:
        return None
    return (
        f"class {job_class.value} allows {quota} GPU(s) per user at once; {who} {held} in live jobs "
        f"and asked {gpus}"
    )
