"""The prioritizer's store on a temporary SQLite file: ledger, SiteFactor record, preemption rows."""

import os
import stat
from pathlib import Path

import pytest

from slurm_dl.core.errors import StoreError
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobState
from slurm_dl.store import CycleWrite, Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield s
    s.close()


def _ledger_with_service() -> Ledger:
    led = Ledger()
    j = Job(7, user="u", account="a", name="n", num_gpus=2, state=JobState.RUNNING)
    led.observe([j], 100.0, 3600.0)
    led.observe([j], 160.0, 3600.0)
    return led


def test_empty_store_gives_an_empty_ledger(store):
    assert store.load_ledger() == Ledger()
    assert store.site_factors() == {}
    assert store.explanation(1) is None


def test_cycle_round_trip(store, tmp_path):
    led = _ledger_with_service()
    store.save_cycle(CycleWrite(now=160.0, cycle=3, ledger=led, pushed={7: 500, 8: 0},
                                decisions=[(7, "priority", 500, "score 0.5")],
                                explanations={7: {"job_id": 7, "score": 0.5}}))
    again = Store(store.url)
    assert again.load_ledger() == led
    assert again.load_ledger().attained(7) == pytest.approx(120.0)
    assert again.ledger_cycle() == 3
    assert again.site_factors() == {7: 500, 8: 0}
    assert [d.reason for d in again.decisions(7)] == ["score 0.5"]
    assert again.explanation(7) == {"job_id": 7, "score": 0.5}


def test_later_cycle_overwrites_values_and_forgets_gone_jobs(store):
    led = Ledger()
    store.save_cycle(CycleWrite(now=1.0, cycle=1, ledger=led, pushed={1: 10, 2: 20}))
    store.save_cycle(CycleWrite(now=2.0, cycle=2, ledger=led, pushed={1: 30}, forget_jobs=[2]))
    assert store.site_factors() == {1: 30}


def test_preemption_rows_are_write_ahead_and_pairs_are_remembered(store):
    rid = store.begin_preemption(victim=5, need=9, now=10.0, restarts=0, reason="r")
    rows = store.preemptions(open_only=True)
    assert [(r.victim_job_id, r.need_job_id, r.state) for r in rows] == [(5, 9, "signalling")]
    store.set_preemption_state(rid, "signalled", 10.5)
    store.set_preemption_state(rid, "requeued", 30.0)
    assert store.preemptions(open_only=True) == []
    assert store.preempted_pairs() == {(5, 9): 10.0}
    kinds = [d.kind for d in store.decisions(5)]
    assert kinds == ["preempt", "preempt-signalled", "preempt-requeued"]


def test_prune_drops_old_decisions_and_each_cycle_replaces_explanations(store):
    led = Ledger()
    store.save_cycle(CycleWrite(now=1.0, cycle=1, ledger=led, decisions=[(1, "priority", 1, "old")],
                                explanations={1: {"a": 1}, 2: {"b": 2}}))
    store.save_cycle(CycleWrite(now=100.0, cycle=2, ledger=led, decisions=[(1, "priority", 2, "new")],
                                explanations={2: {"b": 3}}))
    assert store.prune(keep_decisions_after=50.0) == 1
    assert [d.reason for d in store.decisions(1)] == ["new"]
    assert store.explanation(1) is None and store.explanation(2) == {"b": 3}
    store.save_cycle(CycleWrite(now=101.0, cycle=3, ledger=led))  # no explanations given: kept
    assert store.explanation(2) == {"b": 3}


def test_unopenable_database_is_one_clear_error(tmp_path):
    with pytest.raises(StoreError, match="cannot open"):
        Store(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'x.db'}")
    with pytest.raises(StoreError, match="nosuchdialect"):
        Store("nosuchdialect://x")


def test_corrupt_ledger_row_is_reported(store):
    from sqlmodel import Session

    from slurm_dl.store import LedgerState

    with Session(store.engine) as s:
        s.add(LedgerState(id=1, data="{not json", saved_at=0.0))
        s.commit()
    with pytest.raises(StoreError, match="unreadable"):
        store.load_ledger()


def test_a_new_sqlite_file_is_readable_by_its_owner_alone(tmp_path):
    """It holds every user's job names and reasons: users see their own through explain."""
    old = os.umask(0o022)
    try:
        s = Store(f"sqlite:///{tmp_path}/new.db")
        s.save_cycle(CycleWrite(now=160.0, cycle=1, ledger=_ledger_with_service()))
        s.close()
        assert stat.S_IMODE((tmp_path / "new.db").stat().st_mode) == 0o600
        for extra in tmp_path.glob("new.db-*"):  # WAL and shared memory take the file's mode
            assert stat.S_IMODE(extra.stat().st_mode) & 0o077 == 0, extra
        (tmp_path / "kept.db").touch(mode=0o640)
        Store(f"sqlite:///{tmp_path}/kept.db").close()  # an existing file keeps the admin's mode
        assert stat.S_IMODE((tmp_path / "kept.db").stat().st_mode) == 0o640
    finally:
        os.umask(old)
