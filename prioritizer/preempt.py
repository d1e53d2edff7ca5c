"""Preemption by requeue, as a write-ahead state machine over the store's preemption rows.

One row per (victim, need). Each step is committed BEFORE the Slurm call it announces:

    signalling --the job's own signal, where its --signal asked for it--> signalled
    signalled  --still running when its lead time is over--> requeueing --scontrol requeue--> requeued
    signalled  --it requeued itself (submitit, Lightning, a handler)--> requeued-self
    signalled  --it ended on the signal (saved and exited, or died of it)--> requeued / died
               (requeued by slurm-dl either way: it stopped for a preemption, not because it was done)
    signalled  --cancelled by its owner, timed out, or gone--> finished
    signalled  --lead time over, still running, but the waiting job started or left--> abandoned
    abandoned  --it requeued itself later (a slow checkpoint)--> requeued-self (its GPUs lost)
    any step   --Slurm refused the signal or the requeue--> refused (this run is never a victim again)
    signalling --the job was between states (a requeue or an end under way)--> skipped

The lead time is the job's contract with its client: the ``@N`` of its own ``--signal`` (the
filter reads it from the script: submitit and Lightning say 90 s), at most the site's
``max_lead_seconds``; the site's ``grace_seconds`` for a job that declared none. A job whose
past preemptions took longer to checkpoint is waited for longer (its checkpoint time is learnt
from them, :mod:`slurm_dl.core.checkpoint_time`), at most ``max_checkpoint_wait_seconds``. A job
that requeues itself within it is never requeued again. A requeue that finds the job still
running after the wait kills its save: the record says that work was lost, and the next wait
is longer. A job let go after its wait (``abandoned``) is watched until the longest wait is
over: when it requeues itself late, the record says so (Slurm took its GPUs all the same).

Only jobs that can resume are victims (``slurm_dl.core.preemption.resume_kind``): a job that declared a
checkpoint handler gets the signal where it asked for it (its batch shell, or its steps); a job
requeued without a handler (only where the site allows it) starts at ``requeueing`` and is never
signalled.

A Slurm refusal is local to its row: the row closes as ``refused`` with Slurm's message (shown
by ``explain``), and the cycle goes on. A call Slurm refuses *for now* (the job between states)
is not retried inside the cycle: the signal is skipped, the requeue tried again next cycle. A
requeue that cannot reach slurmctld is retried every cycle until ``lead + requeue_timeout_seconds``
after the signal, then given up as ``refused``.

A daemon killed with -9 between a commit and its call finds the row on restart and never repeats
the signal: a ``signalling`` row counts as signalled (at worst the victim gets no signal and is
requeued after its lead time), a ``requeueing`` row is requeued again only if the victim is
still running with the restart count it had when signalled. A (victim, need) pair ever recorded
is never preempted again, and a run that was signalled or requeued is no victim again until a
later snapshot shows it running anew (:func:`excluded_runs`). Waiting spans cycles: the cycle
never sleeps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from slurm_dl.core.checkpoint_time import (
    CheckpointObservation,
    learn,
    late_requeue_note,
    lost_work_note,
    wait_seconds,
)
from slurm_dl.core.config import PreemptionConfig, SiteConfig
from slurm_dl.core.errors import (
    JobBusyError,
    JobNotFoundError,
    JobPendingError,
    SlurmError,
    SlurmUnavailableError,
)
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import ClusterSnapshot, Job, JobState
from slurm_dl.core.preemption import RESUME_CHECKPOINT, RESUME_REQUEUE, resume_kind
from slurm_dl.slurm.protocol import JobEnd
from slurm_dl.store import PREEMPTION_OPEN_STATES, Store

log = logging.getLogger("slurm_dl.prioritizer")


REFUSED = "refused"
"""A closed row whose signal or requeue Slurm refused: that run of the victim is left alone."""


class PreemptionBackend(Protocol):
    def signal_batch(self, job_id: int, signal: str) -> None: ...
    def signal_steps(self, job_id: int, signal: str) -> None: ...
    def requeue(self, job_id: int) -> None: ...
    def job_end(self, job_id: int) -> JobEnd: ...


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
    requeued_unsignalled: list[int] = field(
        default_factory=list
    )  # new victims requeued without a signal
    observed: list[tuple[int, CheckpointObservation]] = field(
        default_factory=list
    )  # how long victims took to checkpoint (see slurm_dl.core.checkpoint_time)
    lost: list[int] = field(default_factory=list)  # requeued before their checkpoint finished


def refused_runs(rows) -> frozenset[tuple[int, int]]:
    """(victim, restart count) of runs whose preemption Slurm refused: never victims again."""
    return frozenset((r.victim_job_id, r.restarts_at_signal) for r in rows if r.state == REFUSED)


def excluded_runs(rows) -> frozenset[tuple[int, int]]:
    """(victim, restart count) of runs that are no victim: Slurm refused their preemption, or
    they were signalled or requeued (a later snapshot shows a requeued job's next run with a
    higher restart count, and that run may be a victim again). A run let go after its lead
    time (``abandoned``) may be picked again for another job."""
    return frozenset(
        (r.victim_job_id, r.restarts_at_signal) for r in rows if r.state != "abandoned"
    )


def lead_time(victim: Job | None, pc: PreemptionConfig) -> float:
    """Seconds between the signal and the requeue: the job's own ``--signal`` lead (its ``@N``),
    at most the site's ``max_lead_seconds``; the site's ``grace_seconds`` without one."""
    if victim is not None and victim.lead_s is not None:
        return min(float(victim.lead_s), pc.max_lead_seconds)
    return pc.grace_seconds


def wait_time(victim: Job | None, pc: PreemptionConfig, checkpoint_s: float | None) -> float:
    """Seconds a preemption of ``victim`` waits before slurm-dl requeues it: its lead time, or
    longer when its learnt ``checkpoint_s`` asks it (at most ``max_checkpoint_wait_seconds``)."""
    return wait_seconds(lead_time(victim, pc), checkpoint_s, pc.max_checkpoint_wait_seconds)


def _watch_s(pc: PreemptionConfig) -> float:
    """How long after its signal a let-go victim is still watched for a late self-requeue."""
    longest = max(pc.max_lead_seconds, pc.grace_seconds, pc.max_checkpoint_wait_seconds)
    return longest + pc.requeue_timeout_seconds


def learn_checkpoints(ledger: Ledger, report: PreemptionReport) -> list[str]:
    """Fold the checkpoint times ``report`` observed into the victims' ledger records, count
    their lost work; returns the account of each victim that lost work (for the metrics)."""
    for victim, obs in report.observed:
        rec = ledger.jobs.get(victim)
        if rec is not None:
            rec.checkpoint_s = learn(rec.checkpoint_s, obs)
            ledger.revision += 1
    accounts = []
    for victim in report.lost:
        rec = ledger.jobs.get(victim)
        if rec is not None:
            rec.lost_work += 1
            ledger.revision += 1
        accounts.append(rec.account if rec is not None else "")
    return accounts


def advance_open(
    store: Store,
    backend: PreemptionBackend,
    snap: ClusterSnapshot,
    pc: PreemptionConfig,
    report: PreemptionReport,
    *,
    dry_run: bool = False,
    checkpoint_s: Mapping[int, float] | None = None,
) -> None:
    """Move every open preemption one step on, from what the snapshot shows. ``checkpoint_s``:
    victims' learnt checkpoint times (the ledger's), which lengthen their wait."""
    now = snap.taken_at
    learnt = checkpoint_s or {}
    _watch_let_go(store, snap, pc, report, dry_run)
    for row in store.preemptions(open_only=True):
        victim = snap.job(row.victim_job_id)
        need = snap.job(row.need_job_id)
        if victim is not None and (
            victim.state is JobState.PENDING or victim.restarts > row.restarts_at_signal
        ):
            if (
                row.state == "requeueing"
            ):  # our requeue went through (its commit may have been lost)
                _close(
                    store,
                    row.id,
                    "requeued",
                    now,
                    "requeued by slurm-dl",
                    report,
                    row.victim_job_id,
                    dry_run,
                )
            else:
                after = now - row.signalled_at
                report.observed.append((row.victim_job_id, CheckpointObservation(after, True)))
                _close(
                    store,
                    row.id,
                    "requeued-self",
                    now,
                    f"the job requeued itself {after:.0f} s after the signal",
                    report,
                    row.victim_job_id,
                    dry_run,
                )
            continue
        learnt_s = learnt.get(row.victim_job_id)
        lead = wait_time(victim, pc, learnt_s)
        give_up_at = row.signalled_at + lead + pc.requeue_timeout_seconds
        if victim is None or victim.state.finished:
            _ended(store, backend, row, now, give_up_at, report, dry_run)
            continue
        if victim.state is JobState.COMPLETING:
            report.waiting.append(row.victim_job_id)  # ending now: its end state shows next cycle
            continue
        if row.state != "requeueing" and now - row.signalled_at < lead:
            report.waiting.append(row.victim_job_id)
            continue
        is_move = row.need_job_id == row.victim_job_id  # to a faster GPU type: nothing else waits
        if row.state != "requeueing" and not is_move and (need is None or not need.pending):
            why = (
                "the waiting job left the queue"
                if need is None or need.state.finished
                else "the waiting job started"
            )
            _close(
                store,
                row.id,
                "abandoned",
                now,
                f"{why}; the victim kept running after its {lead:g} s lead time, not requeued",
                report,
                row.victim_job_id,
                dry_run,
            )
            continue
        if dry_run:
            report.requeued.append(row.victim_job_id)
            continue
        if row.state != "requeueing":
            store.set_preemption_state(
                row.id, "requeueing", now, f"lead time {lead:g} s over, still running; requeueing"
            )
        lost = None
        if victim.checkpointable:  # signalled and still running: its save had not finished
            lost = ("requeued", lost_work_note(now - row.signalled_at, learnt_s))
        _requeue(
            store,
            backend,
            row.id,
            row.victim_job_id,
            row.need_job_id,
            now,
            give_up_at=give_up_at,
            report=report,
            done=lost,
        )
        if lost is not None and row.victim_job_id in report.requeued:
            report.lost.append(row.victim_job_id)
            after = CheckpointObservation(now - row.signalled_at, False)
            report.observed.append((row.victim_job_id, after))


def _watch_let_go(
    store: Store,
    snap: ClusterSnapshot,
    pc: PreemptionConfig,
    report: PreemptionReport,
    dry_run: bool,
) -> None:
    """A victim let go after its wait (``abandoned``) may still requeue itself when its slow
    checkpoint ends (submitit, Lightning): Slurm then takes its GPUs all the same. Each such
    row, while watched, becomes ``requeued-self`` when the snapshot shows its victim requeued
    (pending, or a higher restart count), unless a later preemption of it owns that requeue."""
    now = snap.taken_at
    rows = store.preemptions(states=("abandoned",), since=now - _watch_s(pc))
    if not rows:
        return
    latest = {r.victim_job_id: r.id for r in store.preemptions(open_only=True)}
    for row in rows:
        victim = snap.job(row.victim_job_id)
        if victim is None or row.id < latest.get(row.victim_job_id, row.id):
            continue
        if not (victim.state is JobState.PENDING or victim.restarts > row.restarts_at_signal):
            continue
        after = now - row.signalled_at
        report.observed.append((row.victim_job_id, CheckpointObservation(after, True)))
        why = "the waiting job had started or left"
        _close(
            store,
            row.id,
            "requeued-self",
            now,
            late_requeue_note(after, why),
            report,
            row.victim_job_id,
            dry_run,
        )


def _ended(
    store: Store,
    backend: PreemptionBackend,
    row,
    now: float,
    give_up_at: float,
    report: PreemptionReport,
    dry_run: bool,
) -> None:
    """The victim left the queue after the signal: what became of it, from Slurm's record."""
    victim = row.victim_job_id
    try:
        end = backend.job_end(victim)
    except JobNotFoundError:
        _close(
            store,
            row.id,
            "finished",
            now,
            "the victim left Slurm before its end was seen",
            report,
            victim,
            dry_run,
        )
        return
    except SlurmError as e:  # unreachable, or its record unreadable for now: look again next cycle
        if now < give_up_at:
            report.waiting.append(victim)
            return
        _close(
            store,
            row.id,
            "finished",
            now,
            f"the victim's end could not be read: {e}",
            report,
            victim,
            dry_run,
        )
        return
    if end.state is JobState.PENDING or end.restarts > row.restarts_at_signal:
        after = now - row.signalled_at
        report.observed.append((victim, CheckpointObservation(after, True)))
        _close(
            store,
            row.id,
            "requeued-self",
            now,
            f"the job requeued itself {after:.0f} s after the signal",
            report,
            victim,
            dry_run,
        )
        return
    if not end.state.finished:
        report.waiting.append(victim)  # running or ending: the snapshot passed it by
        return
    if end.state is JobState.CANCELLED or end.state is JobState.TIMEOUT:
        how = "cancelled" if end.state is JobState.CANCELLED else "at its time limit"
        _close(
            store,
            row.id,
            "finished",
            now,
            f"it ended {how} after the signal; not requeued",
            report,
            victim,
            dry_run,
        )
        return
    if end.end_time is not None and end.end_time < row.signalled_at - 1.0:
        _close(
            store,
            row.id,
            "finished",
            now,
            "it ended before the signal reached it",
            report,
            victim,
            dry_run,
        )
        return
    outcome = "died" if end.died else "requeued"
    if not end.died and row.state != "requeueing":
        ended_at = end.end_time if end.end_time is not None else now
        after = max(0.0, ended_at - row.signalled_at)
        report.observed.append((victim, CheckpointObservation(after, True)))
    sig = f", signal {end.exit_signal}" if end.exit_signal else f", exit {end.exit_code}"
    how = "died on the signal" if end.died else "saved and exited on the signal"
    note = f"it {how} ({end.state.value}{sig}) without requeueing itself; requeued by slurm-dl to resume"
    if dry_run:
        report.requeued.append(victim)
        return
    if row.state != "requeueing":
        store.set_preemption_state(
            row.id, "requeueing", now, f"it {how} ({end.state.value}{sig}); requeueing"
        )
    _requeue(
        store,
        backend,
        row.id,
        victim,
        row.need_job_id,
        now,
        give_up_at=give_up_at,
        report=report,
        done=(outcome, note),
        refused_state=outcome if end.died else "finished",
    )


