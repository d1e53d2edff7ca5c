"""The cycle rebuilds explanations only where needed, yet every stored explanation reads back as
the whole explanation ``explain_job`` would give now (numbers current, slow parts rebuilt on
change, at the top of the queue and by rotation)."""

from __future__ import annotations

import json
from pathlib import Path

from prioritizer import Prioritizer
from prioritizer.explain_cache import NUMBER_KEYS
from slurm_dl.cli.config_file import load_config
from slurm_dl.store import Store

from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]


def _scene(tmp_path: Path, pending: int = 40):
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    c = MemoryCluster(nodes=2)
    c.add(1, 8, running_on="gpu01", account="a")
    c.add(2, 8, running_on="gpu02", account="b")
    for i in range(3, 3 + pending):
        c.add(i, 1 + i % 4, account="ab"[i % 2])
    p = Prioritizer(config, c, Store(f"sqlite:///{tmp_path / 'p.db'}"))
    p.explain_cache.top_pending = 5
    return c, p


def test_second_cycle_rebuilds_few_but_reads_back_whole(tmp_path: Path) -> None:
    c, p = _scene(tmp_path)
    p.run_cycle()
    first = p.store.explanations()
    assert len(first) == 42 and all("factors" in e for e in first.values())
    c.now += 5
    written = []
    real = p.store.save_cycle
    p.store.save_cycle = lambda w: (written.append(w), real(w))[1]
    p.run_cycle()
    parts = written[0].explanation_parts
    assert not parts.replace_all and len(parts.ids) == 42
    assert all(len(c) == 42 for c in parts.columns) and len(parts.columns) == len(parts.keys)
    assert len(parts.rebuilt) < 42 // 2, sorted(
        parts.rebuilt
    )  # running ones, the top 5, the rotation
    for jid in (1, 2):  # running jobs' attained service grew from 0 to 40 GPU-s: rebuilt
        assert jid in parts.rebuilt
    second = p.store.explanations()
    assert set(second) == set(first)
    for jid, e in second.items():
        assert e["at"] == c.now and "factors" in e and "order_key" in e
        assert set(NUMBER_KEYS) <= set(e)


def test_numbers_match_a_full_rebuild(tmp_path: Path) -> None:
    """For every job: the stored explanation equals explain_job's in everything but the slow parts
    of jobs not rebuilt this cycle, and their slow parts equal a rebuild's while nothing moved."""
    c, p = _scene(tmp_path, pending=12)
    captured = {}

    import prioritizer.cycle as cycle_mod

    real_explain = cycle_mod.explain_job

    def spy(j, ctx, policy, **kw):
        e = real_explain(j, ctx, policy, **kw)
        captured[j.job_id] = (j, ctx, policy, kw)
        return e

    cycle_mod.explain_job = spy
    try:
        p.run_cycle()
        c.now += 1
        p.explain_cache.refresh_cycles = 1  # rebuild everything: the reference
        p.run_cycle()
    finally:
        cycle_mod.explain_job = real_explain
    stored = p.store.explanations()
    for jid, (j, ctx, policy, kw) in captured.items():
        ref = real_explain(j, ctx, policy, **kw)
        got = stored[jid]
        ref_numbers = {k: ref.get(k) for k in NUMBER_KEYS}
        got_numbers = {k: got.get(k) for k in NUMBER_KEYS}
        ref_numbers["waiting_for"] = got_numbers["waiting_for"]  # built by the cache itself
        assert json.dumps(ref_numbers, sort_keys=True) == json.dumps(got_numbers, sort_keys=True), (
            jid
        )
        slow = {k: v for k, v in ref.items() if k not in NUMBER_KEYS}
        assert json.dumps(slow, sort_keys=True) == json.dumps(
            {k: v for k, v in got.items() if k not in NUMBER_KEYS and k != "gpu_utilisation"},
            sort_keys=True,
        ), jid


