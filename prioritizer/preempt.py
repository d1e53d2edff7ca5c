"""Preemption by requeue, as a write-ahead state machine over the store's preemption rows.

One row per (victim, need). Each step is committed BEFORE the Slurm call it announces:

    signalling --signal USR2 to the batch shell--> signalled
    signalled  --grace period passed, still running--> requeueing --scontrol requeue--> requeued
    signalled  --victim ended or requeued itself--> finished / requeued
    signalled  --the waiting job started or left--> abandoned (the victim keeps running)

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

from slurm_dl.errors import JobNotFoundError
from slurm_dl.model import ClusterSnapshot, JobState
from slurm_dl.store import PREEMPTION_OPEN_STATES, Store

log = logging.getLogger("slurm_dl.prioritizer")


class PreemptionBackend(Protocol):
    def signal_batch(self, job_id: int, signal: str) -> None: ...
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


def advance_open(
    store: Store, backend: PreemptionBackend, snap: ClusterSnapshot, grace_s: float, report: PreemptionReport,
    *, dry_run: bool = False,
) -> None:
    """Move every open preemption one step on, from what the snapshot shows."""
    now = snap.taken_at
    for row in store.preemptions(open_only=True):
        victim = snap.job(row.victim_job_id)
        need = snap.job(row.need_job_id)
        if victim is None or victim.state.finished:
            _close(store, row.id, "finished", now, "the victim ended before the requeue", report, row.victim_job_id, dry_run)
            continue
        if victim.state is JobState.PENDING or victim.restarts > row.restarts_at_signal:
            _close(store, row.id, "requeued", now, "the victim left its GPUs (requeued)", report, row.victim_job_id, dry_run)
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
            try:
                backend.requeue(row.victim_job_id)
            except JobNotFoundError:
                store.set_preemption_state(row.id, "finished", now, "the victim was gone at requeue time")
                report.closed.append((row.victim_job_id, "finished"))
                continue
            store.set_preemption_state(row.id, "requeued", now, f"requeued for job {row.need_job_id}")
            report.requeued.append(row.victim_job_id)
            log.info("requeued job %d for job %d", row.victim_job_id, row.need_job_id)
        else:
            report.waiting.append(row.victim_job_id)


def _close(store, row_id, state, now, note, report, victim, dry_run) -> None:
    if not dry_run:
        store.set_preemption_state(row_id, state, now, note)
    report.closed.append((victim, state))


def start(
    store: Store, backend: PreemptionBackend, snap: ClusterSnapshot, intents: Sequence[PreemptionIntent],
    signal: str, report: PreemptionReport, *, dry_run: bool = False,
) -> None:
    """Signal the victims of new intents, each (victim, need) at most once, ever."""
    now = snap.taken_at
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
            if dry_run:
                report.signalled.append(victim_id)
                continue
            row_id = store.begin_preemption(victim_id, intent.need, now, victim.restarts, intent.reason)
            busy.add(victim_id)
            try:
                backend.signal_batch(victim_id, signal)
            except JobNotFoundError:
                store.set_preemption_state(row_id, "finished", now, "the victim was gone at signal time")
                continue
            store.set_preemption_state(row_id, "signalled", now, f"{signal} sent to the batch shell")
            report.signalled.append(victim_id)
            log.info("signalled job %d (%s) for job %d: %s", victim_id, signal, intent.need, intent.reason)



__all__ = ["PREEMPTION_OPEN_STATES", "PreemptionIntent", "PreemptionReport", "advance_open", "start"]
