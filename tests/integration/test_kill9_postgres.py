"""The kill -9 comparison (tests/unit/test_kill9_replay.py) with the store on PostgreSQL
(pgserver.PgServer: a throwaway server in a temp dir): the ledger, the deadline promises and
the SiteFactor rows after SIGKILLs at random points equal those of an uninterrupted run."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_kill9 as k9  # noqa: E402


def test_the_ledger_after_kill9_on_postgresql_equals_the_uninterrupted_one(pg, tmp_path):
    seed = int(os.environ.get("SLURM_DL_KILL9_SEED") or random.SystemRandom().randrange(2**31))
    print(f"kill -9 seed {seed} (SLURM_DL_KILL9_SEED={seed} replays it)")
    r = k9.compare(k9.RECORDING, (pg.create_db("a"), pg.create_db("b")), tmp_path, 3, seed)
    assert sum(x["exit"] == -9 for x in r["landed"]) >= 2  # a slow run may end before its kill
    assert r["equal"], f"seed {seed}: {r['differences']}; kills landed {r['landed']}"
    assert r["ledger_jobs"] >= 50 and r["admission_promises"] >= 1
