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
    led = Ledger(3600.0)
    j = Job(7, user="u", account="a", name="n", num_gpus=2, state=JobState.RUNNING)
    led.observe([j], 100.0)
    led.observe([j], 160.0)
    return led


def test_empty_store_gives_an_empty_ledger(store):
    assert store.load_ledger() == Ledger(3600.0)
    assert store.site_factors() == {}
    assert store.explanation(1) is None


def test_cycle_round_trip(store, tmp_path):
    led = _ledger_with_service()
    store.save_cycle(
        CycleWrite(
            now=160.0,
            cycle=3,
            ledger=led,
            pushed={7: 500, 8: 0},
            decisions=[(7, "priority", 500, "score 0.5")],
            explanations={7: {"job_id": 7, "score": 0.5}},
        )
    )
    again = Store(store.url)
    assert again.load_ledger() == led
    assert again.load_ledger().attained(7) == pytest.approx(120.0)
    assert again.ledger_cycle() == 3
    assert again.site_factors() == {7: 500, 8: 0}
    assert [d.reason for d in again.decisions(7)] == ["score 0.5"]
    assert again.explanation(7) == {"job_id": 7, "score": 0.5}


def test_later_cycle_overwrites_values_and_forgets_gone_jobs(store):
    led = Ledger(3600.0)
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
    led = Ledger(3600.0)
    store.save_cycle(
        CycleWrite(
            now=1.0,
            cycle=1,
            ledger=led,
            decisions=[(1, "priority", 1, "old")],
            explanations={1: {"a": 1}, 2: {"b": 2}},
        )
    )
    store.save_cycle(
        CycleWrite(
            now=100.0,
            cycle=2,
            ledger=led,
            decisions=[(1, "priority", 2, "new")],
            explanations={2: {"b": 3}},
        )
    )
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


# --- the ledger's job records in rows, each written only when it changed -------------------


def _queue(n_wait: int, n_run: int, *, held: int = 0) -> list[Job]:
    jobs = [
        Job(
            100 + i,
            user="u",
            account="a",
            name="w",
            num_gpus=1,
            state=JobState.PENDING,
            submit_time=0.0,
            eligible_time=0.0,
        )
        for i in range(n_wait)
    ]
    jobs += [
        Job(
            500 + i,
            user="u",
            account="a",
            name="h",
            num_gpus=1,
            state=JobState.PENDING,
            state_reason="JobHeldUser",
            submit_time=0.0,
        )
        for i in range(held)
    ]
    jobs += [
        Job(900 + i, user="v", account="b", name="r", num_gpus=2, state=JobState.RUNNING)
        for i in range(n_run)
    ]
    return jobs


