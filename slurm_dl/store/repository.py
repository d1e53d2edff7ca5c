"""Repository functions over the prioritizer's tables. The only code here that touches SQL.

Every write of a cycle goes through :meth:`Store.save_cycle` in ONE transaction (ledger,
SiteFactor record, decisions, explanations), so a daemon killed mid-cycle either saved the whole
cycle or none of it. Preemption steps are written (and committed) *before* the action they
announce — see :meth:`Store.begin_preemption` — so a restart never repeats one.
"""

from __future__ import annotations

import json
import os
import weakref
from itertools import groupby
from operator import itemgetter

import orjson
from contextlib import closing
from urllib.parse import quote
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from sqlalchemy import delete, event, func, insert, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, SQLModel, create_engine

from ..core.errors import NotLeaderError, StoreError
from ..core.explain import finish_numbers
from ..core.database_url import hide_password, shown_url, sqlite_path
from ..core.ledger import LOGS, EntryLog, Ledger
from ..telemetry.summary import JobUtilisationSummary
from . import schema
from .energy import write_energy
from .models import (
    TABLES,
    DecisionRow,
    ExplanationPart,
    ExplanationSnapshot,
    JobEnergyRow,
    JobUtilisationRow,
    LedgerEntryRow,
    LedgerJobRow,
    LedgerState,
    PreemptionRow,
    SiteFactorRow,
)

PREEMPTION_OPEN_STATES = ("signalling", "signalled", "requeueing")
"""States of a preemption whose victim has not been requeued (or let go) yet."""

_CHUNK = 500  # SQLite's bound-parameter limit is generous, but IN lists stay small


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


@dataclass(slots=True)
class CycleWrite:
    """Everything one cycle saves, in one transaction."""

    now: float
    cycle: int
    ledger: Ledger
    pushed: dict[int, int] = field(default_factory=dict)  # job_id -> SiteFactor now held
    decisions: list[tuple[int, str, int | None, str]] = field(
        default_factory=list
    )  # job, kind, value, reason
    explanations: dict[int, dict[str, Any]] | None = None  # None: keep the previous cycle's
    explanation_parts: "ExplanationParts | None" = (
        None  # instead of explanations: rebuilt parts only
    )
    forget_jobs: list[int] = field(default_factory=list)  # SiteFactor rows of jobs that left
    utilisation: dict[int, JobUtilisationSummary] = field(
        default_factory=dict
    )  # upserted summaries
    energy: list = field(default_factory=list)  # job energy segments that grew (core.energy)


@dataclass(slots=True)
class ExplanationParts:
    """A cycle's explanations in two parts (see ``prioritizer.explain_cache``): ``rebuilt``
    slow parts to write (job -> dict), and numbers for every live job: ``ids`` in rank order (a
    job's rank is its place there) and one column per key of ``keys``, aligned with ``ids``.
    Rows of jobs not in ``ids`` are dropped. ``replace_all``: ``rebuilt`` holds every job (a
    daemon's first cycle), so old rows go."""

    keys: tuple[str, ...]
    ids: list[int]
    columns: list[list[Any]]
    rebuilt: dict[int, dict[str, Any]]
    gone: list[int] = field(default_factory=list)
    replace_all: bool = False
    per_cycle: dict[str, Any] = field(
        default_factory=dict
    )  # values shared by every job (at, ranked)
    derive: dict[str, Any] | None = (
        None  # what completes the numbers on reading (core.explain.finish_numbers)
    )


def private_sqlite_file(url: str) -> None:
    """Create a new SQLite file readable by its owner alone (0600) before SQLite creates it with
    the umask's mode: it holds every user's job names, reasons and accounting, which users
    should see only through ``explain`` (their own jobs). SQLite gives its WAL and journal files
    the database file's mode. An existing file keeps the mode the admin gave it."""
    path = sqlite_path(url)
    if not path or not Path(path).parent.is_dir():
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError:
        pass  # opening it below says what is wrong


class EmptyStoreError(StoreError):
    """The database has none of the store's tables (or, for SQLite, no file): a first start, or a
    wrong URL. Only ``slurm-dl db upgrade`` (or the daemon's ``--init``) creates the store."""


