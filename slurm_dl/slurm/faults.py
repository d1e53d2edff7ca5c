"""Fault injection: a backend wrapper that makes chosen Slurm calls fail the way Slurm does.

``FaultyBackend(inner, rules=..., rate=..., seed=...)`` passes every call through to ``inner``
except where a rule or the seeded dice say otherwise. Faults are the failures a daemon meets on a
busy cluster, each raised as the error type the real backends raise for it:

* ``refuse`` — Slurm says no (``SlurmError``: a requeue of a ``Requeue=0`` job, an update the
  controller rejects); nothing happened;
* ``timeout`` — no answer in time (``SlurmUnavailableError``); the call may or may not have taken
  effect (decided by the dice), as with a real timeout;
* ``vanish`` — the job is gone (``JobNotFoundError``: it ended since the snapshot);
* ``partial`` — part of the call took effect and the command still failed (an array update
  where one task had just finished; a multi-job SiteFactor update);
* ``garbage`` — the command printed something that is not what it should (``SlurmError`` from
  the parser);
* ``deny`` (by rule only, never at random) — Slurm refuses the caller for lack of rights
  (``SlurmError`` "Invalid user id": a daemon whose user is not an operator); nothing happened;
* ``crash`` — the daemon dies inside the call (raises :class:`Crash`, which is not an
  ``Exception``: nothing in the daemon catches it), after the call took effect or before.

Rules map a call name to a fault kind, a list of kinds used in turn (``None`` = no fault), or a
function ``(call, args) -> kind | None``. Every injected fault is recorded in ``injected``.
Used by the property tests; also handy to rehearse a site's failure handling by hand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

from ..core.errors import JobNotFoundError, SlurmError, SlurmUnavailableError

FAULT_KINDS = ("refuse", "timeout", "vanish", "partial", "garbage", "crash")
RULE_KINDS = (*FAULT_KINDS, "deny")
"""What a rule may name: the random kinds and those only a rule injects."""

READ_CALLS = ("snapshot", "jobs", "nodes", "partitions", "topology", "site_factors")
LOOKUP_CALLS = ("job_end",)  # reads inside a step: a failure there must stay local to it
WRITE_CALLS = (
    "set_site_factor",
    "signal_batch",
    "signal_steps",
    "requeue",
    "set_comment",
    "cancel",
    "hold",
    "release",
    "set_partition",
    "set_features",
    "set_nodes",
)

# Which faults make sense for which call (a read cannot half-succeed; a write can).
_KINDS_FOR = {
    **{c: ("timeout", "garbage", "crash") for c in READ_CALLS},
    **{c: ("timeout", "vanish", "garbage", "crash") for c in LOOKUP_CALLS},
    **{c: ("refuse", "timeout", "vanish", "partial", "garbage", "crash") for c in WRITE_CALLS},
}

Rule = Union[str, None, Sequence[Union[str, None]], Callable[[str, tuple], Union[str, None]]]


class Crash(BaseException):
    """The daemon died inside a Slurm call (kill -9 stand-in); not an Exception on purpose."""


@dataclass(frozen=True, slots=True)
class Injected:
    call: str
    kind: str
    args: tuple
    took_effect: bool


class FaultyBackend:
    """A Slurm backend whose calls fail by rule or at random (seeded); see the module docstring."""

    def __init__(
        self,
        inner: Any,
        *,
        rules: Mapping[str, Rule] | None = None,
        rate: float = 0.0,
        seed: int = 0,
        kinds: Sequence[str] = FAULT_KINDS,
    ) -> None:
        unknown = [k for k in kinds if k not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kind(s) {unknown}; known: {', '.join(FAULT_KINDS)}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        self.inner = inner
        self.rules = dict(rules or {})
        self.rate = rate
        self.kinds = tuple(kinds)
        self.dice = random.Random(seed)
        self.injected: list[Injected] = []
        self._turn: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in _KINDS_FOR and callable(attr):
            return lambda *args, **kwargs: self._call(name, attr, args, kwargs)
        return attr

    def _pick(self, call: str, args: tuple) -> str | None:
        if call in self.rules:
            rule = self.rules[call]
            if callable(rule):
                return rule(call, args)
            if rule is None or isinstance(rule, str):
                return rule
            turn = self._turn.get(call, 0)
            self._turn[call] = turn + 1
            return list(rule)[turn % len(rule)] if rule else None
        allowed = [k for k in _KINDS_FOR[call] if k in self.kinds]
        if allowed and self.rate and self.dice.random() < self.rate:
            return self.dice.choice(allowed)
        return None

    def _call(self, call: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
        kind = self._pick(call, args)
        if kind is None:
            return fn(*args, **kwargs)
        if kind not in RULE_KINDS:
            raise ValueError(f"rule for {call} gave unknown fault kind {kind!r}")
        what = f"{call} {' '.join(map(str, args))}".strip()[:200]
        effect = False
        if kind == "timeout" or kind == "crash":
            effect = self.dice.random() < 0.5
        if kind == "partial":
            effect = True
            if (
                call == "set_site_factor"
                and args
                and isinstance(args[0], Mapping)
                and len(args[0]) > 1
            ):
                items = sorted(args[0].items())
                keep = dict(items[: self.dice.randrange(1, len(items))])
                fn(keep, *args[1:], **kwargs)
            else:
                fn(*args, **kwargs)
        elif effect:
            fn(*args, **kwargs)
        self.injected.append(Injected(call, kind, tuple(args), effect))
        if kind == "refuse":
            raise SlurmError(f"{what}: Requested operation is presently disabled", returncode=1)
        if kind == "deny":
            said = "slurm_update error: Invalid user id"
            raise SlurmError(f"{what}: {said}", returncode=1, stderr=said)
        if kind == "timeout":
            raise SlurmUnavailableError(f"{what}: no answer from Slurm within the timeout")
        if kind == "vanish":
            raise JobNotFoundError(f"{what}: Invalid job id specified", returncode=1)
        if kind == "partial":
            raise SlurmError(f"{what}: some of it failed: Job has already finished", returncode=1)
        if kind == "garbage":
            raise SlurmError(f"{what}: output is not JSON: '\\x00\\x17<html>'", returncode=0)
        raise Crash(f"injected crash in {what} (took effect: {effect})")