def _rows_written(store: Store) -> list[int]:
    """Job ids of the ledger rows each save inserts (a hook on the engine)."""
    from sqlalchemy import event

    written: list[int] = []

    def count(conn, cursor, statement, params, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO SDL_LEDGER_JOB"):
            rows = params if executemany else [params]
            written.extend(r[0] if isinstance(r, (tuple, list)) else r["job_id"] for r in rows)

    event.listen(store.engine, "before_cursor_execute", count)
    return written


def test_a_steady_cycle_rewrites_only_the_records_that_changed(store, tmp_path):
    """Jobs that keep waiting or keep running are not rewritten (their wait and their service
    are stretches from a time the record keeps); new ones, ones that start or stop running
    and ones that left are; the saved ledger reads back equal after every save."""
    written = _rows_written(store)
    led = Ledger(3600.0)
    q = _queue(50, 5, held=3)
    for cycle, now in enumerate((100.0, 110.0, 120.0), 1):
        led.observe(q, now)
        store.save_cycle(CycleWrite(now=now, cycle=cycle, ledger=led))
        assert Store(store.url).load_ledger() == led
    assert len(written) == 58 + 5  # all, then the running ones once: their stretch opened
    written.clear()
    q = q[2:] + [
        Job(
            7000,
            user="u",
            account="a",
            name="w",
            num_gpus=1,
            state=JobState.PENDING,
            submit_time=120.0,
            eligible_time=120.0,
        )
    ]
    led.observe(q, 130.0)  # jobs 100 and 101 left (closed), 7000 arrived
    store.save_cycle(CycleWrite(now=130.0, cycle=4, ledger=led))
    assert sorted(written) == [100, 101, 7000]
    again = Store(store.url).load_ledger()
    assert again == led and again.waited(149) == 130.0 and again.waited(500) == 0.0
    written.clear()
    led.forget_finished(now=200.0, keep_s=10.0)
    led.observe(q, 200.0)
    store.save_cycle(CycleWrite(now=200.0, cycle=5, ledger=led))
    assert written == []  # 100 and 101 deleted, nothing written
    assert again.attained(900) == 2 * 30.0 and led.attained(900) == 2 * 100.0
    written.clear()
    q[-2] = Job(
        904,
        user="v",
        account="b",
        name="r",
        num_gpus=2,
        state=JobState.PENDING,
        submit_time=0.0,
        eligible_time=0.0,
        state_reason="BeginTime",
    )  # requeued: no longer running
    q.append(Job(150, user="u", account="a", name="w", num_gpus=1, state=JobState.RUNNING))
    led.observe(q, 210.0)
    store.save_cycle(CycleWrite(now=210.0, cycle=6, ledger=led))
    assert sorted(written) == [150, 904]
    assert Store(store.url).load_ledger() == led and 100 not in Store(store.url).load_ledger().jobs


def test_a_store_written_by_another_process_between_saves_is_rewritten_whole(store, tmp_path):
    led = Ledger(3600.0)
    led.observe(_queue(10, 2), 100.0)
    store.save_cycle(CycleWrite(now=100.0, cycle=1, ledger=led))
    other = Ledger(3600.0)  # another writer (a second daemon, a restore) saves a ledger of its own
    other.observe(_queue(3, 0), 100.0)
    Store(store.url).save_cycle(CycleWrite(now=105.0, cycle=2, ledger=other))
    led.observe(_queue(10, 2), 110.0)
    store.save_cycle(CycleWrite(now=110.0, cycle=3, ledger=led))
    assert Store(store.url).load_ledger() == led


def test_a_failed_save_leaves_the_next_one_to_rewrite_every_record(store, tmp_path):
    """A transaction that fails after the rows' statements is rolled back whole; the store
    then knows nothing of what the table holds and the next save rewrites it."""
    from sqlalchemy import event
    from sqlalchemy.exc import OperationalError

    led = Ledger(3600.0)
    led.observe(_queue(10, 2), 100.0)
    store.save_cycle(CycleWrite(now=100.0, cycle=1, ledger=led))
    led.observe(_queue(8, 2), 110.0)

    def fail(conn, cursor, statement, *rest):
        if statement.lstrip().upper().startswith("INSERT INTO SDL_DECISION"):
            raise OperationalError(statement, {}, Exception("disk I/O error"))

    event.listen(store.engine, "before_cursor_execute", fail)
    with pytest.raises(StoreError, match="disk I/O error"):
        store.save_cycle(
            CycleWrite(now=110.0, cycle=2, ledger=led, decisions=[(100, "priority", 1, "x")])
        )
    event.remove(store.engine, "before_cursor_execute", fail)
    before = Store(store.url).load_ledger()
    assert not any(
        r.finished for r in before.jobs.values()
    )  # the closing of 108 and 109 rolled back
    written = _rows_written(store)
    store.save_cycle(CycleWrite(now=110.0, cycle=2, ledger=led))
    assert len(written) == 12 and Store(store.url).load_ledger() == led


def test_a_ledger_saved_whole_by_an_earlier_release_reads_and_moves_into_rows(store, tmp_path):
    import json

    from sqlmodel import Session

    from slurm_dl.store import LedgerState

    led = Ledger(3600.0)
    q = _queue(4, 1)
    led.observe(q, 100.0)
    led.observe(q, 130.0)
    whole = led.to_dict(compact=True)
    names = whole["job_fields"]
    i, k = names.index("waited_before_s"), names.index("wait_from")
    rows = [
        [v for n, v in zip(names, r) if n not in ("waited_before_s", "wait_from")]
        + [
            r[i] + (r[names.index("last_seen")] - r[k] if r[k] is not None else 0.0),
            r[k] is not None,
        ]
        for r in whole["jobs"]
    ]
    old = {
        **whole,
        "job_fields": [n for n in names if n not in ("waited_before_s", "wait_from")]
        + ["waited_s", "waiting"],
        "jobs": rows,
    }
    del old["seen_at"]
    with Session(store.engine) as s:
        s.add(LedgerState(id=1, data=json.dumps(old), saved_at=130.0, cycle=2))
        s.commit()
    back = Store(store.url).load_ledger()
    assert {j: back.waited(j) for j in back.jobs} == {j: led.waited(j) for j in led.jobs}
    assert back.waited(100) == 130.0
    s2 = Store(store.url)
    mine = s2.load_ledger()
    mine.observe(q, 140.0)
    led.observe(q, 140.0)
    s2.save_cycle(CycleWrite(now=140.0, cycle=3, ledger=mine))
    assert json.loads(Store(store.url)._session().get(LedgerState, 1).data).get("jobs") is None
    got = Store(store.url).load_ledger()
    assert {j: got.waited(j) for j in got.jobs} == {j: led.waited(j) for j in led.jobs}
    assert got.attained(900) == led.attained(900)


def test_a_damaged_job_row_is_named(store):
    from sqlmodel import Session

    from slurm_dl.store.models import LedgerJobRow

    led = Ledger(3600.0)
    led.observe(_queue(2, 0), 100.0)
    store.save_cycle(CycleWrite(now=100.0, cycle=1, ledger=led))
    with Session(store.engine) as s:
        s.get(LedgerJobRow, 101).data = "[101, tor"
        s.commit()
    with pytest.raises(StoreError, match="unreadable: job 101's row"):
        Store(store.url).load_ledger()


def test_a_database_without_an_upsert_gets_rows_replaced_by_delete_and_insert(store):
    """SQLite and PostgreSQL replace a changed row in one statement; any other database that
    SQLAlchemy reaches deletes the old rows first: the same rows either way."""
    from slurm_dl.store.models import LedgerJobRow
    from slurm_dl.store.repository import _upsert

    with store.engine.begin() as conn:
        _upsert(
            conn, LedgerJobRow, [{"job_id": 1, "data": "[1]"}, {"job_id": 2, "data": "[2]"}], []
        )
        real, conn.dialect.name = conn.dialect.name, "mysql"  # (this connection only pretends)
        try:
            _upsert(
                conn,
                LedgerJobRow,
                [{"job_id": 2, "data": "[22]"}, {"job_id": 3, "data": "[3]"}],
                [2],
            )
        finally:
            conn.dialect.name = real
        _upsert(conn, LedgerJobRow, [{"job_id": 3, "data": "[33]"}], [3])
        rows = dict(
            conn.execute(LedgerJobRow.__table__.select().order_by(LedgerJobRow.job_id)).all()
        )
    assert rows == {1: "[1]", 2: "[22]", 3: "[33]"}


def test_a_cycle_saved_while_the_ledger_is_read_makes_it_read_again(store, monkeypatch):
    """The document and the job rows are two reads: a cycle another daemon saves between them
    would mix two cycles, so the reader starts over (and says so if it never settles)."""
    led = Ledger(3600.0)
    led.observe(_queue(3, 1), 100.0)
    store.save_cycle(CycleWrite(now=100.0, cycle=1, ledger=led))
    newer = Ledger(3600.0)
    newer.observe(_queue(5, 1), 100.0)
    newer.observe(_queue(5, 1), 110.0)
    reader = Store(store.url)
    real, calls = Store._job_rows, []

    def racing(self):
        rows = real(self)
        calls.append(1)
        if len(calls) == 1:
            Store(store.url).save_cycle(CycleWrite(now=110.0, cycle=2, ledger=newer))
        return rows

    monkeypatch.setattr(Store, "_job_rows", racing)
    assert reader.load_ledger() == newer and len(calls) == 2

    def always(self):
        rows = real(self)
        calls.append(1)
        Store(store.url).save_cycle(
            CycleWrite(now=110.0 + len(calls), cycle=2 + len(calls), ledger=newer)
        )
        return rows

    monkeypatch.setattr(Store, "_job_rows", always)
    with pytest.raises(StoreError, match="changed during each of 5 reads"):
        Store(store.url).load_ledger()


def _entries(store, log: str) -> list[tuple[int, str]]:
    from sqlalchemy import select
    from sqlmodel import Session

    from slurm_dl.store.models import LedgerEntryRow

    with Session(store.engine) as s:
        return list(
            s.exec(
                select(LedgerEntryRow.idx, LedgerEntryRow.data)
                .where(LedgerEntryRow.log == log)
                .order_by(LedgerEntryRow.idx)
            ).all()
        )


def _tamper(store, log: str, idx: int, data: str) -> None:
    from sqlmodel import Session

    from slurm_dl.store.models import LedgerEntryRow

    with Session(store.engine) as s:
        s.get(LedgerEntryRow, (log, idx)).data = data
        s.commit()


def test_the_ledgers_logs_are_rows_written_once_and_trimmed_at_their_front(store, monkeypatch):
    import json

    import slurm_dl.core.ledger as ledger
    from slurm_dl.store import LedgerState

    monkeypatch.setattr(ledger, "HISTORY_KEPT", 10)
    led = Ledger(3600.0)
    for i in range(5):
        led.add_history(float(i), "ann", f"job{i}", "nlp", 1)
    store.save_cycle(CycleWrite(now=1.0, cycle=1, ledger=led))
    doc = json.loads(store._session().get(LedgerState, 1).data)
    assert not {"history", "finished", "runs"} & set(doc)  # the document holds none of them
    assert _entries(store, "history") == [(i, f"{float(i)}") for i in range(5)]
    assert [json.loads(d)[2] for _, d in _entries(store, "finished")] == [
        f"job{i}" for i in range(5)
    ]
    _tamper(store, "history", 4, "99.0")  # a row the next saves must leave alone
    for i in range(5, 12):  # 12 > 10 + 1: the history drops its two oldest
        led.add_history(float(i), "ann", f"job{i}", "nlp", 1)
    store.save_cycle(CycleWrite(now=2.0, cycle=2, ledger=led))
    assert [i for i, _ in _entries(store, "history")] == list(range(2, 12))
    led.add_history(12.0, "ann", "job12", "nlp", 1)
    store.save_cycle(CycleWrite(now=3.0, cycle=3, ledger=led))
    rows = _entries(store, "history")
    assert [i for i, _ in rows] == list(range(2, 13)) and rows[-1][1] == "12.0"
    assert rows[2] == (4, "99.0")  # written once: not again with each save
    _tamper(store, "history", 4, "4.0")
    back = Store(store.url).load_ledger()
    assert back == led and back.history.dropped == 2
    assert back.finished_dropped == led.finished_dropped and back.finished.dropped == 0


def test_a_log_edited_is_rewritten_from_its_lowest_edit(store):
    from slurm_dl.core import ledger

    led = Ledger(3600.0)
    j = Job(1, user="ann", account="nlp", name="bert", num_gpus=1, state=JobState.RUNNING)
    for i in range(3):
        led.add_history(float(i), "bob", "x", "cv", 1)
    led.observe([j], 0.0)
    led.observe([j], 10.0)
    led.observe([], 20.0)  # missing: closed into the history (10 GPU-s)
    store.save_cycle(CycleWrite(now=20.0, cycle=1, ledger=led))
    assert [d for _, d in _entries(store, "history")] == ["0.0", "1.0", "2.0", "10.0"]
    _tamper(store, "history", 0, "99.0")
    led.observe([j], 30.0)  # back: its entry (the last) is withdrawn
    led.add_history(4.0, "bob", "x", "cv", 1)
    store.save_cycle(CycleWrite(now=30.0, cycle=2, ledger=led))
    assert _entries(store, "history") == [
        (0, "99.0"),
        (1, "1.0"),
        (2, "2.0"),
        (3, "4.0"),
    ]  # from the edit on
    _tamper(store, "history", 0, "0.0")
    assert Store(store.url).load_ledger() == led
    _tamper(store, "history", 0, "99.0")
    for _ in range(ledger.EDITS_KEPT + 1):  # more edits than the log remembers: rewritten whole
        led.history.reverse()
    store.save_cycle(CycleWrite(now=40.0, cycle=3, ledger=led))
    assert [d for _, d in _entries(store, "history")] == ["4.0", "2.0", "1.0", "0.0"]
    assert Store(store.url).load_ledger() == led


def test_logs_saved_inside_the_document_move_into_rows(store):
    import json

    from sqlmodel import Session

    from slurm_dl.store import LedgerState

    led = _ledger_with_service()
    for i in range(3):
        led.add_history(float(i), "ann", "bert", "nlp", 1)
    old = led.to_dict(compact=True)  # an earlier release: jobs and logs in the document
    with Session(store.engine) as s:
        s.add(LedgerState(id=1, data=json.dumps(old), saved_at=160.0, cycle=4))
        s.commit()
    s2 = Store(store.url)
    mine = s2.load_ledger()
    assert mine == led
    s2.save_cycle(CycleWrite(now=170.0, cycle=5, ledger=mine))
    doc = json.loads(Store(store.url)._session().get(LedgerState, 1).data)
    assert "history" not in doc and len(_entries(store, "history")) == 3
    assert Store(store.url).load_ledger() == led


def test_a_missing_log_entry_is_named(store):
    from sqlmodel import Session

    from slurm_dl.store.models import LedgerEntryRow

    led = Ledger(3600.0)
    for i in range(3):
        led.add_history(float(i), "ann", "bert", "nlp", 1)
    store.save_cycle(CycleWrite(now=1.0, cycle=1, ledger=led))
    with Session(store.engine) as s:
        s.delete(s.get(LedgerEntryRow, ("history", 1)))
        s.commit()
    with pytest.raises(StoreError, match="unreadable: history: entry 1 is missing"):
        Store(store.url).load_ledger()
