"""Preemption by requeue, as a write-ahead state machine over the store's preemption rows.

One row per (victim, need). Each step is committed BEFORE the Slurm call it announces:

    signalling --USR2 to the batch shell or the steps--> signalled
    signalled  --grace period passed, still running--> requeueing --scontrol requeue--> requeued
    signalled  --victim ended or requeued itself--> finished / requeued
    signalled  --the waiting job started or left--> abandoned (the victim keeps running)
    any step   --Slurm refused the signal or the requeue--> refused (this run is never a victim again)

Only jobs that can resume are victims (``slurm_dl.core.preemption.resume_kind``): a job that declared a
checkpoint handler gets the signal where it asked for it (its batch shell, or its steps); a job
requeued without a handler (only where the site allows it) starts at ``requeueing`` and is never
signalled.

A Slurm refusal is local to its row: the row closes as ``refused`` with Slurm's message (shown
by ``explain``), and the cycle goes on. A requeue that cannot reach slurmctld is retried every
cycle until ``grace + requeue_timeout_seconds`` after the signal, then given up as ``refused``.

A daemon killed with -9 between a commit and its call finds the row on restart and never repeats
the signal: a ``signalling`` row counts as signalled (at worst the victim gets no signal and is
requeued after the grace period), a ``requeueing`` row is requeued again only if the victim is
still running with the restart count it had when signalled. A (victim, need) pair ever recorded
is never preempted again. Waiting spans cycles: the cycle never sleeps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from slurm_dl.core.config import PreemptionConfig, SiteConfig
from slurm_dl.core.errors import JobNotFoundError, SlurmError, SlurmUnavailableError
from slurm_dl.core.model import ClusterSnapshot, Job, JobState
from slurm_dl.core.preemption import RESUME_CHECKPOINT, RESUME_REQUEUE, resume_kind
from slurm_dl.store import PREEMPTION_OPEN_STATES, Store

log = logging.getLogger("slurm_dl.prioritizer")


REFUSED = "refused"
"""A closed row whose signal or requeue Slurm refused: that run of the victim is left alone."""


class PreemptionBackend(Protocol):
    def signal_batch(self, job_id: int, signal: str) -> None: ...
    def signal_steps(self, job_id: int, signal: str) -> None: ...
    def requeue(self, job_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class PreemptionIntent:
    """Preempt ``victims`` so that ``need`` can start; ``reason`` is recorded for explain."""

    need: int
    victims: tuple[int, ...]
    reason: str


@dataclass(slots=True)
class PreemptionReport:
    signalled: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    closed: list[tuple[int, str]] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    planned: list[PreemptionIntent] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)


def refused_runs(rows) -> frozenset[tuple[int, int]]:
    """(victim, restart count) of runs whose preemption Slurm refused: never victims again."""
    return frozenset((r.victim_job_id, r.restarts_at_signal) for r in rows if r.state == REFUSED)


def advance_open(
    store: Store, backend: PreemptionBackend, snap: ClusterSnapshot, pc: PreemptionConfig, report: PreemptionReport,
    *, dry_run: bool = False,
) -> None:
    """Move every open preemption one step on, from what the snapshot shows."""
    now = snap.taken_at
    grace_s = pc.grace_seconds
    for row in store.preemptions(open_only=True):
        victim = snap.job(row.victim_job_id)
        need = snap.job(row.need_job_id)
        if victim is not None and (victim.state is JobState.PENDING or victim.restarts > row.restarts_at_signal):
            _close(store, row.id, "requeued", now, "the victim left its GPUs (requeued)", report, row.victim_job_id, dry_run)
            continue
        if victim is None and now - row.signalled_at < grace_s + pc.requeue_timeout_seconds:
            report.waiting.append(row.victim_job_id)  # out of one snapshot (a requeue passing by): look again
            continue
        if victim is None or victim.state.finished:
            _close(store, row.id, "finished", now, "the victim ended before the requeue", report, row.victim_job_id, dry_run)
            continue
        if row.state in ("signalling", "signalled") and (need is None or not need.pending):
            why = "the waiting job left the queue" if need is None or need.state.finished else "the waiting job started"
            _close(store, row.id, "abandoned", now, why + "; no requeue needed", report, row.victim_job_id, dry_run)
            continue
        if row.state == "requeueing" or now - row.signalled_at >= grace_s:
            if dry_run:
                report.requeued.append(row.victim_job_id)
                continue
            if row.state != "requeueing":
                store.set_preemption_state(row.id, "requeueing", now, f"grace {grace_s:g} s over; requeueing")
            _requeue(store, backend, row.id, row.victim_job_id, row.need_job_id, now,
                     give_up_at=row.signalled_at + grace_s + pc.requeue_timeout_seconds, report=report)
        else:
            report.waiting.append(row.victim_job_id)


def _requeue(store: Store, backend: PreemptionBackend, row_id: int, victim: int, need: int, now: float, *,
             give_up_at: float, report: PreemptionReport) -> None:
    """``scontrol requeue`` one victim; every Slurm answer ends in a recorded state."""
    try:
        backend.requeue(victim)
    except JobNotFoundError:
        store.set_preemption_state(row_id, "finished", now, "the victim was gone at requeue time")
        report.closed.append((victim, "finished"))
        return
    except SlurmUnavailableError as e:
        if now < give_up_at:
            log.warning("requeue of job %d for job %d not answered, retrying next cycle: %s", victim, need, e)
            report.waiting.append(victim)
            return
        _refuse(store, row_id, victim, now, f"requeue not answered until the timeout: {e}", report)
        return
    except SlurmError as e:
        _refuse(store, row_id, victim, now, f"Slurm refused the requeue: {e}", report)
        return
    store.set_preemption_state(row_id, "requeued", now, f"requeued for job {need}")
    report.requeued.append(victim)
    log.info("requeued job %d for job %d", victim, need)


def _refuse(store: Store, row_id: int, victim: int, now: float, note: str, report: PreemptionReport) -> None:
    store.set_preemption_state(row_id, REFUSED, now, note + "; not preempted again in this run")
    report.refused.append((victim, note))
    report.closed.append((victim, REFUSED))
    log.warning("job %d: %s; it is not preempted again in this run", victim, note)


def _close(store, row_id, state, now, note, report, victim, dry_run) -> None:
    if not dry_run:
        store.set_preemption_state(row_id, state, now, note)
    report.closed.append((victim, state))


def _signal(backend: PreemptionBackend, victim: Job, signal: str) -> str:
    """Send the preemption signal where the job asked for it; returns where it went."""
    if victim.signal_target == "steps":
        backend.signal_steps(victim.job_id, signal)
        return "the job's steps"
    backend.signal_batch(victim.job_id, signal)
    return "the batch shell"


def start(
    store: Store, backend: PreemptionBackend, snap: ClusterSnapshot, intents: Sequence[PreemptionIntent],
    config: SiteConfig, report: PreemptionReport, *, dry_run: bool = False,
) -> None:
    """Signal (or, without a handler where allowed, requeue) the victims of new intents, each
    (victim, need) at most once, ever."""
    now = snap.taken_at
    pc = config.preemption
    done = store.preempted_pairs()  # (victim, need) -> when it was signalled
    busy = {r.victim_job_id for r in store.preemptions(open_only=True)}
    for intent in intents:
        report.planned.append(intent)
        for victim_id in intent.victims:
            victim = snap.job(victim_id)
            if victim is None or not victim.state.active or victim_id in busy:
                continue
            if (victim_id, intent.need) in done:
                continue  # never twice for one need
            kind, _ = resume_kind(victim, config)
            if kind not in (RESUME_CHECKPOINT, RESUME_REQUEUE):
                continue  # the planner offers none of these; never touch a job that did not opt in
            if dry_run:
                (report.signalled if kind == RESUME_CHECKPOINT else report.requeued).append(victim_id)
                continue
            row_id = store.begin_preemption(victim_id, intent.need, now, victim.restarts, intent.reason)
            busy.add(victim_id)
            if kind == RESUME_REQUEUE:
                store.set_preemption_state(row_id, "requeueing", now, "no checkpoint handler declared: "
                                                                    "requeued without a signal")
                _requeue(store, backend, row_id, victim_id, intent.need, now,
                         give_up_at=now + pc.requeue_timeout_seconds, report=report)
                continue
            try:
                where = _signal(backend, victim, pc.signal)
            except JobNotFoundError:
                store.set_preemption_state(row_id, "finished", now, "the victim was gone at signal time")
                report.closed.append((victim_id, "finished"))
                continue
            except SlurmUnavailableError as e:
                # The signal may or may not have arrived: the row stays "signalling", which counts
                # as signalled; the requeue follows after the grace period.
                log.warning("signal to job %d not answered (%s); treated as sent", victim_id, e)
                report.signalled.append(victim_id)
                continue
            except SlurmError as e:
                _refuse(store, row_id, victim_id, now, f"Slurm refused the signal: {e}", report)
                continue
            store.set_preemption_state(row_id, "signalled", now, f"{pc.signal} sent to {where}")
            report.signalled.append(victim_id)
            log.info("signalled job %d (%s to %s) for job %d: %s", victim_id, pc.signal, where, intent.need,
                     intent.reason)


__all__ = ["PREEMPTION_OPEN_STATES", "REFUSED", "PreemptionIntent", "PreemptionReport", "advance_open",
           "refused_runs", "start"]
