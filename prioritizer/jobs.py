"""Fill in what the policies need from a snapshot's jobs: filter tags and the ledger's service."""

from __future__ import annotations

from operator import attrgetter

from slurm_dl.core.config import SiteConfig
from slurm_dl.core.ledger import JobRecord, Ledger
from slurm_dl.core.model import Job, JobClass
from slurm_dl.core.classes import is_privileged, not_admitted, over_quota
from slurm_dl.core.live import shard_gpus
from slurm_dl.core.site_shape import site_shape
from slurm_dl.core.hints import CKPT_BATCH, CKPT_STEPS, parse_ckpt, parse_hints
from slurm_dl.core.tags import parse_tag


def apply_tags(job: Job) -> None:
    """Class, checkpointability, deadline and soft-deadline steps from the filter's ``admin_comment`` tag.

    A job without a tag (no filter installed, or submitted around it) is a training job that is
    checkpointable only if it declared a handler itself: ``dl:ckpt=1`` (or ``steps``) in its
    comment. Declaring one only makes the job a possible victim, so trusting the user's comment
    here gives nothing away; a job that declared nothing is never signalled or requeued.
    """
    tag = _tag_of(job.admin_comment)
    if job.shards > 0:  # on GPU shards: counted as GPUs in the ledger, fair share and the quotas
        counted = shard_gpus(job, tag.gpus if tag is not None else 0)
        if counted > job.num_gpus:
            job.num_gpus = counted
    if tag is None:
        if not job.tags:
            target = _ckpt_of(job.comment)
            job.job_class = JobClass.TRAIN
            job.checkpointable = target in (CKPT_BATCH, CKPT_STEPS)
            job.signal_target = CKPT_STEPS if target == CKPT_STEPS else CKPT_BATCH
        return
    job.job_class = tag.job_class
    job.checkpointable = tag.checkpointable
    job.elastic = tag.elastic
    if job.pending and tag.gpus > job.num_gpus and tag.elastic is None:
        job.num_gpus = tag.gpus  # the filter counted every form of GPU request (an elastic
        # job's size is Slurm's: a resize changed it below the tag's maximum)
    job.signal_target = tag.signal_target
    job.accepted_types = tag.gpu_types or ()
    job.preempt_signal = tag.signal
    job.lead_s = float(tag.lead_s) if tag.lead_s is not None else None
    if job.deadline is None and tag.deadline is not None:
        job.deadline = float(tag.deadline)
    if job.deadline is None and tag.soft_deadlines:  # a strict deadline (sbatch --deadline) wins
        job.soft_deadlines = tuple((float(t), v) for t, v in tag.soft_deadlines)


STEPS_SET_ASIDE = (
    "deadline steps set aside: the job also has a deadline of its own (sbatch --deadline), "
    "which counts; a job has one or the other"
)


def steps_set_aside(job: Job) -> bool:
    """Whether the filter tagged deadline steps that Slurm's own deadline of the job overrides
    (the filter could not see ``--deadline``, as on 22.05, and so could not refuse both)."""
    if job.deadline is None or "soft=" not in (job.admin_comment or ""):
        return False
    tag = _tag_of(job.admin_comment)
    return tag is not None and bool(tag.soft_deadlines) and tag.deadline is None


# A cycle reads the same comments as the one before: each distinct text is parsed once (the
# tag is immutable). Bounded: cleared when it holds more texts than a large queue has jobs.
_MEMO_MAX = 500_000
_JOB_CLASS = attrgetter("job_class")
_tags: dict = {}
_ckpts: dict = {}


def _tag_of(text):
    try:
        return _tags[text]
    except KeyError:
        pass
    except TypeError:  # not hashable: not a tag
        return None
    if len(_tags) >= _MEMO_MAX:
        _tags.clear()
    tag = _tags[text] = parse_tag(text)
    return tag


def _ckpt_of(comment):
    try:
        return _ckpts[comment]
    except KeyError:
        pass
    except TypeError:
        return parse_ckpt(parse_hints(comment).get("ckpt") or "")
    if len(_ckpts) >= _MEMO_MAX:
        _ckpts.clear()
    target = _ckpts[comment] = parse_ckpt(parse_hints(comment).get("ckpt") or "")
    return target


def apply_ledger(job: Job, rec: JobRecord | None) -> None:
    """Attained service and executed time across all runs, from the job's ledger record (never
    lower), and the time it has waited (held time is not waiting: the starvation guard)."""
    if rec is None:
        job.waited_s = None
        return
    job.waited_s = rec.waited_s
    if rec.run_from is None:  # most of a queue: the record's figures as they are (no properties)
        attained, executed = rec.attained_base_gpu_s, rec.executed_base_s
    else:
        attained, executed = rec.attained_gpu_s, rec.executed_s
    if attained > job.attained_gpu_s:
        job.attained_gpu_s = attained
    if executed > job.executed_s:
        job.executed_s = executed
    if rec.restarts > job.restarts:
        job.restarts = rec.restarts
    job.preemptions = rec.preemptions
    if rec.gpu_type and rec.norm_executed_s > 0:  # several types: run time at the speed it ran
        job.norm_executed_s = rec.norm_executed_s


