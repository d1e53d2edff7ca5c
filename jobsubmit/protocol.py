"""The wire format between the Lua shim and the service: one JSON line each way.

Request: ``{"v": 1, "submit_uid": 1000, "job": {job_desc fields}}``, plus
``"shim_failures": N, "failure_mode": "accept"`` when the shim could not get an answer for N
submissions since its last answered request (the service counts them in its metrics).
Answer: ``{"v": 1, "action": "accept", "set": {...}, "notices": [...]}``,
``{"v": 1, "action": "reject", "message": "...", "code": "ESLURM_…" | 2072}`` or
``{"v": 1, "action": "error", "message": "..."}`` (the shim then follows its failure mode).

:func:`answer_line` never raises: any bytes in give one answer line out. A request that is
not a readable job description is refused (``reject``), never answered ``error``: the shim lets
a job through unchecked on ``error`` when the site's failure mode is ``accept``, so an odd job
must not be able to earn one. ``error`` is kept for a shim of another protocol version.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from slurm_dl.core.rules import FilterDecision, unreadable

PROTOCOL_VERSION = 1
"""The ``v`` of every request and answer; the Lua shim and the service must agree on it."""
MAX_REQUEST_BYTES = 1 << 20


class BadRequest(ValueError):
    pass


class VersionMismatch(BadRequest):
    """A well-formed request of another protocol version (a shim of another release)."""


def parse_request(raw: bytes) -> tuple[Mapping[str, Any], int | None]:
    """The job description and submit uid in one request line; BadRequest if malformed."""
    job, uid, _msg = _parse(raw)
    return job, uid


def _parse(raw: bytes) -> tuple[Mapping[str, Any], int | None, Mapping[str, Any]]:
    if len(raw) > MAX_REQUEST_BYTES:
        raise BadRequest(f"request of {len(raw)} bytes exceeds {MAX_REQUEST_BYTES}")
    try:
        msg = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"not JSON: {e}") from None
    if isinstance(msg, dict) and "v" in msg and msg.get("v") != PROTOCOL_VERSION:
        raise VersionMismatch(
            f"protocol version {str(msg.get('v'))[:20]!r}; this service speaks {PROTOCOL_VERSION}"
        )
    if (
        not isinstance(msg, dict)
        or msg.get("v") != PROTOCOL_VERSION
        or not isinstance(msg.get("job"), dict)
    ):
        raise BadRequest('expected an object {"v": 1, "job": {...}}')
    uid = msg.get("submit_uid")
    return msg["job"], uid if isinstance(uid, int) and not isinstance(uid, bool) else None, msg


def encode_answer(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def error_answer(message: str) -> bytes:
    return encode_answer({"v": PROTOCOL_VERSION, "action": "error", "message": message})


def answer_line(
    raw: bytes,
    decide: Callable[[Mapping[str, Any], int | None], FilterDecision],
    on_message: Callable[[Mapping[str, Any]], None] | None = None,
) -> tuple[bytes, FilterDecision | None, str | None]:
    """(answer line, the decision or None, the error text or None: what went wrong, for the
    log, also when the answer is a refusal) for one request line; ``on_message`` sees every
    well-formed request (the shim's failure count)."""
    try:
        job, uid, msg = _parse(raw)
    except VersionMismatch as e:  # the shim and the service disagree: the site's failure mode
        return error_answer(f"bad request: {e}"), None, f"bad request: {e}"
    except BadRequest as e:  # this job's description cannot be read: refused, not let through
        decision = unreadable("unreadable request")
        return encode_answer(decision.to_wire()), decision, f"bad request: {str(e)[:200]}"
    if on_message is not None:
        try:
            on_message(msg)
        except Exception:  # noqa: BLE001 - metrics must not cost a decision
            pass
    try:
        decision = decide(job, uid)
        return encode_answer(decision.to_wire()), decision, None
    except Exception as e:  # noqa: BLE001 - one bad job must never take the service down
        decision = unreadable(f"internal error: {type(e).__name__}")
        return (
            encode_answer(decision.to_wire()),
            decision,
            f"internal error: {type(e).__name__}: {str(e)[:200]}",
        )


def reject_answer(why: str) -> bytes:
    """A refusal of the job whose request could not be read (too long, cut short)."""
    return encode_answer(unreadable(why).to_wire())
