"""Fill in what the policies need from a snapshot's jobs: filter tags and the ledger's service."""

from __future__ import annotations

from slurm_dl.ledger import Ledger
from slurm_dl.model import Job, JobClass
from slurm_dl.tags import parse_tag


def apply_tags(job: Job) -> None:
    """Class, checkpointability and deadline from the filter's ``admin_comment`` tag.

    A job without a tag (no filter installed, or submitted around it) is a plain checkpointable
    training job — e.g. one submitted with ``sbatch --requeue``.
    """
    tag = parse_tag(job.admin_comment)
    if tag is None:
        if not job.tags:
            job.job_class = JobClass.TRAIN
            job.checkpointable = True
        return
    job.job_class = tag.job_class
    job.checkpointable = tag.checkpointable
    if job.pending and tag.gpus > job.num_gpus:  # the filter counted every form of GPU request
        job.num_gpus = tag.gpus
    if job.deadline is None and tag.deadline is not None:
        job.deadline = float(tag.deadline)


def apply_ledger(job: Job, ledger: Ledger) -> None:
    """Attained service and executed time across all runs, from the ledger (never lower)."""
    rec = ledger.jobs.get(job.job_id)
    if rec is None:
        return
    job.attained_gpu_s = max(job.attained_gpu_s, rec.attained_gpu_s)
    job.executed_s = max(job.executed_s, rec.executed_s)
    job.restarts = max(job.restarts, rec.restarts)


def seed_unknown_running(job: Job, ledger: Ledger, now: float) -> None:
    """A running job the ledger has never seen (the daemon started after it) has at least
    attained ``GPUs × (now - start)`` in its current run; earlier runs are unknown."""
    if job.job_id in ledger.jobs or not job.running or job.start_time is None or now <= job.start_time:
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