def seed_unknown_running(job: Job, ledger: Ledger, now: float) -> None:
    """A running job the ledger has never seen (the daemon started after it) has at least
    attained ``GPUs × (now - start)`` in its current run; earlier runs are unknown."""
    if (
        job.job_id in ledger.jobs
        or not job.running
        or job.start_time is None
        or now <= job.start_time
    ):
        return
    ran = now - job.start_time
    job.executed_s = max(job.executed_s, ran)
    job.attained_gpu_s = max(job.attained_gpu_s, job.num_gpus * ran)


def reopen_returned(jobs: list[Job], ledger: Ledger) -> list[int]:
    """Reopen finished ledger records of jobs the snapshot shows alive again.

    A job that dropped out of one snapshot (an unusual state during a requeue) keeps its
    attained service. Job ids are taken to be unique for the store's lifetime: Slurm resets a
    requeued job's submit time, so nothing in a snapshot tells a reused id apart — a fresh
    cluster (one that numbers jobs from 1 again) needs a fresh store (``--db``).
    """
    reopened = []
    for job in jobs:
        rec = ledger.jobs.get(job.job_id)
        if rec is None or not rec.finished:
            continue
        rec.finished = False
        rec.running = False
        ledger.revision += 1
        reopened.append(job.job_id)
    return reopened


def class_violation(job: Job, config: SiteConfig, *, privileged: bool | None = None) -> str | None:
    """Why a live job no longer meets the constraints of the class it is tagged with (None when
    it does): a high class is kept only while its limits hold, e.g. after a time-limit change.
    ``privileged``: whether the job's class is privileged, when the caller knows it already."""
    if not (is_privileged(job.job_class, config) if privileged is None else privileged):
        return None
    return _limits_violation(
        job,
        config.class_config(job.job_class).max_time_minutes,
        site_shape(config).max_gpus_per_node,
    )


def _limits_violation(job: Job, max_time_minutes: int, most: int) -> str | None:
    """``class_violation`` for a privileged class, given its maximum time and the site's GPUs
    per node."""
    name = job.job_class.value
    if job.time_limit is None or job.time_limit > max_time_minutes * 60:
        limit = (
            "no time limit"
            if job.time_limit is None
            else f"time limit {job.time_limit / 60:.0f} min"
        )
        return f"{limit} exceeds class {name}'s maximum {max_time_minutes} min"
    if (job.num_nodes or 1) > 1 or job.num_gpus > most:
        return (
            f"{job.num_gpus} GPU(s) on {job.num_nodes or 1} node(s) exceed class {name}'s one node"
        )
    return None


_BY_SUBMISSION = attrgetter("submit_time", "job_id")


def demote_violations(jobs: list[Job], config: SiteConfig) -> dict[int, str]:
    """``class_demotions``, the jobs changed in place (class train)."""
    demoted = class_demotions(jobs, config)
    for job in jobs:
        if job.job_id in demoted:
            job.job_class = JobClass.TRAIN
    return demoted


def class_demotions(jobs: list[Job], config: SiteConfig) -> dict[int, str]:
    """Which live jobs to demote to train: those whose class limits no longer hold, whose
    account may not use its class, or that go past its class's per-user GPU quota (the user's
    earliest jobs keep the class); returns why, per job. The jobs are not changed.
    (Checkpointability stays as tagged: a demoted job is not made preemptible.)"""
    demoted: dict[int, str] = {}
    held: dict[tuple[str, JobClass], int] = {}
    high = {
        c for c in set(map(_JOB_CLASS, jobs)) if is_privileged(c, config)
    }  # per class: most are train
    if not high:
        return demoted
    most = site_shape(config).max_gpus_per_node
    max_minutes = {c: config.class_config(c).max_time_minutes for c in high}
    quota = {c: config.class_config(c).max_gpus_per_user for c in high}
    admitted: dict[tuple, str | None] = {}  # (class, account, QOS, user) -> not_admitted's answer
    mine = [j for j in jobs if j.job_class in high]
    # running jobs first (they hold the quota), then by submission and job id
    mine = sorted((j for j in mine if j.running), key=_BY_SUBMISSION) + sorted(
        (j for j in mine if not j.running), key=_BY_SUBMISSION
    )
    for job in mine:
        cls = job.job_class
        why = _limits_violation(job, max_minutes[cls], most)
        if why is None:
            who = (cls, job.account or None, job.qos or None, job.user or None)
            try:
                why = admitted[who]
            except KeyError:
                why = admitted[who] = not_admitted(*who[:3], config, who[3])
            if why is None and quota[cls] is not None:
                key = (job.user, cls)
                why = over_quota(
                    cls, job.num_gpus, held.get(key, 0), config, who=f"user {job.user!r} holds"
                )
                if why is None:
                    held[key] = held.get(key, 0) + job.num_gpus
        if why is not None:
            demoted[job.job_id] = f"class {cls.value} demoted to train: {why}"
    return demoted


class CycleChanges:
    """What a cycle changes on its jobs for its own decisions (a class demoted, a deadline
    dropped, an admission tag), undone before the next snapshot. A snapshot's Jobs may be
    handed out again by the next one (``LineMemo``: the same object for the same line), which
    must find them as their line and tags make them; undoing a few thousand changes costs far
    less than a copy of each job changed."""

    def __init__(self) -> None:
        self._undo: list[tuple[Job, str, object]] = []

    def set(self, job: Job, name: str, value: object) -> None:
        self._undo.append((job, name, getattr(job, name)))
        setattr(job, name, value)

    def undo(self) -> None:
        for job, name, value in reversed(self._undo):
            setattr(job, name, value)
        self._undo.clear()
