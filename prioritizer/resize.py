"""Resizing elastic jobs, as a write-ahead state machine over the store's resize rows.

Slurm cannot change a running job's size, only a pending one's. So a running elastic job is
resized by checkpoint and requeue, each step committed BEFORE the Slurm call it announces:

    signalling --its own --signal (preempt.send_checkpoint_signal)--> signalled
    signalled  --its checkpoint wait over (preempt.wait_time), or it requeued itself--> holding
    holding    --scontrol requeuehold (or hold, when it requeued itself)--> resizing
    resizing   --scontrol update NumNodes=N-N TresPerNode=gres/gpu:G--> releasing
    releasing  --scontrol release--> done

A pending elastic job is just updated (``updating`` -> ``done``; never held nor released, so a
user's own hold stays). A size Slurm refuses closes the row as ``refused`` after releasing the
job at its old size; the same resize is tried again after a back-off that doubles per refusal.
A daemon killed between any two steps finds the open row on restart and carries it on from
what the snapshot shows: every open row ends in ``releasing`` or a closed state, so no job is
ever left held. Only jobs the filter tagged elastic are ever resized.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from slurm_dl.core.config import SiteConfig
from slurm_dl.core.elastic_sizes import fits_nodes, node_shape
from slurm_dl.core.errors import JobNotFoundError, JobPendingError, SlurmError
from slurm_dl.core.model import ClusterSnapshot, Job, JobState
from slurm_dl.core.site_shape import site_shape
from slurm_dl.slurm.protocol import PendingSize
from slurm_dl.store import Store
from slurm_dl.store.models import ResizeRow
from slurm_dl.store.resizes import RESIZE_OPEN_STATES, begin_resize, resizes, set_resize_state

from .preempt import send_checkpoint_signal, wait_time

log = logging.getLogger("slurm_dl.prioritizer")

RETRY_FIRST_S = 60.0
RETRY_MAX_S = 3600.0


class ResizeBackend(Protocol):
    def signal_batch(self, job_id: int, signal: str) -> None: ...
    def signal_steps(self, job_id: int, signal: str) -> None: ...
    def requeue_hold(self, job_id: int) -> None: ...
    def hold(self, job_id: int) -> None: ...
    def resize_pending(self, job_id: int, size: PendingSize) -> None: ...
    def release(self, job_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ResizeDecision:
    """Run ``job_id`` at ``gpus`` GPUs; ``reason`` is what explain shows."""

    job_id: int
    gpus: int
    reason: str


@dataclass(slots=True)
class ResizeReport:
    started: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)


def retry_after(tries: int) -> float:
    """Seconds before a refused resize is tried again: doubling from a minute, at most an hour."""
    return min(RETRY_FIRST_S * 2 ** max(tries - 1, 0), RETRY_MAX_S)


def size_for(job: Job, gpus: int, config: SiteConfig) -> PendingSize | None:
    """The Slurm size for ``gpus`` on the job's node shape; None when it fits no shape."""
    per_node, nodes = site_shape(config).nodes_with_most_gpus.get(job.gpu_type, (0, 0))
    if not fits_nodes(gpus, per_node, nodes):
        return None
    n, g = node_shape(gpus, per_node)
    return PendingSize(gpus, nodes=n, gpus_per_node=g, gpu_type=job.gpu_type)


def _why_not(job: Job | None, d: ResizeDecision, config: SiteConfig) -> str | None:
    if job is None or not (job.pending or job.running):
        return "not in the queue"
    if job.elastic is None:
        return "not elastic: never resized"
    if not job.elastic.allows(d.gpus):
        return f"{d.gpus} GPUs is not one of its sizes ({job.elastic.text()})"
    if job.num_gpus == d.gpus:
        return "already at that size"
    if job.running and not job.checkpointable:
        return "running without a checkpoint handler"
    if size_for(job, d.gpus, config) is None:
        return f"{d.gpus} GPUs fit no node shape"
    return None


def start(
    store: Store,
    backend: ResizeBackend,
    snap: ClusterSnapshot,
    decisions: Sequence[ResizeDecision],
    config: SiteConfig,
    report: ResizeReport,
) -> None:
    """Begin the resizes ``decisions`` ask for: one open resize per job, none before a refused
    one's back-off is over."""
    now = snap.taken_at
    rows = resizes(store)
    busy = {r.job_id for r in rows if r.state in RESIZE_OPEN_STATES}
    backoff = {r.job_id: r.next_try_at for r in rows if r.state == "refused"}
    for d in decisions:
        job = snap.job(d.job_id)
        why = _why_not(job, d, config)
        if why is None and d.job_id in busy:
            why = "a resize of it is under way"
        if why is None and backoff.get(d.job_id, 0.0) > now:
            why = f"Slurm refused its last resize; tried again in {backoff[d.job_id] - now:.0f} s"
        if why is not None:
            report.skipped.append((d.job_id, why))
            continue
        tries = 1 + sum(1 for r in rows if r.job_id == d.job_id and r.state == "refused")
        size = size_for(job, d.gpus, config)
        top = job.elastic.high
        reason = f"runs at {d.gpus} of {top} GPUs: {d.reason}"
        row = ResizeRow(
            job_id=d.job_id,
            state="updating" if job.pending else "signalling",
            from_gpus=job.num_gpus,
            to_gpus=d.gpus,
            to_nodes=size.nodes or 0,
            restarts_at_start=job.restarts,
            started_at=now,
            updated_at=now,
            tries=tries,
            reason=reason,
        )
        row_id = begin_resize(store, row)
        busy.add(d.job_id)
        report.started.append(d.job_id)
        if job.pending:
            _update_pending(store, backend, row_id, job, size, now, report, tries)
            continue
        signal = job.preempt_signal or config.preemption.signal
        try:
            where = send_checkpoint_signal(backend, job, signal)
        except JobNotFoundError:
            set_resize_state(store, row_id, "finished", now, "gone at signal time")
            continue
        except SlurmError as e:  # not signalled now: the wait still runs, then the requeue
            log.warning("resize of job %d: signal not sent (%s)", d.job_id, e)
            where = "nowhere (Slurm did not take the signal)"
        set_resize_state(store, row_id, "signalled", now, f"{signal} sent to {where}; {reason}")


