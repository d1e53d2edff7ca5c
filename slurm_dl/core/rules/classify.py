"""classify: which job class a submission is (train, inference, serve, sweep, interactive).

A heterogeneous job's later components take the first component's class. Otherwise the
evidence, strongest first: a job array is a sweep; a partition that belongs to one class gives
that class; a submission without a batch script (srun/salloc) is interactive; else train.
A ``dl:class=…`` hint in ``--comment`` may choose another class, but never blindly: a class
that ranks above train (a larger weight, or not preemptible) must meet its constraints — no
array, fits on one node, an explicit time limit within the class maximum — or the hint is
downgraded to what the evidence says, with a notice to the user.

Preemption is opt-in: a job is checkpointable (and so may be signalled and requeued by the
prioritizer) only when it declares a handler with ``dl:ckpt=1`` (its batch script traps USR2,
``--signal=B:USR2@N``) or ``dl:ckpt=steps`` (its srun steps trap USR2, ``--signal=USR2@N``), its
class may checkpoint, and it did not ask ``--no-requeue``. dlsubmit's scripts declare it.
Every other job is never signalled or requeued by slurm-dl. Where the job has its own
``--signal`` (on the sbatch command line, as the submit host's cli_filter reports it in
``dl:signal=``, else in its script), that says which signal goes where and how long before the
requeue (:mod:`.script`); ``dl:ckpt`` decides only for a job that gave none.
"""

from __future__ import annotations


from ..config import SiteConfig
from ..model import JobClass
from ..tags import parse_tag
from .decision import Draft
from ..hints import CKPT_OFF, parse_ckpt
from .request import JobRequest
from .script import effective_signal
from ..classes import is_privileged
from ..site_shape import site_shape


def privileged_violations(job_class: JobClass, req: JobRequest, config: SiteConfig) -> list[str]:
    """Why ``req`` may not run as ``job_class`` (empty when it may)."""
    if not is_privileged(job_class, config):
        return []
    c = config.class_config(job_class)
    why = []
    if req.array:
        why.append("it is a job array")
    most = site_shape(config).max_gpus_per_node
    if req.total_gpus > most or req.nodes > 1:
        why.append(f"it spans more than one node (the class allows up to {most} GPUs on one node)")
    if req.time_limit_min is None:
        why.append("it has no explicit --time")
    elif req.time_limit_min > c.max_time_minutes:
        why.append(
            f"its --time {req.time_limit_min} min exceeds the class maximum {c.max_time_minutes} min"
        )
    if c.partition and req.partition not in (None, c.partition):
        why.append(f"it is not in the class partition {c.partition!r}")
    return why


def evidence_class(req: JobRequest, config: SiteConfig) -> tuple[JobClass, str]:
    """The class the submission's own shape says, with where that came from."""
    if req.array:
        return JobClass.SWEEP, "array"
    if req.partition:
        owners = [jc for jc, c in config.classes.items() if c.partition == req.partition]
        if len(owners) == 1 and not privileged_violations(owners[0], req, config):
            return owners[0], "partition"
    if not req.has_script and not privileged_violations(JobClass.INTERACTIVE, req, config):
        return JobClass.INTERACTIVE, "no batch script"
    return JobClass.TRAIN, "default"


def classify(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft:
    if req.het_offset:
        return het_component(req, draft, config)
    job_class, source = evidence_class(req, config)
    notices = list(draft.notices)
    hints = req.hints
    hint = hints.get("class")
    if hint:
        try:
            hinted = JobClass.parse(hint)
        except ValueError:
            allowed = ", ".join(c.value for c in JobClass)
            notices.append(
                f"slurm-dl: ignored dl:class={hint[:40]} (unknown class; allowed: {allowed})"
            )
        else:
            if req.array and hinted is not JobClass.SWEEP:
                notices.append(f"slurm-dl: job arrays run as class sweep, not {hinted.value}")
            elif hinted is not job_class:
                why = privileged_violations(hinted, req, config)
                if why:
                    notices.append(
                        f"slurm-dl: dl:class={hinted.value} downgraded to {job_class.value} because "
                        + "; ".join(why)
                    )
                else:
                    job_class, source = hinted, "hint"
    ckpt, target = checkpoint_opt_in(hints.get("ckpt"), job_class, req, config, notices)
    signal, lead = None, None
    declared, unreadable = effective_signal(hints.get("signal"), req.script_head)
    if unreadable is not None:
        notices.append(
            f"slurm-dl: ignored dl:signal={unreadable[:40]} (not a --signal value, e.g. B:USR2@90)"
        )
    if ckpt and declared is not None:
        if declared.target != target:
            notices.append(
                f"slurm-dl: a preemption signal goes to {_WHERE[declared.target]}, as "
                f"--signal={declared.text()} says (dl:ckpt named {_WHERE[target]})"
            )
        target, signal, lead = declared.target, declared.name, declared.lead_s
    return draft.evolve(
        job_class=job_class,
        class_source=source,
        checkpointable=ckpt,
        signal_target=target,
        signal=signal,
        lead_s=lead,
        notices=tuple(notices),
    )


_WHERE = {"batch": "the batch shell", "steps": "the job's steps"}


def checkpoint_opt_in(
    hint: str | None, job_class: JobClass, req: JobRequest, config: SiteConfig, notices: list[str]
) -> tuple[bool, str]:
    """(checkpointable, signal target) from the job's ``dl:ckpt=`` declaration; notices say why
    a declaration was not taken."""
    if hint is None:
        return False, "batch"
    target = parse_ckpt(hint)
    if target is None:
        notices.append(
            f"slurm-dl: ignored dl:ckpt={hint[:40]} (use 1, steps or 0); "
            "this job will not be preempted"
        )
        return False, "batch"
    if target == CKPT_OFF:
        return False, "batch"
    if not config.class_config(job_class).checkpointable:
        notices.append(f"slurm-dl: class {job_class.value} is never checkpointed; dl:ckpt ignored")
        return False, "batch"
    if req.requeue == 0:
        notices.append(
            "slurm-dl: dl:ckpt needs a requeueable job, but it asks --no-requeue; "
            "this job will not be preempted"
        )
        return False, "batch"
    return True, target


def het_component(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft:
    """A heterogeneous job's later component runs as the class the filter gave its first one
    (the shim passes that tag along); its own hints count for nothing. Without the first one's
    tag (it went by the filter) it runs as train, never checkpointed."""
    leader = parse_tag(req.het_leader_tag)
    if leader is None:
        notices = (
            (
                *draft.notices,
                "slurm-dl: this component runs as class train (the job's first "
                "component was not classified)",
            )
            if req.hints.get("class")
            else draft.notices
        )
        return draft.evolve(
            job_class=JobClass.TRAIN,
            class_source="het",
            checkpointable=False,
            signal_target="batch",
            notices=notices,
        )
    return draft.evolve(
        job_class=leader.job_class,
        class_source="het",
        checkpointable=leader.checkpointable,
        signal_target=leader.signal_target,
    )
