"""The prioritizer's leader lease: one daemon acts on Slurm, every other one stands by.

The lease is the one row of ``sdl_leader``: its holder (host, pid, a random tag), an epoch
that grows by one at each take-over, and when it expires. Only the holder at the current
epoch pushes SiteFactors, signals or requeues (the prioritizer checks :meth:`Lease.check`
right before each of those calls), and the store writes a cycle, a preemption step or a
SiteFactor record only inside a transaction that finds the row still at this holder and epoch
(:meth:`Store.fence <slurm_dl.store.repository.Store>`): a leader that lost the lease while it
was paused cannot record anything when it wakes up, nor act.

PostgreSQL: a session advisory lock, taken on a connection this process holds for its life,
decides who leads; the row says who and at which epoch. The server ends that session when the
process dies (kill -9, a lost connection), and ``idle_session_timeout`` (the lease's length)
ends it when the process stops answering (SIGSTOP, a hung host): the lock is then free for a
stand-by. Renewal is a statement on that session every third of the lease.

SQLite: the row alone, taken and renewed under ``BEGIN IMMEDIATE`` (the database's write lock,
so two daemons never both see it free), with its expiry on the wall clock. A lock on the
file (``flock``) was not chosen: a stopped process keeps it forever, so a stand-by could never
take over from a SIGSTOPped leader. The file is local, so both daemons read the same clock.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from typing import Callable

from sqlalchemy import event, text
from sqlalchemy.exc import SQLAlchemyError

from ..core.database_url import sqlite_path
from ..core.errors import NotLeaderError, StoreError

ADVISORY_KEY = 0x5D1_1EAD
"""The advisory lock key of the prioritizer's lease (one per database)."""

_COLUMNS = "holder, epoch, host, pid, renewed_at, expires_at, taken_at"


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """The lease as stored: who leads, at which epoch, renewed and valid until when."""

    holder: str
    epoch: int
    host: str
    pid: int
    renewed_at: float
    expires_at: float
    taken_at: float  # when this epoch began

    def who(self) -> str:
        return f"{self.host} pid {self.pid}"

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


def read_lease(store) -> LeaseRow | None:
    """The lease row of ``store`` (None: no prioritizer has led yet)."""
    try:
        with store.engine.connect() as conn:
            row = conn.execute(text(f"SELECT {_COLUMNS} FROM sdl_leader WHERE id = 1")).first()
    except SQLAlchemyError as e:
        raise store._fail("reading the leader lease", e) from None
    return LeaseRow(*row) if row is not None else None


