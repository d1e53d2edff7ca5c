"""User hints in ``--comment``: ``dl:class=serve``, ``dl:deadline=2026-11-21T05:00``, ``dl:ckpt=0``.

Several pairs may follow one ``dl:`` (``dl:class=train;deadline=1763700000``) or each carry their
own prefix. Hints are claims, not facts: the rules check them.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from .tags import MAX_SOFT_STEPS

_HINT = re.compile(r"(?:^|[\s,])dl:(\S+)")


def parse_hints(comment: str | None) -> dict[str, str]:
    """``key -> value`` for every ``dl:key=value`` in the comment (first occurrence wins)."""
    return read_hints(comment)[0]


def repeated_hints(comment: str | None) -> dict[str, list[str]]:
    """``key -> values`` for every hint given more than once with different values (the first
    is the one read): a second ``dl:deadline`` is a claim the filter would otherwise ignore."""
    return read_hints(comment)[1]


def read_hints(comment: str | None) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The comment's hints in one reading: (:func:`parse_hints`, :func:`repeated_hints`)."""
    seen: dict[str, list[str]] = {}
    if comment:
        for m in _HINT.finditer(comment):
            for pair in m.group(1).split(";"):
                key, sep, value = pair.partition("=")
                key = key.strip().lower()
                if sep and key:
                    values = seen.setdefault(key, [])
                    if value.strip() not in values:
                        values.append(value.strip())
    return {k: v[0] for k, v in seen.items()}, {k: v for k, v in seen.items() if len(v) > 1}


CKPT_BATCH = "batch"
CKPT_STEPS = "steps"
CKPT_OFF = "off"
_CKPT_VALUES = {
    "1": CKPT_BATCH,
    "yes": CKPT_BATCH,
    "true": CKPT_BATCH,
    "batch": CKPT_BATCH,
    "steps": CKPT_STEPS,
    "step": CKPT_STEPS,
    "0": CKPT_OFF,
    "no": CKPT_OFF,
    "false": CKPT_OFF,
    "off": CKPT_OFF,
}


def parse_ckpt(text: str) -> str | None:
    """What a ``dl:ckpt=`` hint declares: ``batch`` (the batch script traps USR2, as with
    ``--signal=B:USR2@N``), ``steps`` (the job's srun steps trap it, as with ``--signal=USR2@N``),
    ``off``; ``None`` for a value that means none of these."""
    return _CKPT_VALUES.get(text.strip().lower())


def parse_deadline(text: str) -> int | None:
    """Unix seconds from ``1763700000`` or an ISO time (``2026-11-21T05:00``, UTC unless it says)."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 11:
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        ts = int(dt.timestamp())
    except (OverflowError, OSError, ValueError):
        return None
    return ts if ts >= 0 else None


_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_RELATIVE = re.compile(r"^(?:now\+)?(\d{1,6}(?:\.\d{1,3})?)(s|m|min|h|d)$")
_VALUE = re.compile(r"^\d{1,9}(?:\.\d{1,6})?$")


def parse_when(text: str, now: float) -> int | None:
    """A time as ``dl:deadline`` and each step of ``dl:deadline_steps`` write it: after ``now``
    (``90m``, ``4h``, ``2d``, also ``now+4h``), or as :func:`parse_deadline` reads it."""
    when = text.strip().lower()
    m = _RELATIVE.match(when)
    if m:
        return int(now + float(m.group(1)) * _UNITS[m.group(2)])
    return parse_deadline(when.upper() if "t" in when else when)


def parse_deadline_steps(text: str, now: float) -> list[tuple[int, float]]:
    """Soft-deadline steps from a ``dl:deadline_steps=`` hint: ``WHEN=VALUE`` items joined by
    ``,`` (``4h=10,6h=5,10h=2``). ``WHEN`` is a time after submission (``90m``, ``4h``, ``2d``,
    also written ``now+4h``) or a time as for ``dl:deadline`` (ISO, UTC unless it says, or Unix
    seconds); ``VALUE`` a positive number. Returns (Unix seconds, value) in the order written.
    Raises ValueError with what is wrong; the caller checks the order and the site's caps."""
    steps = []
    for item in text.split(","):
        when, sep, value = item.strip().rpartition("=")
        when = when.strip().lower()
        if not sep or not when or not _VALUE.match(value.strip()):
            raise ValueError(f"{item.strip()[:40]!r} is not WHEN=VALUE with VALUE a number")
        at = parse_when(when, now)
        if at is None:
            raise ValueError(
                f"cannot read the time {when[:30]!r} (4h, 90m, 2d, or YYYY-MM-DDTHH:MM)"
            )
        steps.append((at, float(value)))
    return steps


def when_text(ts: float) -> str:
    """Unix seconds as an ISO time in UTC (the seconds themselves when out of range)."""
    try:
        return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return str(int(ts))


def soft_steps(text: str, now: float) -> list[tuple[int, float]]:
    """The filter's reading of a ``dl:deadline_steps=`` hint: times rising, values falling and
    above 0, at most :data:`MAX_SOFT_STEPS`; each value is recorded as its share of the first
    (the top is worth what a strict deadline is: declaring larger numbers buys nothing).
    Raises ValueError with what is wrong."""
    steps = parse_deadline_steps(text, now)
    if len(steps) > MAX_SOFT_STEPS:
        raise ValueError(f"{len(steps)} steps; at most {MAX_SOFT_STEPS}")
    for i, (t, _) in enumerate(steps, start=1):
        if t <= now:
            raise ValueError(f"step {i} ({when_text(t)}) is not after the submission")
    top = steps[0][1]
    if top <= 0:
        raise ValueError("the values must be above 0")
    out = [(t, round(v / top, 4)) for t, v in steps]
    for i, ((t0, v0), (t1, v1)) in enumerate(zip(out, out[1:]), start=2):
        if t1 <= t0:
            raise ValueError(f"the times must increase (step {i} is not after step {i - 1})")
        if not v1 < v0:
            raise ValueError("the values must fall from one step to the next")
    if out[-1][1] <= 0:
        raise ValueError("the values must be above 0")
    return out