class Store:
    """The prioritizer's database. ``url`` is any SQLAlchemy URL (``sqlite:///path`` by default)."""

    def __init__(
        self,
        url: str,
        *,
        check_schema: bool = True,
        create: bool = True,
        busy_timeout_s: float = 30.0,
    ) -> None:
        """Open the store. ``create``: a database without the store's tables is created at the
        current schema; without it such a database (and a missing SQLite file) is left untouched:
        ``revision`` is None, and with ``check_schema`` :class:`EmptyStoreError` says so.
        ``check_schema``: refuse a database at another schema revision
        (:class:`~slurm_dl.store.schema.SchemaError`, which names the command that fixes it);
        ``slurm-dl db upgrade`` opens without the check. ``busy_timeout_s``: how long SQLite waits
        for another process's lock before it says "database is locked"."""
        self.url = url
        self.shown = shown_url(url)  # the URL as messages show it: no password
        self.created = False  # this open created the store's tables
        path = sqlite_path(url)
        if not create and path and not _present(path):
            if not Path(path).parent.is_dir():
                raise StoreError(
                    f"database {self.shown}: no such file, and no directory {Path(path).parent}\n"
                    "  (check [site] database_url or --db)"
                )
            raise EmptyStoreError(
                f"database {self.shown}: no such file\n  (a mistyped path? check [site] "
                "database_url or --db;\n  on a first install, slurm-dl db upgrade creates it)"
            )
        if create:
            private_sqlite_file(url)
        empty = not create and bool(path) and _sqlite_is_empty(path, self.shown, busy_timeout_s)
        try:
            kwargs: dict[str, Any] = {}
            if url.startswith("sqlite"):
                kwargs["connect_args"] = {"timeout": busy_timeout_s}
            self.engine: Engine = create_engine(url, **kwargs)
            if url.startswith("sqlite"):
                event.listen(self.engine, "connect", _sqlite_pragmas)
            if empty:  # leave it as it is: not even the WAL header the connection's pragmas write
                self.revision = None
            else:
                with self.engine.begin() as conn:
                    self.revision = schema.current(conn)
                    if self.revision is None and create:
                        SQLModel.metadata.create_all(conn, tables=[t.__table__ for t in TABLES])
                        schema.stamp(conn, schema.HEAD)
                        self.revision = schema.HEAD
                        self.created = True
        except (SQLAlchemyError, ImportError, ValueError) as e:
            if path and not Path(path).parent.is_dir():
                raise StoreError(
                    f"database {self.shown}: cannot open it: no directory {Path(path).parent}\n"
                    "  (create it, or set [site] database_url or --db)"
                ) from None
            raise StoreError(f"database {self.shown}: cannot open it: {_short(e, url)}") from None
        if self.revision is None:
            if check_schema:
                self.engine.dispose()
                raise EmptyStoreError(
                    f"database {self.shown}: empty: it holds none of the prioritizer's "
                    "tables\n  (a wrong URL? check [site] database_url or --db;\n  on a first "
                    "install, slurm-dl db upgrade creates them)"
                )
        elif check_schema:
            schema.require_head(url, self.revision)

        self.fence: tuple[str, int] | None = None
        """(holder, epoch) of this process's leader lease (``lease.Lease`` sets it): every write
        of a cycle, a preemption step or a SiteFactor record then happens only in a transaction
        that finds the lease still at them. None: no lease in use (tests, tools)."""
        self._rows: dict[int, tuple] | None = None
        """What ``sdl_ledger_job`` holds, as :meth:`Ledger.changed_rows` compares it (None:
        unknown, the next save rewrites every row), valid while the ledger row's cycle and
        time are ``_rows_token``: another writer in between makes the next save rewrite all."""
        self._rows_token: tuple[int, float] | None = None
        self._logs: dict[str, tuple | None] | None = None
        """Per ledger log, what its rows hold (:func:`_log_mark`; None: unknown, the next save
        rewrites the log), valid with ``_rows_token`` as ``_rows`` is."""

    def close(self) -> None:
        self.engine.dispose()

    def integrity_problem(self, timeout_s: float = 5.0) -> str | None:
        """What is wrong with the database file, or None. SQLite: ``PRAGMA quick_check`` through a
        read-only handle (pages, records, indexes' order; every page read, so it takes as long as
        reading the file); a lock held past ``timeout_s`` is named as a lock. Other databases
        check themselves: None."""
        import sqlite3

        path = sqlite_path(self.url)
        if not path:
            return None
        try:
            with closing(
                sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=timeout_s)
            ) as conn:
                rows = [r[0] for r in conn.execute("PRAGMA quick_check(5)").fetchall()]
        except sqlite3.Error as e:
            return f"{path}: {_short(e)}"
        if rows == ["ok"]:
            return None
        return f"{path}: {DAMAGED_HINT}; the integrity check says: {'; '.join(map(str, rows))}"

    def write_problem(self, timeout_s: float = 5.0) -> str | None:
        """Why a write cannot start now, or None. SQLite in WAL mode lets readers past another
        process's write lock, so reading says nothing of it: this begins a write transaction
        (``BEGIN IMMEDIATE``, waiting at most ``timeout_s``) and rolls it back at once, writing
        nothing. Only where the file's ``-wal`` exists (some process has it open in WAL mode;
        else none can hold the lock, and nothing is opened). Other databases: None."""
        import sqlite3

        path = sqlite_path(self.url)
        if not path or not os.path.exists(path + "-wal"):
            return None
        try:
            with closing(
                sqlite3.connect(
                    f"file:{quote(path)}?mode=rw", uri=True, timeout=timeout_s, isolation_level=None
                )
            ) as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            return f"{path}: {str(e).strip() or type(e).__name__}"
        return None

    def _session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    @property
    def epoch(self) -> int:
        """The leader epoch written with this process's records (0: no lease in use)."""
        return max(self.fence[1], 0) if self.fence is not None else 0

    def _fenced(self, conn) -> None:
        """First in a write transaction: stop it unless the lease is still this process's at its
        epoch. An UPDATE, so the row stays locked (SQLite: the write lock) until the commit and
        no take-over can come between the check and the writes."""
        if self.fence is None:
            return
        holder, epoch = self.fence
        n = conn.execute(
            text("UPDATE sdl_leader SET epoch = epoch WHERE id = 1 AND holder = :h AND epoch = :e"),
            {"h": holder, "e": epoch},
        ).rowcount
        if n != 1:
            raise NotLeaderError(
                f"database {self.shown}: this prioritizer does not hold the leader lease at "
                f"epoch {epoch} any more: nothing written"
            )

    def _fail(self, what: str, e: Exception) -> StoreError:
        return StoreError(f"database {self.shown}: {what} failed: {_short(e, self.url)}")

    # --- ledger --------------------------------------------------------------------------
    def load_ledger(self) -> Ledger:
        """The saved ledger (an empty one before the first cycle). Its document and its job
        rows are read again if a cycle was saved in between (another process's daemon)."""
        for _ in range(5):
            try:
                with self._session() as s:
                    row = s.get(LedgerState, 1)
            except SQLAlchemyError as e:
                raise self._fail("reading the ledger", e) from None
            if row is None:
                return Ledger()
            try:
                d = json.loads(row.data)
                if not isinstance(d, dict):
                    raise ValueError("it is not a table")
                in_rows = "jobs" not in d
                if in_rows:
                    d["jobs"] = self._job_rows()
                logs_in_rows = [name for name in LOGS if name not in d]
                firsts = self._log_rows(d, logs_in_rows) if logs_in_rows else {}
                led = Ledger.from_dict(d)
                for name, first in firsts.items():
                    getattr(led, name).dropped = first
            except (ValueError, TypeError) as e:
                raise StoreError(
                    f"database {self.shown}: the saved ledger is unreadable: {e}"
                ) from None
            token = (row.cycle, row.saved_at)
            if not (in_rows or logs_in_rows) or self._ledger_token() == token:
                break
        else:
            raise StoreError(
                f"database {self.shown}: the ledger changed during each of 5 reads:\n"
                "  another process saves cycles into it (a second prioritizer?)"
            )
        # what the rows hold; a document saved whole by an earlier release: unknown (rewritten)
        self._rows = led.changed_rows({})[0] if in_rows else None
        self._logs = {name: _log_mark(getattr(led, name)) for name in logs_in_rows}
        self._rows_token = token
        return led

    def _log_rows(self, d: dict[str, Any], names: list[str]) -> dict[str, int]:
        """Put the entries of the logs ``names`` into ``d`` from their rows, in order; returns
        each log's first entry's place in the whole log (0 when it is empty)."""
        t = LedgerEntryRow.__table__.c
        try:
            with self.engine.connect() as conn:  # Core rows, no ORM objects: up to 240,000 of them
                rows = conn.execute(select(t.log, t.idx, t.data).where(t.log.in_(names))).all()
            rows.sort(key=itemgetter(0, 1))  # in table order, then sorted: no walk along the index
        except SQLAlchemyError as e:
            raise self._fail("reading the ledger", e) from None
        firsts = {name: 0 for name in names}
        for name in names:
            d[name] = []
        for name, group in groupby(rows, key=itemgetter(0)):
            got = list(group)
            first, last = got[0][1], got[-1][1]
            if last - first + 1 != len(got):  # ordered, unique: a gap
                gap = next(first + i for i, r in enumerate(got) if r[1] != first + i)
                raise ValueError(f"{name}: entry {gap} is missing")
            firsts[name] = first
            try:  # one parse for the whole log
                d[name] = orjson.loads("[" + ",".join(r[2] for r in got) + "]")
            except orjson.JSONDecodeError:
                for _, idx, data in got:  # name the damaged entry
                    try:
                        orjson.loads(data)
                    except orjson.JSONDecodeError as e:
                        raise ValueError(f"{name}: entry {idx}: {e}") from None
                raise ValueError(f"{name}: its entries do not parse together") from None
        return firsts

    def _ledger_token(self) -> tuple[int, float] | None:
        try:
            with self._session() as s:
                got = s.exec(
                    select(LedgerState.cycle, LedgerState.saved_at).where(LedgerState.id == 1)
                ).first()
        except SQLAlchemyError as e:
            raise self._fail("reading the ledger", e) from None
        return None if got is None else (got[0], got[1])

    def _job_rows(self) -> list[Any]:
        try:
            with self._session() as s:
                rows = s.exec(
                    select(LedgerJobRow.job_id, LedgerJobRow.data).order_by(LedgerJobRow.job_id)
                ).all()
        except SQLAlchemyError as e:
            raise self._fail("reading the ledger", e) from None
        loads = orjson.loads
        out = []
        for job_id, data in rows:
            try:
                out.append(loads(data))
            except orjson.JSONDecodeError as e:
                raise ValueError(f"job {job_id}'s row: {e}") from None
        return out

    def last_cycle_at(self) -> float | None:
        """When the last cycle was saved (the snapshot's time); None before the first."""
        try:
            with self._session() as s:
                row = s.get(LedgerState, 1)
        except SQLAlchemyError as e:
            raise self._fail("reading the ledger", e) from None
        return row.saved_at if row is not None else None

    def ledger_cycle(self) -> int:
        with self._session() as s:
            row = s.get(LedgerState, 1)
        return row.cycle if row is not None else 0

    # --- the cycle's transaction ---------------------------------------------------------
    def save_cycle(self, w: CycleWrite) -> None:
        data = _dumps(w.ledger.to_dict(compact=True, jobs=False, logs=False))
        try:
            with self._session() as s, s.begin():
                conn = s.connection()
                self._fenced(conn)
                row = s.get(LedgerState, 1)
                known = (
                    self._rows
                    if row is not None and (row.cycle, row.saved_at) == self._rows_token
                    else None
                )
                changed, gone = w.ledger.changed_rows(known or {})
                if known is None:
                    conn.execute(delete(LedgerJobRow))
                else:
                    for chunk in _chunks(gone):
                        conn.execute(delete(LedgerJobRow).where(LedgerJobRow.job_id.in_(chunk)))
                if changed:
                    rows = [
                        {"job_id": j, "data": _dumps(Ledger.row(e))} for j, e in changed.items()
                    ]
                    _upsert(
                        conn,
                        LedgerJobRow,
                        rows,
                        [j for j in changed if j in known] if known else [],
                    )
                marks = {
                    name: _write_log(
                        conn,
                        name,
                        getattr(w.ledger, name),
                        (self._logs or {}).get(name) if known is not None else None,
                    )
                    for name in LOGS
                }
                if row is None:
                    s.add(
                        LedgerState(
                            id=1, data=data, saved_at=w.now, cycle=w.cycle, epoch=self.epoch
                        )
                    )
                else:
                    row.data, row.saved_at, row.cycle = data, w.now, w.cycle
                    row.epoch = self.epoch
                if w.pushed:
                    ep = self.epoch
                    ids = sorted(w.pushed)
                    for chunk in _chunks(ids):
                        conn.execute(delete(SiteFactorRow).where(SiteFactorRow.job_id.in_(chunk)))
                    conn.execute(
                        insert(SiteFactorRow),
                        [
                            {"job_id": j, "value": w.pushed[j], "pushed_at": w.now, "epoch": ep}
                            for j in ids
                        ],
                    )
                if w.decisions:
                    conn.execute(
                        insert(DecisionRow),
                        [
                            {"at": w.now, "job_id": j, "kind": k, "value": v, "reason": r}
                            for j, k, v, r in w.decisions
                        ],
                    )
                blob = None
                if w.explanation_parts is not None:
                    _write_parts(conn, w.explanation_parts, w.now)
                    p = w.explanation_parts
                    blob = _dumps(
                        {
                            "v": 3,
                            "keys": list(p.keys),
                            "per_cycle": p.per_cycle,
                            "ids": p.ids,
                            "columns": p.columns,
                            "derive": p.derive or {},
                        }
                    )
                elif w.explanations is not None:
                    conn.execute(delete(ExplanationPart))
                    blob = _dumps(w.explanations)
                if blob is not None:
                    ex = s.get(ExplanationSnapshot, 1)
                    if ex is None:
                        s.add(ExplanationSnapshot(id=1, at=w.now, data=blob))
                    else:
                        ex.at, ex.data = w.now, blob
                if w.forget_jobs:
                    for chunk in _chunks(sorted(w.forget_jobs)):
                        conn.execute(delete(SiteFactorRow).where(SiteFactorRow.job_id.in_(chunk)))
                if w.utilisation:
                    ids = sorted(w.utilisation)
                    for chunk in _chunks(ids):
                        conn.execute(
                            delete(JobUtilisationRow).where(JobUtilisationRow.job_id.in_(chunk))
                        )
                    conn.execute(
                        insert(JobUtilisationRow), [_utilisation_row(w.utilisation[j]) for j in ids]
                    )
                if w.energy:
                    write_energy(conn, w.energy)
        except SQLAlchemyError as e:
            self._rows = self._rows_token = self._logs = None
            raise self._fail("saving the cycle", e) from None
        self._logs = marks
        if known is None:
            self._rows = changed
        else:
            known.update(changed)
            for j in gone:
                del known[j]
        self._rows_token = (w.cycle, w.now)

    def prune(self, keep_decisions_after: float) -> int:
        """Drop decisions, closed preemptions and utilisation summaries older than a cutoff: bounded growth."""
        try:
            with self._session() as s, s.begin():
                conn = s.connection()
                n = (
                    conn.execute(
                        delete(DecisionRow).where(DecisionRow.at < keep_decisions_after)
                    ).rowcount
                    or 0
                )
                n += (
                    conn.execute(
                        delete(PreemptionRow).where(
                            PreemptionRow.updated_at < keep_decisions_after,
                            PreemptionRow.state.not_in(PREEMPTION_OPEN_STATES),
                        )
                    ).rowcount
                    or 0
                )
                n += (
                    conn.execute(
                        delete(JobUtilisationRow).where(
                            JobUtilisationRow.updated_at < keep_decisions_after
                        )
                    ).rowcount
                    or 0
                )
        except SQLAlchemyError as e:
            raise self._fail("pruning old rows", e) from None
        return n

    # --- SiteFactor ----------------------------------------------------------------------
    def site_factors(self) -> dict[int, int]:
        try:
            with self._session() as s:
                return {r.job_id: r.value for r in s.exec(select(SiteFactorRow)).scalars()}
        except SQLAlchemyError as e:
            raise self._fail("reading SiteFactors", e) from None

    def site_factor_epochs(self) -> dict[int, int]:
        """job -> the leader epoch that recorded its SiteFactor (who pushed it)."""
        try:
            with self._session() as s:
                rows = s.exec(select(SiteFactorRow.job_id, SiteFactorRow.epoch)).all()
        except SQLAlchemyError as e:
            raise self._fail("reading SiteFactors", e) from None
        return {j: e for j, e in rows}

    def forget_site_factors(self, job_ids: list[int], now: float, reason: str) -> None:
        """Drop the SiteFactor record of ``job_ids`` (after they were set back to 0), with a decision each."""
        try:
            with self._session() as s, s.begin():
                conn = s.connection()
                self._fenced(conn)
                for chunk in _chunks(sorted(job_ids)):
                    conn.execute(delete(SiteFactorRow).where(SiteFactorRow.job_id.in_(chunk)))
                if job_ids:
                    conn.execute(
                        insert(DecisionRow),
                        [
                            {
                                "at": now,
                                "job_id": j,
                                "kind": "priority",
                                "value": 0,
                                "reason": reason,
                            }
                            for j in sorted(job_ids)
                        ],
                    )
        except SQLAlchemyError as e:
            raise self._fail("forgetting SiteFactors", e) from None

    # --- GPU utilisation summaries --------------------------------------------------------
    def utilisation_summaries(
        self, job_ids: list[int] | None = None
    ) -> dict[int, JobUtilisationSummary]:
        """Stored summaries (all, or those of ``job_ids``), by job id."""
        q = select(JobUtilisationRow)
        try:
            with self._session() as s:
                if job_ids is None:
                    rows = list(s.exec(q).scalars())
                else:
                    rows = []
                    for chunk in _chunks(sorted(set(job_ids))):
                        rows += list(s.exec(q.where(JobUtilisationRow.job_id.in_(chunk))).scalars())
        except SQLAlchemyError as e:
            raise self._fail("reading utilisation summaries", e) from None
        out = {}
        for r in rows:
            d = r.model_dump()
            try:
                d["gpu_seen"] = {
                    str(k): float(v) for k, v in json.loads(r.gpu_seen or "{}").items()
                }
            except (ValueError, TypeError, AttributeError):
                d["gpu_seen"] = {}
            out[r.job_id] = JobUtilisationSummary.from_dict(d)
        return out

    # --- preemptions (write-ahead) -------------------------------------------------------
    def begin_preemption(
        self, victim: int, need: int, now: float, restarts: int, reason: str
    ) -> int:
        """Commit a ``signalling`` row BEFORE the signal is sent; returns its id."""
        try:
            with self._session() as s, s.begin():
                self._fenced(s.connection())
                row = PreemptionRow(
                    epoch=self.epoch,
                    victim_job_id=victim,
                    need_job_id=need,
                    state="signalling",
                    signalled_at=now,
                    restarts_at_signal=restarts,
                    updated_at=now,
                    reason=reason,
                )
                s.add(row)
                s.flush()
                s.add(DecisionRow(at=now, job_id=victim, kind="preempt", value=need, reason=reason))
                return int(row.id)
        except SQLAlchemyError as e:
            raise self._fail("recording a preemption", e) from None

    def set_preemption_state(self, row_id: int, state: str, now: float, note: str = "") -> None:
        try:
            with self._session() as s, s.begin():
                self._fenced(s.connection())
                row = s.get(PreemptionRow, row_id)
                if row is None:
                    raise StoreError(f"database {self.shown}: preemption {row_id} does not exist")
                row.state, row.updated_at, row.epoch = state, now, self.epoch
                s.add(
                    DecisionRow(
                        at=now,
                        job_id=row.victim_job_id,
                        kind=f"preempt-{state}",
                        value=row.need_job_id,
                        reason=note or row.reason,
                    )
                )
        except SQLAlchemyError as e:
            raise self._fail("updating a preemption", e) from None

    def adopt_preemptions(self, now: float) -> list[PreemptionRow]:
        """A new leader's first step: the open preemptions an earlier epoch left half done (a
        signal sent, no requeue yet), now this epoch's to finish, each with a decision saying
        so. Returns them as they were (their old epoch)."""
        epoch = self.epoch
        try:
            with self._session() as s, s.begin():
                self._fenced(s.connection())
                q = select(PreemptionRow).where(
                    PreemptionRow.state.in_(PREEMPTION_OPEN_STATES), PreemptionRow.epoch != epoch
                )
                rows = list(s.exec(q.order_by(PreemptionRow.id)).scalars())
                before = [PreemptionRow.model_validate(r.model_dump()) for r in rows]
                for r in rows:
                    s.add(
                        DecisionRow(
                            at=now,
                            job_id=r.victim_job_id,
                            kind="preempt-adopted",
                            value=r.need_job_id,
                            reason=f"{r.state} step of leader epoch {r.epoch} taken over by "
                            f"epoch {epoch}",
                        )
                    )
                    r.epoch = epoch
        except SQLAlchemyError as e:
            raise self._fail("taking over open preemptions", e) from None
        return before

    def preemptions(
        self,
        *,
        open_only: bool = False,
        victim: int | None = None,
        states: Sequence[str] | None = None,
        since: float | None = None,
    ) -> list[PreemptionRow]:
        """Preemption rows, oldest first: open ones only, one victim's, in ``states``, or
        those signalled at ``since`` or later."""
        q = select(PreemptionRow).order_by(PreemptionRow.id)
        if open_only:
            q = q.where(PreemptionRow.state.in_(PREEMPTION_OPEN_STATES))
        if victim is not None:
            q = q.where(PreemptionRow.victim_job_id == victim)
        if states is not None:
            q = q.where(PreemptionRow.state.in_(tuple(states)))
        if since is not None:
            q = q.where(PreemptionRow.signalled_at >= since)
        try:
            with self._session() as s:
                return list(s.exec(q).scalars())
        except SQLAlchemyError as e:
            raise self._fail("reading preemptions", e) from None

    def preempted_pairs(self) -> dict[tuple[int, int], float]:
        """(victim, need) -> latest signal time: a victim is never preempted twice for one need."""
        out: dict[tuple[int, int], float] = {}
        with self._session() as s:
            for v, n, t in s.exec(
                select(
                    PreemptionRow.victim_job_id,
                    PreemptionRow.need_job_id,
                    PreemptionRow.signalled_at,
                )
            ):
                out[(v, n)] = max(t, out.get((v, n), t))
        return out

    def preemption_notes(self, victim: int) -> dict[tuple[int, str, float], str]:
        """(need, state, at) -> the note each step of ``victim``'s preemptions was recorded
        with: a closed row's note is the one at its ``updated_at`` under its ``state``."""
        q = (
            select(DecisionRow)
            .where(DecisionRow.job_id == victim, DecisionRow.kind.like("preempt-%"))
            .order_by(DecisionRow.id)
        )
        try:
            with self._session() as s:
                return {
                    (int(d.value or 0), d.kind.removeprefix("preempt-"), float(d.at)): d.reason
                    for d in s.exec(q).scalars()
                }
        except SQLAlchemyError as e:
            raise self._fail("reading preemption notes", e) from None

    # --- explain -------------------------------------------------------------------------
    def decisions(self, job_id: int, limit: int = 20) -> list[DecisionRow]:
        q = (
            select(DecisionRow)
            .where(DecisionRow.job_id == job_id)
            .order_by(DecisionRow.id.desc())
            .limit(limit)
        )
        try:
            with self._session() as s:
                return list(reversed(list(s.exec(q).scalars())))
        except SQLAlchemyError as e:
            raise self._fail("reading decisions", e) from None

    def decisions_of_kind(self, kind: str, limit: int = 10_000) -> list[DecisionRow]:
        """The newest ``limit`` decisions of one kind, oldest first (e.g. finished runs' GPU use)."""
        q = (
            select(DecisionRow)
            .where(DecisionRow.kind == kind)
            .order_by(DecisionRow.id.desc())
            .limit(limit)
        )
        try:
            with self._session() as s:
                return list(reversed(list(s.exec(q).scalars())))
        except SQLAlchemyError as e:
            raise self._fail("reading decisions", e) from None

    def explanation(self, job_id: int) -> dict[str, Any] | None:
        """The job's explanation from the last saved cycle (None if that cycle did not see it)."""
        return self._explanations([job_id]).get(job_id)

    def explanations(self) -> dict[int, dict[str, Any]]:
        """Every job's explanation from the last saved cycle (the queue ``explain`` places a job in)."""
        return self._explanations(None)

    def _explanations(self, job_ids: list[int] | None) -> dict[int, dict[str, Any]]:
        try:
            with self._session() as s:
                row = s.get(ExplanationSnapshot, 1)
                if row is None:
                    return {}
                doc = json.loads(row.data)
                if doc.get("v") not in (
                    2,
                    3,
                ):  # one document of whole explanations (an older store)
                    wanted = (
                        doc
                        if job_ids is None
                        else {str(j): doc[str(j)] for j in job_ids if str(j) in doc}
                    )
                    return {int(k): v for k, v in wanted.items()}
                keys, numbers = _numbers(doc, job_ids)
                ids = list(numbers)
                parts: dict[int, dict[str, Any]] = {}
                q = select(ExplanationPart.job_id, ExplanationPart.data)
                if job_ids is None:
                    rows = s.exec(q).all()
                else:
                    rows = []
                    for chunk in _chunks(ids):
                        rows += s.exec(q.where(ExplanationPart.job_id.in_(chunk))).all()
                for j, data in rows:
                    parts[j] = json.loads(data)
        except SQLAlchemyError as e:
            raise self._fail("reading explanations", e) from None
        shared = doc.get("per_cycle") or {}
        derive = doc.get("derive")
        out = {
            j: {**parts.get(j, {"job_id": j}), **shared, **dict(zip(keys, numbers[j]))} for j in ids
        }
        if derive is not None:
            for e in out.values():
                finish_numbers(e, derive)
        return out

    def counts(self) -> dict[str, int]:
        out = {}
        with self._session() as s:
            for name, model in (
                ("site_factors", SiteFactorRow),
                ("preemptions", PreemptionRow),
                ("decisions", DecisionRow),
                ("explanations", ExplanationSnapshot),
                ("utilisation", JobUtilisationRow),
                ("energy", JobEnergyRow),
            ):
                out[name] = s.exec(select(func.count()).select_from(model)).scalar_one()
        return out


