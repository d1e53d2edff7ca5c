"""One leader, fenced: the daemon acts on Slurm only while it holds the store's leader lease.

:class:`Leadership` is what the loop asks each tick whether to run a cycle: it takes the lease
when it is free (a take-over: a new epoch, the old leader's half-done preemptions adopted, the
prioritizer's state rebuilt from the store and Slurm), and stands by, saying so once, while
another daemon leads. :class:`FencedBackend` wraps the Slurm backend so that every call that
changes Slurm first passes :func:`before_action`: the lease is renewed in the database and its
epoch still this daemon's, or the call is not made (:class:`NotLeaderError`). A leader that was
paused past its lease (SIGSTOP) and wakes up after a take-over fails there, before its next
push or signal, and the store refuses its writes (``Store.fence``).

What no check can close: a leader paused after its check and before Slurm took the call, for
longer than the lease, makes that one call late. The window is the time between the check and
the scontrol process starting (milliseconds).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from slurm_dl.core.errors import NotLeaderError
from slurm_dl.store.lease import Lease, read_lease

log = logging.getLogger("slurm_dl.prioritizer")

MUTATING_PREFIXES = (
    "set_",
    "signal",
    "requeue",
    "release",
    "hold",
    "cancel",
    "resize",
    "submit",
    "update",
)
"""Backend methods that change Slurm (by name): each call passes :func:`before_action` first.
A new action named otherwise calls :func:`before_action` itself."""


def before_action(fence: "Lease | FencedBackend | None", what: str) -> int:
    """Call right before an action on Slurm (a push, a signal, a requeue, a requeuehold or a
    release): returns the leader epoch to record with its intent; raises
    :class:`~slurm_dl.core.errors.NotLeaderError` (and nothing may be done) when this daemon
    does not hold the lease at its epoch. ``fence``: the daemon's lease, or its backend; None
    (no lease in use: tests, a dry run) lets every action through, epoch 0."""
    if isinstance(fence, FencedBackend):
        fence = fence.lease
    if fence is None:
        return 0
    return fence.check(what)


class FencedBackend:
    """The Slurm backend, with :func:`before_action` in front of every call that changes Slurm;
    reads pass straight through."""

    def __init__(self, backend: Any, lease: Lease) -> None:
        self.backend = backend
        self.lease = lease

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.backend, name)
        if not callable(attr) or not name.startswith(MUTATING_PREFIXES):
            return attr

        def fenced(*args, **kwargs):
            before_action(self.lease, name.replace("_", " "))
            return attr(*args, **kwargs)

        return fenced


class Leadership:
    """Whether this daemon leads, tick by tick. ``rebuild``: called at each take-over, before
    the first cycle of the new epoch (the loop swaps in a fresh prioritizer)."""

    def __init__(
        self, lease: Lease, now: Callable[[], float], rebuild: Callable[[], None] | None = None
    ) -> None:
        self.lease = lease
        self.now = now
        self.rebuild = rebuild
        self.leading = False
        self.takeovers = 0
        self._said: tuple | None = None  # what the last stand-by line said (said once)

    def step(self) -> bool:
        """True when this daemon may run a cycle now."""
        if self.leading and self.lease.held:
            return True
        if self.leading:  # the renewing thread found the lease gone
            self.lost(self.lease.lost_why)
        if not self.lease.try_take():
            self._standing_by()
            return False
        self._took_over()
        return True

    def lost(self, why: str) -> None:
        if self.leading:
            log.error(
                "lost the leader lease (%s): standing by, no push or signal from here on", why
            )
        self.leading = False
        self._said = None

    def _took_over(self) -> None:
        self.leading = True
        self._said = None
        self.takeovers += 1
        lease = self.lease
        old = lease.taken_from
        if old is None:
            log.info("leading at epoch %d (no prioritizer led before)", lease.epoch)
        elif old.holder == lease.holder:
            log.warning("leading again at epoch %d", lease.epoch)
        else:
            late = self.now() - old.renewed_at
            log.warning(
                "took over as leader at epoch %d from %s (epoch %d, last renewed %.0f s ago)",
                lease.epoch,
                old.who(),
                old.epoch,
                late,
            )
        adopted = lease.store.adopt_preemptions(self.now())
        if adopted:
            log.warning(
                "finishing %d preemption(s) an earlier leader left open: %s",
                len(adopted),
                ", ".join(f"job {r.victim_job_id} ({r.state})" for r in adopted),
            )
        if self.rebuild is not None and self.takeovers > 1:
            self.rebuild()  # what this process held in memory may be out of date

    def _standing_by(self) -> None:
        try:
            row = read_lease(self.lease.store)
        except Exception as e:  # noqa: BLE001 - a stand-by's log line, never fatal
            row, why = None, str(e).splitlines()[0]
        else:
            why = ""
        said = (row.holder, row.epoch) if row is not None else ("?", why)
        if said == self._said:
            return
        self._said = said
        if row is not None:
            log.warning("standing by: %s leads at epoch %d", row.who(), row.epoch)
        else:
            log.warning("standing by: the leader lease cannot be read now (%s)", why or "none")


__all__ = ["FencedBackend", "Leadership", "MUTATING_PREFIXES", "NotLeaderError", "before_action"]