def test_gone_jobs_leave_and_a_new_daemon_rewrites_all(tmp_path: Path) -> None:
    c, p = _scene(tmp_path, pending=6)
    p.run_cycle()
    del c.jobs[5]
    c.now += 5
    p.run_cycle()
    assert p.store.explanation(5) is None and p.store.explanation(6) is not None
    again = Prioritizer(p.config, c, Store(p.store.url))
    c.now += 5
    again.run_cycle()
    assert set(again.store.explanations()) == {j for j in c.jobs}


def test_a_store_written_by_an_earlier_release_still_reads(tmp_path: Path) -> None:
    """Numbers kept as a list per job (the v2 document) read back as they were written; the
    current columns carry the same values for the same cycle."""
    import sqlite3
    from contextlib import closing

    c, p = _scene(tmp_path, pending=6)
    p.run_cycle()
    now_doc = p.store.explanations()
    keys = [
        "state",
        "state_reason",
        "score",
        "rank",
        "site_factor",
        "attained_gpu_s",
        "executed_s",
        "restarts",
        "deadline_slack_s",
        "account_usage_gpu_s",
        "waiting_for",
    ]
    v2 = {
        "v": 2,
        "keys": keys,
        "per_cycle": {"at": c.now, "ranked": len(now_doc)},
        "numbers": {str(j): [e[k] for k in keys] for j, e in now_doc.items()},
    }
    path = tmp_path / "p.db"
    with closing(sqlite3.connect(path)) as con, con:
        con.execute("UPDATE sdl_explanations SET data = ? WHERE id = 1", (json.dumps(v2),))
    again = Store(f"sqlite:///{path}").explanations()
    # the current document says with what half-life (the testbed's 1 h) usage decays; v2 did not
    assert all(e["usage_half_life_hours"] == 1.0 for e in now_doc.values())
    assert all(again[j].pop("usage_half_life_hours", None) is None for j in again)
    assert again == {
        j: {k: v for k, v in e.items() if k != "usage_half_life_hours"} for j, e in now_doc.items()
    }


def test_rotation_period_doubles_so_each_period_divides_the_next() -> None:
    from prioritizer.explain_cache import ExplanationCache

    cache = ExplanationCache(refresh_cycles=50, rotate_at_most=500)
    assert [cache.refresh_period(n) for n in (0, 11_000, 25_000, 25_001, 50_001, 110_000)] == [
        50,
        50,
        50,
        100,
        200,
        400,
    ]
    for n in range(0, 300_000, 997):
        period = cache.refresh_period(n)
        assert (
            -(-n // period) <= 500 and period % 50 == 0 and (period // 50) & (period // 50 - 1) == 0
        )


def test_a_big_queue_rotates_a_bounded_share_and_still_refreshes_every_job(tmp_path: Path) -> None:
    """With at most 4 rotating rebuilds per cycle, 42 jobs refresh every 16 cycles (2 doubled
    until 42 / period <= 4): no cycle rebuilds more than the top 5, the running jobs and 4, and
    every job's slow part is rebuilt within any 16 cycles in a row."""
    c, p = _scene(tmp_path)
    p.explain_cache.refresh_cycles, p.explain_cache.rotate_at_most = 2, 4
    assert p.explain_cache.refresh_period(42) == 16
    written = []
    real = p.store.save_cycle
    p.store.save_cycle = lambda w: (written.append(w), real(w))[1]
    for _ in range(1 + 2 * 16):
        p.run_cycle()
        c.now += 5
    rebuilt = [set(w.explanation_parts.rebuilt) for w in written[1:]]  # the first cycle builds all
    assert max(map(len, rebuilt)) <= 5 + 2 + 4, [sorted(r) for r in rebuilt]
    for start in range(len(rebuilt) - 16 + 1):
        seen = set().union(*rebuilt[start : start + 16])
        assert seen == set(c.jobs), (start, sorted(set(c.jobs) - seen))
    stored = p.store.explanations()
    oldest = min(e["factors_at"] for e in stored.values())
    assert c.now - 5 - oldest < 16 * 5
