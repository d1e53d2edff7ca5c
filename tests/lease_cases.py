"""The leader lease's cases, run against each store (SQLite in tests/unit/test_leader_lease.py,
a live PostgreSQL in tests/integration/test_leader_postgres.py): two daemons (two stores on one
database, each with its lease), one leads; a paused leader loses the lease to the other and can
neither act on Slurm nor write once it wakes up."""

from __future__ import annotations

import pytest

from prioritizer.leader import FencedBackend, Leadership, before_action
from slurm_dl.core.errors import NotLeaderError
from slurm_dl.core.ledger import Ledger
from slurm_dl.store import CycleWrite, Store
from slurm_dl.store.lease import Lease, read_lease
from slurm_dl.store.models import ResizeRow
from slurm_dl.store.resizes import begin_resize, resizes, set_resize_state


class Clock:
    """Wall and monotonic time, moved by hand (a pause is a jump)."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class CountingBackend:
    """Counts the Slurm actions that reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def set_site_factor(self, factors):
        self.calls.append(("set_site_factor", dict(factors)))

    def signal_batch(self, job_id, signal="USR2"):
        self.calls.append(("signal_batch", job_id))

    def requeue(self, job_id):
        self.calls.append(("requeue", job_id))

    def snapshot(self):
        return "snapshot"


def daemon(url: str, clock: Clock, lease_s: float = 15.0):
    store = Store(url)
    return store, Lease(store, lease_s, clock=clock, mono=clock)


def save(store: Store, cycle: int, now: float) -> None:
    store.save_cycle(CycleWrite(now=now, cycle=cycle, ledger=Ledger(), pushed={7: cycle}))


def one_leads_the_other_stands_by(url: str) -> None:
    clock = Clock()
    (sa, a), (sb, b) = daemon(url, clock), daemon(url, clock)
    assert a.try_take() and a.epoch == 1
    assert not b.try_take() and b.epoch is None
    assert read_lease(sb).holder == a.holder
    save(sa, 1, clock())
    with pytest.raises(NotLeaderError):  # the stand-by's store is fenced once it tried
        sb.fence = (b.holder, 1)
        save(sb, 2, clock())
    clock.t += 10  # renewed within the lease: still A's
    assert a.renew()
    clock.t += 10
    assert not b.try_take()
    assert before_action(a, "push") == 1


def a_paused_leader_loses_the_lease_and_cannot_act(url: str) -> None:
    clock = Clock()
    (sa, a), (sb, b) = daemon(url, clock), daemon(url, clock)
    slurm = CountingBackend()
    fenced_a = FencedBackend(slurm, a)
    assert a.try_take()
    fenced_a.set_site_factor({1: 5})
    row = sa.begin_preemption(11, 12, clock(), 0, "for 12")
    sa.set_preemption_state(row, "signalled", clock(), "sent")
    fenced_a.signal_batch(11)
    assert [c[0] for c in slurm.calls] == ["set_site_factor", "signal_batch"]
    resize = begin_resize(sa, _resize_row(21, clock()))

    clock.t += 16  # SIGSTOP longer than the lease: A renews nothing meanwhile
    if sa.engine.dialect.name == "postgresql":
        _end_session(sb, a)  # what idle_session_timeout does to the stopped leader's session
    assert b.try_take() and b.epoch == 2
    assert b.taken_from is not None and b.taken_from.holder == a.holder
    adopted = sb.adopt_preemptions(clock())
    assert [(r.victim_job_id, r.state, r.epoch) for r in adopted] == [(11, "signalled", 1)]
    assert [r.epoch for r in sb.preemptions(open_only=True)] == [2]
    assert sb.adopt_preemptions(clock()) == []  # adopted once

    # A wakes up (SIGCONT): no push, no signal, no requeue, no write
    for call in (
        lambda: fenced_a.set_site_factor({1: 9}),
        lambda: fenced_a.signal_batch(11),
        lambda: fenced_a.requeue(11),
    ):
        with pytest.raises(NotLeaderError):
            call()
    assert len(slurm.calls) == 2
    assert fenced_a.snapshot() == "snapshot"  # reads go through
    for write in (
        lambda: save(sa, 3, clock()),
        lambda: sa.begin_preemption(13, 12, clock(), 0, "late"),
        lambda: sa.set_preemption_state(row, "requeueing", clock(), "late"),
        lambda: begin_resize(sa, _resize_row(22, clock())),
        lambda: set_resize_state(sa, resize, "holding", clock(), "late"),
    ):
        with pytest.raises(NotLeaderError):
            write()
    assert not a.renew() and not a.held
    save(sb, 3, clock())  # the new leader writes, with its epoch
    assert sb.site_factor_epochs() == {7: 2}
    assert [(r.job_id, r.state, r.epoch) for r in resizes(sb)] == [(21, "signalling", 1)]
    set_resize_state(sb, resize, "signalled", clock(), "the new leader goes on")
    assert [(r.state, r.epoch) for r in resizes(sb)] == [("signalled", 2)]
    assert not a.try_take()  # A stands by now


def a_released_lease_is_taken_at_once(url: str) -> None:
    clock = Clock()
    (_, a), (_, b) = daemon(url, clock), daemon(url, clock)
    assert a.try_take()
    a.release()
    assert b.try_take() and b.epoch == 2
    with pytest.raises(NotLeaderError):
        a.check("push")


def leadership_takes_over_and_says_so(url: str, caplog) -> None:
    clock = Clock()
    (sa, a), (sb, b) = daemon(url, clock), daemon(url, clock)
    rebuilt = []
    la, lb = Leadership(a, clock), Leadership(b, clock, rebuild=lambda: rebuilt.append(1))
    caplog.set_level("INFO", logger="slurm_dl.prioritizer")
    assert la.step() and not lb.step() and not lb.step()
    assert sum("standing by" in r.message for r in caplog.records) == 1  # said once
    clock.t += 16
    if sa.engine.dialect.name == "postgresql":
        _end_session(sb, a)
    assert lb.step() and lb.leading
    assert any("took over as leader at epoch 2" in r.message for r in caplog.records)
    assert not la.step()  # A finds its lease gone: stands by
    assert any("lost the leader lease" in r.message for r in caplog.records)
    assert rebuilt == []  # B's first leadership: nothing to rebuild


def _resize_row(job_id: int, now: float) -> ResizeRow:
    return ResizeRow(
        job_id=job_id, state="signalling", from_gpus=8, to_gpus=4, started_at=now, updated_at=now
    )


def _end_session(other: Store, lease: Lease) -> None:
    """End the session that holds ``lease``'s advisory lock, as the server does to a stopped
    process's idle session after ``idle_session_timeout``."""
    from sqlalchemy import text

    pid = lease._conn.connection.dbapi_connection.info.backend_pid
    with other.engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        conn.commit()