def _numbers(
    doc: dict[str, Any], job_ids: list[int] | None
) -> tuple[list[str], dict[int, list[Any]]]:
    """The keys, and each wanted job's numbers in their order (all jobs for None), from a cycle's
    document: columns aligned with the ranked ids (v3; a job's rank is its place; the rest is
    completed by ``finish_numbers``), or a list per job (v2, written by earlier releases)."""
    if doc["v"] == 2:
        numbers = doc["numbers"]
        wanted = numbers if job_ids is None else [str(j) for j in job_ids if str(j) in numbers]
        return doc["keys"], {int(k): numbers[k] for k in wanted}
    ids, columns = doc["ids"], doc["columns"]
    wanted = None if job_ids is None else set(job_ids)
    return [*doc["keys"], "rank"], {
        j: [*(c[i] for c in columns), i] for i, j in enumerate(ids) if wanted is None or j in wanted
    }


def _dumps(obj: Any, option: int = 0) -> str:
    """Compact JSON as ``json.dumps(obj, separators=(",", ":"))`` writes it (integer keys as
    strings), several times faster: at 100,000 jobs the ledger and the explanation numbers are
    about 20 MB a cycle. The store's data holds no infinite or NaN numbers (orjson would write
    them as null); reads use the standard library, which accepts what either wrote."""
    return orjson.dumps(obj, option=option | orjson.OPT_NON_STR_KEYS).decode()