class Lease:
    """This process's claim to lead. ``lease_s``: how long the lease lasts unrenewed (a stand-by
    takes over when it ran out); ``clock``: wall time (the row's expiry), ``mono``: this
    process's monotonic clock (it advances while the process is stopped)."""

    def __init__(
        self,
        store,
        lease_s: float,
        *,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.lease_s = float(lease_s)
        self.clock, self.mono = clock, mono
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.holder = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.epoch: int | None = None
        self.taken_from: LeaseRow | None = None  # the row this daemon took over (None: free)
        self.lost_why = ""
        self._valid_until = 0.0  # monotonic: beyond it, not leading until renewed
        self._lock = threading.RLock()
        self._pg = store.engine.dialect.name == "postgresql"
        self._conn = None  # PostgreSQL: the session that holds the advisory lock
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        if self._pg:  # a stopped leader's open transaction must not block the new one for long
            ms = int(self.lease_s * 1000)

            @event.listens_for(store.engine, "connect")
            def _timeouts(dbapi_conn, _record) -> None:  # pragma: no cover - trivial
                with dbapi_conn.cursor() as cur:
                    cur.execute(f"SET idle_in_transaction_session_timeout = {ms}")
                dbapi_conn.commit()

            store.engine.dispose()  # connections opened before the listener get it too

    @property
    def held(self) -> bool:
        return self.epoch is not None and self.mono() < self._valid_until

    # --- taking ---------------------------------------------------------------------------
    def try_take(self) -> bool:
        """Lead if nobody else does; True when this daemon now holds the lease (a new epoch when
        it was not holding it already)."""
        with self._lock:
            if self.held and self.renew():
                return True
            t0 = self.mono()
            try:
                row = self._take_pg() if self._pg else self._take_sqlite()
            except (SQLAlchemyError, sqlite3.Error) as e:
                self._drop(f"the database did not answer: {_one_line(e)}")
                return False
            if row is None:
                return False
            self.epoch = row.epoch
            self._valid_until = t0 + self.lease_s
            self.store.fence = (self.holder, self.epoch)
            return True

    def _row_values(self, now: float) -> dict:
        return {
            "h": self.holder,
            "host": self.host,
            "pid": self.pid,
            "now": now,
            "exp": now + self.lease_s,
        }

    _UPSERT = (
        "INSERT INTO sdl_leader (id, holder, epoch, host, pid, renewed_at, expires_at, taken_at) "
        "VALUES (1, :h, 1, :host, :pid, :now, :exp, :now) ON CONFLICT (id) DO UPDATE SET "
        "holder = :h, epoch = sdl_leader.epoch + 1, host = :host, pid = :pid, "
        "renewed_at = :now, expires_at = :exp, taken_at = :now"
    )

    def _take_sqlite(self) -> LeaseRow | None:
        with closing(self._sqlite()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                got = conn.execute(f"SELECT {_COLUMNS} FROM sdl_leader WHERE id = 1").fetchone()
                before = LeaseRow(*got) if got is not None else None
                now = self.clock()
                if before is not None and before.holder != self.holder and not before.expired(now):
                    conn.execute("ROLLBACK")
                    return None
                conn.execute(self._UPSERT, self._row_values(now))
                got = conn.execute(f"SELECT {_COLUMNS} FROM sdl_leader WHERE id = 1").fetchone()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        self.taken_from = before
        return LeaseRow(*got)

    def _take_pg(self) -> LeaseRow | None:
        conn = self._session()
        if not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_KEY}).scalar():
            return None
        before = conn.execute(text(f"SELECT {_COLUMNS} FROM sdl_leader WHERE id = 1")).first()
        self.taken_from = LeaseRow(*before) if before is not None else None
        got = conn.execute(
            text(self._UPSERT + f" RETURNING {_COLUMNS}"), self._row_values(self.clock())
        ).first()
        return LeaseRow(*got)

    def _session(self):
        """PostgreSQL: the connection that holds the advisory lock (opened when none is)."""
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._conn = self.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            ms = int(self.lease_s * 1000)
            self._conn.execute(text(f"SET idle_session_timeout = {ms}"))
            self._conn.execute(text("SET idle_in_transaction_session_timeout = 0"))
        return self._conn

    def _sqlite(self) -> sqlite3.Connection:
        path = sqlite_path(self.store.url)
        return sqlite3.connect(path, timeout=self.lease_s / 3, isolation_level=None)

    # --- keeping --------------------------------------------------------------------------
    def renew(self) -> bool:
        """Extend the lease; False (and not leading from now on) when it is not this daemon's
        at its epoch any more, or the database cannot confirm it in time."""
        with self._lock:
            if self.epoch is None:
                return False
            t0 = self.mono()
            if t0 >= self._valid_until:
                return self._drop(f"the lease ran out ({self.lease_s:g} s) before it was renewed")
            sql = (
                "UPDATE sdl_leader SET renewed_at = :now, expires_at = :exp "
                "WHERE id = 1 AND holder = :h AND epoch = :e"
            )
            args = {"now": self.clock(), "h": self.holder, "e": self.epoch}
            args["exp"] = args["now"] + self.lease_s
            try:
                if self._pg:
                    n = self._session().execute(text(sql), args).rowcount
                else:
                    with closing(self._sqlite()) as conn:
                        n = conn.execute(sql, args).rowcount
            except (SQLAlchemyError, sqlite3.Error) as e:
                return self._drop(f"the database did not answer: {_one_line(e)}")
            if n != 1:
                return self._drop("another prioritizer took the lease over")
            self._valid_until = t0 + self.lease_s
            return True

    def check(self, what: str = "act") -> int:
        """Right before an action on Slurm: the epoch to record with it, after renewing the
        lease; raises :class:`NotLeaderError` when this daemon does not lead at its epoch."""
        with self._lock:
            epoch = self.epoch
            if epoch is None or not self.renew():
                raise NotLeaderError(
                    f"not the leader any more ({self.lost_why or 'no lease'}): did not {what}"
                )
            return epoch

    def _drop(self, why: str) -> bool:
        if self.epoch is not None:
            self.lost_why = why
        self.epoch = None
        self.store.fence = (self.holder, -1)  # every fenced write fails until taken again
        if self._conn is not None:  # PostgreSQL: a new session next time (the lock went with it)
            try:
                self._conn.invalidate()
            except SQLAlchemyError:
                pass
            self._conn = None
        return False

    def start_renewing(self) -> None:
        """Renew every third of the lease from a thread (cycles may last longer than that)."""
        if self._thread is not None:
            return

        def run() -> None:
            while not self._stop.wait(self.lease_s / 3):
                if self.epoch is not None:
                    self.renew()

        self._thread = threading.Thread(target=run, name="leader-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Give the lease up (a clean stop): a stand-by takes over at its next try."""
        self._stop.set()
        with self._lock:
            if self.epoch is None:
                return
            sql = "UPDATE sdl_leader SET expires_at = :now WHERE id = 1 AND holder = :h"
            args = {"now": self.clock(), "h": self.holder}
            try:
                if self._pg:
                    conn = self._session()
                    conn.execute(text(sql), args)
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_KEY})
                else:
                    with closing(self._sqlite()) as c:
                        c.execute(sql, args)
            except (SQLAlchemyError, sqlite3.Error, StoreError):
                pass  # it runs out on its own
            self._drop("released")
            self.store.fence = None


def _one_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