def advance_open(
    store: Store,
    backend: ResizeBackend,
    snap: ClusterSnapshot,
    config: SiteConfig,
    report: ResizeReport,
) -> None:
    """Move every open resize one step on (or to its end), from what the snapshot shows."""
    now = snap.taken_at
    for row in resizes(store, open_only=True):
        job = snap.job(row.job_id)
        if job is None or job.state.finished:
            set_resize_state(store, row.id, "finished", now, "the job left the queue")
            continue
        size = size_for(job, row.to_gpus, config)
        if row.state == "updating":
            _update_pending(store, backend, row.id, job, size, now, report, row.tries)
            continue
        requeued = job.state is JobState.PENDING or job.restarts > row.restarts_at_start
        if row.state in ("signalling", "signalled"):
            if not requeued and now - row.started_at < wait_time(job, config.preemption, None):
                report.waiting.append(row.job_id)
                continue
            set_resize_state(store, row.id, "holding", now, "checkpoint wait over; requeue held")
            row.state = "holding"
        if row.state == "holding":
            if not _hold(backend, job, requeued, report):
                continue
            set_resize_state(store, row.id, "resizing", now, f"held; resizing to {row.to_gpus}")
            row.state = "resizing"
        if row.state == "resizing":
            if size is None or not _resize(backend, job.job_id, size, report):
                note = "Slurm refused the size" if size else "the size fits no node shape"
                set_resize_state(
                    store,
                    row.id,
                    "releasing",
                    now,
                    f"{note}; released at its old size",
                    next_try_at=now + retry_after(row.tries),
                    to_gpus=row.from_gpus,
                )
                row.state, row.to_gpus = "releasing", row.from_gpus
                refused = True
            else:
                set_resize_state(store, row.id, "releasing", now, f"size set to {row.to_gpus}")
                row.state, refused = "releasing", False
        else:
            refused = row.to_gpus == row.from_gpus
        if row.state == "releasing":
            try:
                backend.release(job.job_id)
            except JobNotFoundError:
                set_resize_state(store, row.id, "finished", now, "gone at release time")
                continue
            except SlurmError as e:
                log.warning("release of job %d failed, tried again next cycle: %s", job.job_id, e)
                report.waiting.append(job.job_id)
                continue
            state = "refused" if refused else "done"
            set_resize_state(store, row.id, state, now, f"released ({state})")
            (report.done.append(job.job_id) if not refused else None)


def _hold(backend: ResizeBackend, job: Job, requeued: bool, report: ResizeReport) -> bool:
    """Requeue the job held (or hold it, when it requeued itself). True: it is held now."""
    if job.held or (requeued and "held" in job.state_reason.lower()):
        return True  # (22.05 shows a job requeued held as COMPLETING for a moment)
    try:
        if requeued:
            backend.hold(job.job_id)
        else:
            backend.requeue_hold(job.job_id)
    except JobPendingError:  # requeued itself since the snapshot: hold it as it is
        try:
            backend.hold(job.job_id)
        except SlurmError:
            report.waiting.append(job.job_id)
            return False
    except SlurmError as e:
        log.info("requeuehold of job %d not done now, tried again next cycle: %s", job.job_id, e)
        report.waiting.append(job.job_id)
        return False
    return True


def _resize(backend: ResizeBackend, job_id: int, size: PendingSize, report: ResizeReport) -> bool:
    try:
        backend.resize_pending(job_id, size)
    except SlurmError as e:
        report.refused.append((job_id, str(e)))
        log.warning("Slurm refused to resize job %d to %d GPUs: %s", job_id, size.gpus, e)
        return False
    return True


def _update_pending(store, backend, row_id, job, size, now, report, tries) -> None:
    """A pending job's size is updated in place (no hold, no release)."""
    if size is not None and _resize(backend, job.job_id, size, report):
        set_resize_state(store, row_id, "done", now, f"pending; size set to {size.gpus}")
        report.done.append(job.job_id)
        return
    set_resize_state(
        store,
        row_id,
        "refused",
        now,
        "Slurm refused the size; it waits at its old size",
        next_try_at=now + retry_after(tries),
    )