def _requeue(
    store: Store,
    backend: PreemptionBackend,
    row_id: int,
    victim: int,
    need: int,
    now: float,
    *,
    give_up_at: float,
    report: PreemptionReport,
    done: tuple[str, str] | None = None,
    refused_state: str = REFUSED,
) -> None:
    """``scontrol requeue`` one victim; every Slurm answer ends in a recorded state (or, for an
    answer that means "not now", in another try next cycle)."""
    try:
        backend.requeue(victim)
    except JobNotFoundError:
        store.set_preemption_state(row_id, "finished", now, "the victim was gone at requeue time")
        report.closed.append((victim, "finished"))
        return
    except JobPendingError:  # it requeued itself between the snapshot and the call
        store.set_preemption_state(
            row_id, "requeued-self", now, "the job had requeued itself (Slurm: pending)"
        )
        report.closed.append((victim, "requeued-self"))
        return
    except (JobBusyError, SlurmUnavailableError) as e:
        if now < give_up_at:
            log.info(
                "requeue of job %d for job %d not possible now, tried again next cycle: %s",
                victim,
                need,
                e,
            )
            report.waiting.append(victim)
            return
        _refuse(
            store,
            row_id,
            victim,
            now,
            f"requeue not possible until the timeout: {e}",
            report,
            refused_state,
        )
        return
    except SlurmError as e:
        _refuse(
            store, row_id, victim, now, f"Slurm refused the requeue: {e}", report, refused_state
        )
        return
    state, note = done or ("requeued", f"requeued by slurm-dl for job {need}")
    store.set_preemption_state(row_id, state, now, note)
    report.requeued.append(victim)
    log.info("requeued job %d for job %d (%s)", victim, need, note)


