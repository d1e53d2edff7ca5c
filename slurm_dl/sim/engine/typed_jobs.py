"""A job's speed on each node group of a typed cluster (see :mod:`.typed`)."""

from __future__ import annotations


def accepted_types(job) -> list[str]:
    """The GPU types ``job`` accepts: ``Job.accepted_types``, else the type it names, else any
    (empty)."""
    if job.accepted_types:
        return list(job.accepted_types)
    return [job.gpu_type] if job.gpu_type else []


def _accepted_here(job, placer) -> list[str]:
    """The types ``job`` accepts in this replay (a history job: the type it ran on)."""
    if placer.recorded and job.gpu_type and job.gpu_type in placer.types:
        return [job.gpu_type]
    return accepted_types(job)


def rate_pool(job, placer, allowed) -> list[str]:
    """The types whose fastest for ``job`` its rates are relative to: all the model knows that
    it accepts, not only this cluster's (a job's work is the same on the whole cluster and on
    an account's share of it); else those of the groups it may use."""
    acc = _accepted_here(job, placer)
    pool = [t for t in placer.model.types if not acc or t in acc]
    return pool or [placer.groups[i].gpu_type for i in allowed]


CONSTRAINED_SPEED = 0.5
"""``--type-choice constrained``: the types a job accepts run it at least this share of its
best speed."""


def job_rates(job, placer, bad: list) -> tuple[tuple[float, ...], list[int], float]:
    """``(rates, allowed, scale)``: ``job``'s speed on each group over its speed on its fastest
    type (of all the model's types it accepts, whether this cluster has them or not: the trace's
    duration is its run time there), the groups it may use (node order), and the factor its
    trace duration becomes that work by (not 1 only for a history job recorded on a type the
    cluster lacks). A job that fits no group it accepts adds a line to ``bad``."""
    groups, types = placer.groups, placer.types
    acc = _accepted_here(job, placer)
    recorded = placer.recorded and job.gpu_type
    acc_in = [t for t in acc if t in types]
    if acc and not acc_in and not recorded:
        bad.append(
            f"job {job.job_id} accepts only {'|'.join(acc)}; the cluster has {', '.join(types)}"
        )
        return (1.0,) * len(groups), [], 1.0
    allowed = [
        i
        for i, g in enumerate(groups)
        if (not acc_in or g.gpu_type in acc_in) and g.gpus >= job.num_gpus
    ]
    if not allowed:
        where = "|".join(acc_in) if acc_in else "any type"
        bad.append(
            f"job {job.job_id} needs {job.num_gpus} GPUs of one type ({where}); no node group has that many"
        )
        return (1.0,) * len(groups), [], 1.0
    model = placer.model
    if model is None:
        return (1.0,) * len(groups), allowed, 1.0
    sp = model.speeds(job)
    pool = rate_pool(job, placer, allowed)
    top = max(sp[t].value for t in pool)
    rates = tuple(sp[g.gpu_type].value / top for g in groups)
    if placer.choice == "constrained" and not recorded:  # the types a careful user would name
        fast = [i for i in allowed if rates[i] >= CONSTRAINED_SPEED]
        allowed = fast or [max(allowed, key=lambda i: (rates[i], -i))]
    scale = 1.0
    if recorded and job.gpu_type not in types and job.gpu_type in sp:
        scale = sp[job.gpu_type].value / top  # its recorded run time was at that type's speed
    return rates, allowed, scale
