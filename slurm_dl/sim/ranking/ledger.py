"""The simulator's ledgers: the core :class:`~slurm_dl.core.ledger.Ledger` charged by the engine
(usage by account) and one that learns its history only when a policy asks for it."""

from __future__ import annotations

from ...core.ledger import Ledger


class SimLedger(Ledger):
    """The daemon's :class:`Ledger`, fed directly by the engine instead of from snapshots."""

    def charge(self, account: str, gpu_s: float, now: float) -> None:
        self._charge(account, gpu_s, now)
        self.revision += 1

    def charge_running(self, gpus: dict[str, int], dt: float, now: float) -> None:
        """:meth:`charge` each account with running GPUs ``gpus[account] × dt``, in order."""
        self.revision += self._charge_many(gpus, dt, now)


def _lazy(name: str) -> property:
    def get(self):
        if self._held:
            self._learn()
        return self._lazy_fields[name]

    def put(self, value) -> None:
        self._lazy_fields[name] = value

    return property(get, put)


class LazySimLedger(SimLedger):
    """A :class:`SimLedger` that builds a finished job's history record only when something
    reads the history. For the policies that do not learn from it (all but Gittins and QSSF):
    building 82k records costs more than half a second per replay. ``revision`` moves at
    each finish as in the Ledger; a policy that reads the history anyway gets it whole."""

    history = _lazy("history")
    finished = _lazy("finished")
    finished_dropped = _lazy("finished_dropped")

    def __init__(self, half_life_s: float | None = None) -> None:
        self._lazy_fields: dict = {}
        self._held: list[tuple] = []
        super().__init__(half_life_s)

    def add_history(self, *args) -> None:
        self._held.append(args)
        self.revision += 1

    def _learn(self) -> None:
        held, self._held = self._held, []
        revision = self.revision
        for args in held:
            Ledger.add_history(self, *args)
        self.revision = revision