def _refuse(
    store: Store,
    row_id: int,
    victim: int,
    now: float,
    note: str,
    report: PreemptionReport,
    state: str = REFUSED,
) -> None:
    suffix = "; not preempted again in this run" if state == REFUSED else ""
    store.set_preemption_state(row_id, state, now, note + suffix)
    if state == REFUSED:
        report.refused.append((victim, note))
    report.closed.append((victim, state))
    log.warning("job %d: %s%s", victim, note, suffix)


def _close(store, row_id, state, now, note, report, victim, dry_run) -> None:
    if not dry_run:
        store.set_preemption_state(row_id, state, now, note)
    report.closed.append((victim, state))


def send_checkpoint_signal(backend: PreemptionBackend, victim: Job, signal: str) -> str:
    """Send the preemption signal where the job asked for it; returns where it went."""
    if victim.signal_target == "steps":
        backend.signal_steps(victim.job_id, signal)
        return "the job's steps"
    backend.signal_batch(victim.job_id, signal)
    return "the batch shell"


def start(
    store: Store,
    backend: PreemptionBackend,
    snap: ClusterSnapshot,
    intents: Sequence[PreemptionIntent],
    config: SiteConfig,
    report: PreemptionReport,
    *,
    dry_run: bool = False,
    excluded: frozenset[tuple[int, int]] = frozenset(),
    checkpoint_s: Mapping[int, float] | None = None,
) -> None:
    """Signal (or, without a handler where allowed, requeue) the victims of new intents, each
    (victim, need) at most once, ever, and each run at most once (``excluded``: runs already
    signalled, requeued or refused, see :func:`excluded_runs`)."""
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
            if (victim_id, intent.need) in done or (victim_id, victim.restarts) in excluded:
                continue  # never twice for one need, never twice in one run
            kind, _ = resume_kind(victim, config)
            if kind not in (RESUME_CHECKPOINT, RESUME_REQUEUE):
                continue  # the planner offers none of these; never touch a job that did not opt in
            if dry_run:
                (report.signalled if kind == RESUME_CHECKPOINT else report.requeued).append(
                    victim_id
                )
                continue
            row_id = store.begin_preemption(
                victim_id, intent.need, now, victim.restarts, intent.reason
            )
            busy.add(victim_id)
            if kind == RESUME_REQUEUE:
                store.set_preemption_state(
                    row_id,
                    "requeueing",
                    now,
                    "no checkpoint handler declared: requeued without a signal",
                )
                report.requeued_unsignalled.append(victim_id)
                _requeue(
                    store,
                    backend,
                    row_id,
                    victim_id,
                    intent.need,
                    now,
                    give_up_at=now + pc.requeue_timeout_seconds,
                    report=report,
                )
                continue
            signal = victim.preempt_signal or pc.signal
            try:
                where = send_checkpoint_signal(backend, victim, signal)
            except JobNotFoundError:
                store.set_preemption_state(
                    row_id, "finished", now, "the victim was gone at signal time"
                )
                report.closed.append((victim_id, "finished"))
                continue
            except JobBusyError as e:  # between states (ending, or a requeue under way): not now
                store.set_preemption_state(
                    row_id, "skipped", now, f"not signalled, the job was between states: {e}"
                )
                report.closed.append((victim_id, "skipped"))
                continue
            except SlurmUnavailableError as e:
                # The signal may or may not have arrived: the row stays "signalling", which counts
                # as signalled; the requeue follows after the lead time.
                log.warning("signal to job %d not answered (%s); treated as sent", victim_id, e)
                report.signalled.append(victim_id)
                continue
            except SlurmError as e:
                _refuse(store, row_id, victim_id, now, f"Slurm refused the signal: {e}", report)
                continue
            lead = wait_time(victim, pc, (checkpoint_s or {}).get(victim_id))
            store.set_preemption_state(
                row_id,
                "signalled",
                now,
                f"{signal} sent to {where}; requeued after {lead:g} s unless it requeues itself",
            )
            report.signalled.append(victim_id)
            log.info(
                "signalled job %d (%s to %s, lead %g s) for job %d: %s",
                victim_id,
                signal,
                where,
                lead,
                intent.need,
                intent.reason,
            )


__all__ = [
    "PREEMPTION_OPEN_STATES",
    "REFUSED",
    "PreemptionIntent",
    "PreemptionReport",
    "advance_open",
    "excluded_runs",
    "learn_checkpoints",
    "lead_time",
    "wait_time",
    "refused_runs",
    "send_checkpoint_signal",
    "start",
]