def _upsert(conn, model, rows: list[dict[str, Any]], existing: list[int]) -> None:
    """Insert ``rows`` of a table keyed by ``job_id``, replacing those that exist (``existing``
    names them: where the database has no upsert of its own, they are deleted first)."""
    name = conn.dialect.name
    if name in ("sqlite", "postgresql"):
        if name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as upsert
        else:
            from sqlalchemy.dialects.postgresql import insert as upsert
        stmt = upsert(model)
        others = {
            c.name: stmt.excluded[c.name] for c in model.__table__.columns if c.name != "job_id"
        }
        conn.execute(stmt.on_conflict_do_update(index_elements=["job_id"], set_=others), rows)
        return
    for chunk in _chunks(sorted(existing)):
        conn.execute(delete(model).where(model.job_id.in_(chunk)))
    conn.execute(insert(model), rows)


def _log_mark(entries: Any) -> tuple | None:
    """What a save of the log ``entries`` left in its rows: the log itself (weakly), its edits,
    its first entry's place and its end; None for a plain list (always rewritten)."""
    if not isinstance(entries, EntryLog):
        return None
    return weakref.ref(entries), entries.edits, entries.dropped, entries.dropped + len(entries)


def _write_log(conn, name: str, entries: Any, mark: tuple | None) -> tuple | None:
    """Bring the rows of the ledger's log ``name`` to ``entries``. With ``mark`` (what the rows
    hold): delete the entries that left the front, rewrite from the lowest place edited since
    (if the log remembers it), insert the new ones. Else rewrite the log. Returns the new mark."""
    dropped = getattr(entries, "dropped", 0)
    end = dropped + len(entries)
    rows = LedgerEntryRow
    new_edits = entries.edits - mark[1] if mark is not None and mark[0]() is entries else -1
    if 0 <= new_edits <= len(entries.edited):
        start = min([mark[3], *entries.edited[len(entries.edited) - new_edits :]])
        if dropped > mark[2]:
            conn.execute(delete(rows).where(rows.log == name, rows.idx < dropped))
        start = max(start, dropped)
        if start < mark[3]:
            conn.execute(delete(rows).where(rows.log == name, rows.idx >= start))
    else:
        conn.execute(delete(rows).where(rows.log == name))
        start = dropped
    if start < end:
        entry = Ledger.log_entry
        conn.execute(
            insert(rows),
            [
                {"log": name, "idx": i, "data": _dumps(entry(name, entries[i - dropped]))}
                for i in range(start, end)
            ],
        )
    return _log_mark(entries)


