"""The leader lease on a live PostgreSQL (pgserver.PgServer: a throwaway server in a temp dir):
the cases of tests/lease_cases.py, and what only a server does: a leader's session that ends
(kill -9, a lost connection, idle_session_timeout after SIGSTOP) frees the advisory lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


import lease_cases as cases
from slurm_dl.store import Store
from slurm_dl.store.lease import Lease, read_lease


def test_one_leads_the_other_stands_by(pg):
    cases.one_leads_the_other_stands_by(pg.create_db())


def test_a_paused_leader_loses_the_lease_and_cannot_act(pg):
    cases.a_paused_leader_loses_the_lease_and_cannot_act(pg.create_db())


def test_a_released_lease_is_taken_at_once(pg):
    cases.a_released_lease_is_taken_at_once(pg.create_db())


def test_leadership_takes_over_and_says_so(pg, caplog):
    cases.leadership_takes_over_and_says_so(pg.create_db(), caplog)


HOLDER = """
import sys, time
from slurm_dl.store import Store
from slurm_dl.store.lease import Lease
lease = Lease(Store(sys.argv[1]), float(sys.argv[2]))
assert lease.try_take()
print("leading", lease.epoch, flush=True)
lease.start_renewing()
time.sleep(600)
"""


def _holder(url: str, lease_s: float) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(lease_s)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().split()[0] == "leading"
    return p


def _take_within(lease: Lease, seconds: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if lease.try_take():
            return time.monotonic() - t0
        time.sleep(0.2)
    raise AssertionError(f"not taken over within {seconds} s")


def test_sigkill_and_sigstop_of_a_real_holder_free_the_lease(pg):
    url = pg.create_db()
    Store(url).close()
    p = _holder(url, 3.0)
    try:
        b = Lease(Store(url), 3.0)
        time.sleep(4.0)  # past one lease: the holder renews, so it still leads
        assert not b.try_take()
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        _take_within(b, 3.0)  # the server ended its session: the lock is free at once
        assert b.epoch == 2
        b.release()
    finally:
        p.kill()
        p.wait()
    p = _holder(url, 3.0)
    try:
        c = Lease(Store(url), 3.0)
        os.kill(p.pid, signal.SIGSTOP)
        waited = _take_within(c, 10.0)  # idle_session_timeout (the lease) ends its session
        assert waited > 1.0 and c.epoch == 4
        assert read_lease(c.store).holder == c.holder
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
