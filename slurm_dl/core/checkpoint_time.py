"""How long a job takes to checkpoint, learnt from its past preemptions (pure).

The prioritizer sees each preemption from the outside: when it signalled the job, and when the
job had saved and exited (or requeued itself), or that the job still ran when its wait was over
and slurm-dl requeued it, killing a save in progress. The first is a measurement of the job's
checkpoint time, the second a lower bound. :func:`learn` folds each into one estimate per job;
:func:`wait_seconds` is how long the next preemption waits: the job's declared lead, or longer
when its past checkpoints took longer, never past the site's ``max_checkpoint_wait_seconds``.
The words for a preemption that lost work (:func:`lost_work_note`) and for a job that requeued
itself after slurm-dl had stopped waiting (:func:`late_requeue_note`) live here too, so that the
record, ``explain`` and ``dlsubmit status`` say the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MARGIN = 1.25
"""The next wait is the learnt checkpoint time times this, plus :data:`SLACK_S`."""
SLACK_S = 5.0
LOWER_BOUND_FACTOR = 2.0
"""A save still running after N s is taken to need at least this many times N."""

LOST_WORK = "requeued while it still ran"
"""How every lost-work note begins (``explain`` and the metrics recognise it by this)."""
LATE_REQUEUE = "it requeued itself after slurm-dl had stopped waiting"
"""How every note on a job that requeued itself after being let go begins."""


@dataclass(frozen=True, slots=True)
class CheckpointObservation:
    """One preemption as the prioritizer saw it. ``seconds`` from the signal; ``finished``:
    the job had saved and exited (or requeued itself) by then; otherwise it still ran and was
    requeued, so its checkpoint needs more than ``seconds``."""

    seconds: float
    finished: bool


def learn(previous: float | None, obs: CheckpointObservation) -> float:
    """The job's checkpoint time after ``obs`` (``previous``: the estimate before, None: none).

    A measurement slower than the estimate replaces it at once; a faster one halves the gap
    (one quick save does not make the next wait too short). A lower bound raises the estimate
    to :data:`LOWER_BOUND_FACTOR` times it."""
    seconds = max(0.0, float(obs.seconds))
    if not obs.finished:
        return max(previous or 0.0, LOWER_BOUND_FACTOR * seconds)
    if previous is None or seconds >= previous:
        return seconds
    return (previous + seconds) / 2.0


def wanted_lead(checkpoint_s: float) -> float:
    """The lead a job whose checkpoint takes ``checkpoint_s`` should have (rounded up to 10 s)."""
    return float(10 * math.ceil((checkpoint_s * MARGIN + SLACK_S) / 10.0))


def wait_seconds(lead_s: float, checkpoint_s: float | None, site_max_s: float) -> float:
    """Seconds a preemption waits between the signal and slurm-dl's requeue: the job's lead
    ``lead_s``, or the lead its learnt ``checkpoint_s`` asks (:func:`wanted_lead`) when that is
    longer, at most ``site_max_s`` (the lead itself is always waited)."""
    if checkpoint_s is None:
        return lead_s
    return max(lead_s, min(wanted_lead(checkpoint_s), site_max_s))


def lost_work_note(after_s: float, checkpoint_s: float | None) -> str:
    """The record of a requeue that came ``after_s`` after the signal while the job still ran.
    ``checkpoint_s``: its checkpoint time as learnt before (None: not known)."""
    if checkpoint_s is not None and checkpoint_s > after_s + 1.0:
        when = f", about {checkpoint_s - after_s:.0f} s before it would have finished"
    else:
        when = ""
    need = wanted_lead(max(checkpoint_s or 0.0, LOWER_BOUND_FACTOR * after_s))
    return (
        f"{LOST_WORK} (requeued {after_s:.0f} s after the signal{when}): a checkpoint still "
        "being written was cut and the work since its last checkpoint was lost, unless it had "
        "saved and went on running (a job that has saved should exit or requeue itself); give "
        f"it a lead of at least {need:.0f} s (--signal=SIG@{need:.0f})"
    )


def late_requeue_note(after_s: float, why_let_go: str) -> str:
    """The record of a job let go (``abandoned``) that requeued itself ``after_s`` after the
    signal: it gave up its GPUs although nothing waited for them any more."""
    return (
        f"{LATE_REQUEUE} ({why_let_go}): its checkpoint took {after_s:.0f} s after the signal, "
        "longer than its lead; it gave up its GPUs and resumes from that checkpoint"
    )


def is_lost_work(note: str | None) -> bool:
    return bool(note) and str(note).startswith(LOST_WORK)


def is_late_requeue(note: str | None) -> bool:
    return bool(note) and str(note).startswith(LATE_REQUEUE)
