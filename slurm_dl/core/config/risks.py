"""Settings that are valid but risky: each a line for ``config check`` and the daemons' logs."""

from __future__ import annotations

from ..model import JobClass
from .site_config import SiteConfig


def config_warnings(config: SiteConfig) -> list[str]:
    """Settings that are valid but risky: each a line for ``config check`` and the daemons' logs."""
    out = []
    if config.preemption.enabled and config.preemption.requeue_without_signal:
        out.append(
            "preemption.requeue_without_signal = true: jobs that declared no checkpoint handler "
            "but are requeueable may be requeued and restart from the beginning, losing their work"
        )
    fs = config.policy.fairshare
    if config.policy.mix == "fairshare" and not config.preemption.enabled:
        out.append(
            'policy.mix = "fairshare" with preemption.enabled = false: accounts below their fair '
            "share get GPUs only as jobs end (the queue order alone)"
        )
    elif (
        config.policy.mix == "fairshare"
        and fs.lease_seconds < config.preemption.restart_delay_seconds
    ):
        out.append(
            f"policy.fairshare.lease_seconds = {fs.lease_seconds:g} is shorter than a restart "
            f"({config.preemption.restart_delay_seconds:g} s): jobs may spend more time restarting than running"
        )
    for name, c in config.classes.items():
        if _ranks_above_train(config, name) and c.open_to_all and c.max_gpus_per_user is None:
            out.append(
                f"classes.{name.value} is open to every user with no per-user GPU quota: any job "
                f"may claim its priority{'' if c.preemptible else ' and its protection from preemption'}"
                " (limit it with allow_accounts, allow_qos, allow_users or max_gpus_per_user)"
            )
    return out


def _ranks_above_train(config: SiteConfig, job_class: JobClass) -> bool:
    c, train = config.class_config(job_class), config.class_config(JobClass.TRAIN)
    return c.weight > train.weight or (not c.preemptible and train.preemptible)
