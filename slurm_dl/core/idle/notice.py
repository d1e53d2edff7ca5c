"""Pure: the short notes the idle-allocation policy leaves in a job's comment.

The user's own comment is kept (the job_submit filter read its ``dl:deadline=…`` hints at
submission; users and their tools read it too). slurm-dl appends ONE note in brackets,
``[slurm-dl: …]``, and replaces its older note rather than piling them up. Slurm refuses
comments longer than :data:`COMMENT_MAX_CHARS` bytes, so the note is shortened to fit; when the
user's comment leaves no room for a useful note, there is no note (:func:`comment_with_note`
returns ``None``) and the log line has to do.
"""

from __future__ import annotations

import re
import time

from ..config import TelemetryConfig
from .decide import IdleDecision, Verdict

COMMENT_MAX_CHARS = 1024
"""Slurm 22.05 refuses a job comment over 1024 bytes (checked on the testbed: 1025 gives "… too long")."""

NOTE_OPEN = "[slurm-dl: "
MIN_NOTE_CHARS = 24
"""A note cut shorter than this says nothing useful."""

_CANCELLED, _DEPRIORITIZED = "cancelled", "deprioritized"

_NOTE = re.compile(r"\s*\[slurm-dl: [^\]]*\]")

_FOLLOW_UP = {
    "cancel": "the job will be cancelled",
    "deprioritize": "its priority will be lowered and it will be requeued first when GPUs are needed",
}
_LOWERED = "its priority will be lowered"
"""The follow-up for a job that did not opt in to preemption: it is never requeued or cancelled."""


def strip_note(comment: str | None) -> str:
    """The comment without slurm-dl's notes (the user's own text)."""
    return _NOTE.sub("", comment or "").rstrip()


def current_note(comment: str | None) -> str | None:
    """The text of slurm-dl's note in a comment, or None."""
    found = _NOTE.findall(comment or "")
    if not found:
        return None
    return found[-1].strip()[len(NOTE_OPEN) : -1]


def comment_with_note(
    comment: str | None, note: str, max_chars: int = COMMENT_MAX_CHARS
) -> str | None:
    """The user's comment plus ``[slurm-dl: note]`` (any older note replaced), at most ``max_chars``;
    None when the user's comment leaves no room for :data:`MIN_NOTE_CHARS` of note."""
    user = strip_note(comment)
    sep = " " if user else ""
    room = max_chars - _bytes(user) - len(sep) - len(NOTE_OPEN) - 1
    if room < min(MIN_NOTE_CHARS, _bytes(note)):
        return None
    text = note
    if _bytes(text) > room:
        cut = text.encode()[: room - 3].decode(errors="ignore").rstrip()
        text = cut + "..."
    return f"{user}{sep}{NOTE_OPEN}{text}]"


def _bytes(text: str) -> int:
    return len(text.encode())


def _utc(t: float | None) -> str:
    if t is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def _idle_for(decision: IdleDecision) -> str:
    return f"GPUs idle {decision.idle_minutes:.0f} min (since {_utc(decision.idle_since)})"


def warning_note(decision: IdleDecision, cfg: TelemetryConfig) -> str:
    """What the user reads when warned."""
    head = _idle_for(decision)
    follow = _FOLLOW_UP.get(cfg.idle_action)
    if follow is not None and not decision.opted_in:
        follow = _LOWERED
    if follow is None:
        return f"{head}; please use them or end the job"
    return f"{head}; unless they are used within {cfg.warn_grace_minutes:g} min, {follow}"


def action_note(decision: IdleDecision) -> str:
    """What the user reads once the action was taken."""
    head = _idle_for(decision)
    if decision.verdict is Verdict.CANCEL:
        return f"{_CANCELLED}: {head}"
    if not decision.opted_in:
        return f"{_DEPRIORITIZED}: {head}; its priority is lowered"
    return f"{_DEPRIORITIZED}: {head}; first to be requeued when GPUs are needed"


SHARE_HINT_MARK = "a GPU shard would do"
"""What the share hint's note (:func:`slurm_dl.core.share_hint.share_hint`) always says."""


def share_tip(comment: str | None) -> str | None:
    """slurm-dl's share hint in a job's comment, or None."""
    note = current_note(comment)
    return note if note and SHARE_HINT_MARK in note else None


def note_state(note: str | None) -> str | None:
    """What one of these notes says was done: "warned", "deprioritized", "cancelled" or None."""
    if not note:
        return None
    if note.startswith("GPUs idle"):
        return "warned"
    head = note.split(":", 1)[0]
    return head if head in (_CANCELLED, _DEPRIORITIZED) else None