def _write_parts(conn, p: ExplanationParts, now: float) -> None:
    if p.replace_all:
        conn.execute(delete(ExplanationPart))
    else:
        for chunk in _chunks(sorted(set(p.gone) - set(p.rebuilt))):
            conn.execute(delete(ExplanationPart).where(ExplanationPart.job_id.in_(chunk)))
    if p.rebuilt:
        _upsert(
            conn,
            ExplanationPart,
            [{"job_id": j, "at": now, "data": _dumps(d)} for j, d in p.rebuilt.items()],
            [] if p.replace_all else list(p.rebuilt),
        )


def _utilisation_row(u: JobUtilisationSummary) -> dict[str, Any]:
    row = u.to_dict()
    row["gpu_seen"] = _dumps(u.gpu_seen, orjson.OPT_SORT_KEYS)
    return row


def _present(path: str) -> bool:
    """Whether the SQLite file exists; True where this user may not even look (its directory
    closed to them): opening it then says what is wrong, instead of "no such file"."""
    try:
        os.stat(path)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _sqlite_is_empty(path: str, shown: str, timeout_s: float) -> bool:
    """Whether an existing SQLite file holds no tables at all, read through a read-only handle."""
    import sqlite3

    try:
        with closing(
            sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=timeout_s)
        ) as conn:
            return conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    except sqlite3.Error as e:
        raise StoreError(f"database {shown}: cannot open it: {_short(e)}") from None


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # pragma: no cover - trivial
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


LOCKED_HINT = (
    "another process holds a lock on it (a second prioritizer, a backup, an sqlite3 shell?)"
)
DAMAGED_HINT = "the file is damaged: restore it from a backup (stop the prioritizer first)"


def _short(e: Exception, url: str = "") -> str:
    text = str(e).strip().splitlines()
    line = hide_password(text[0], url) if text else type(e).__name__
    low = line.lower()
    if "database is locked" in low or "lock timeout" in low:
        return f"{line}: {LOCKED_HINT}"
    if "malformed" in low or "not a database" in low:
        return f"{line}: {DAMAGED_HINT}"
    if "unable to open database file" in low:
        return (
            f"{line} (can this user read it and its directory? a ledger is its owner's alone, 0600)"
        )
    return line
