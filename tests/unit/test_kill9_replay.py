"""The prioritizer's store after a kill -9 at random points equals the one an uninterrupted run of
the same cycles writes: the daemon's own cycle over the real CLI backend and its parsers, fed
Slurm's recorded outputs of 60 snapshots of a live testbed (tests/data/kill9_frames.json.gz,
made by ``benchmarks/bench_kill9.py --record``), the store a real SQLite file, each killed run a
child process that is SIGKILLed after a random delay and restarted from the store's last cycle.
The kills' seed is printed (``SLURM_DL_KILL9_SEED`` replays it)."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_kill9 as k9  # noqa: E402


def _replay_in_process(url: str, workdir: Path, frames: int) -> None:
    from prioritizer import Prioritizer
    from slurm_dl.store import Store

    rec = k9.load_recording(k9.RECORDING)
    rec["frames"] = rec["frames"][:frames]
    store = Store(url)
    backend = k9.ReplayBackend(rec, workdir / "slurm.json")
    p = Prioritizer(k9.replay_config(workdir), backend, store)
    while backend.frame < frames:
        p.run_cycle()
        backend.frame = p.cycle_no
    assert not backend.writes_refused
    store.close()


def test_the_recording_drives_real_cycles_with_jobs_deadlines_and_site_factors(tmp_path):
    _replay_in_process(f"sqlite:///{tmp_path}/a.db", tmp_path, 60)
    got = k9.stored(f"sqlite:///{tmp_path}/a.db")
    assert got["cycle"] == 60
    assert len(got["ledger"]["jobs"]) >= 50  # jobs that came, ran and ended within the recording
    assert got["admission"]["admitted"] and got["admission"]["demoted"]  # promises made and refused
    assert len(got["site_factors"]) >= 30


def test_the_cycle_reads_no_wall_clock(tmp_path, monkeypatch):
    """The same frames with the machine's clock ten years ahead write the same store: the cycle's
    time is only the snapshot's."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _replay_in_process(f"sqlite:///{tmp_path}/a/s.db", tmp_path / "a", 40)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 10 * 365 * 86400.0)
    _replay_in_process(f"sqlite:///{tmp_path}/b/s.db", tmp_path / "b", 40)
    monkeypatch.undo()
    a, b = k9.stored(f"sqlite:///{tmp_path}/a/s.db"), k9.stored(f"sqlite:///{tmp_path}/b/s.db")
    assert a["ledger"] == b["ledger"]
    assert a["site_factors"] == b["site_factors"]
    assert sorted(a["decisions"], key=repr) == sorted(b["decisions"], key=repr)


def test_the_ledger_after_kill9_at_random_points_equals_the_uninterrupted_one(tmp_path):
    seed = int(os.environ.get("SLURM_DL_KILL9_SEED") or random.SystemRandom().randrange(2**31))
    print(f"kill -9 seed {seed} (SLURM_DL_KILL9_SEED={seed} replays it)")
    r = k9.compare(
        k9.RECORDING,
        (f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"),
        tmp_path,
        3,
        seed,
    )
    assert (
        len(r["landed"]) == 3 and sum(x["exit"] == -9 for x in r["landed"]) >= 2
    )  # a slow run may end first
    assert r["equal"], f"seed {seed}: {r['differences']}; kills landed {r['landed']}"
    assert r["ledger_jobs"] >= 50 and r["admission_promises"] >= 1


class _Killed(Exception):
    pass


def _replay_killed_at_save(tmp: Path, frames: int, die_at: int) -> None:
    """The replay, its process "killed" when it saves cycle ``die_at``: after that cycle's
    SiteFactor updates reached Slurm, before the store recorded them; then a fresh daemon."""
    from prioritizer import Prioritizer
    from slurm_dl.store import Store

    rec = k9.load_recording(k9.RECORDING)
    rec["frames"] = rec["frames"][:frames]
    url = f"sqlite:///{tmp}/s.db"
    for dies in (True, False):
        store = Store(url)
        backend = k9.ReplayBackend(rec, tmp / "slurm.json")
        p = Prioritizer(k9.replay_config(tmp), backend, store)
        backend.frame = store.ledger_cycle()
        save = store.save_cycle

        def dying(w, save=save, dies=dies):
            if dies and w.cycle == die_at:
                raise _Killed
            save(w)

        store.save_cycle = dying
        try:
            while backend.frame < frames:
                p.run_cycle()
                backend.frame = p.cycle_no
        except _Killed:
            pass
        store.close()


def test_a_kill_between_the_site_factor_update_and_the_save_leaves_the_stored_rows_as_slurm_has_them(
    tmp_path,
):
    """Slurm took the cycle's SiteFactors but the store never saved them: the restarted daemon
    sees Slurm already at the values it wants and pushes nothing, so the store's rows (what
    ``slurm-dl prioritizer reset`` undoes) must be taken from Slurm, not left as they were."""
    (tmp_path / "a").mkdir()
    _replay_in_process(f"sqlite:///{tmp_path}/a/s.db", tmp_path / "a", 30)
    a = k9.stored(f"sqlite:///{tmp_path}/a/s.db")
    for die_at in (11, 16, 30):  # cycles that change SiteFactors which the next cycle keeps
        d = tmp_path / f"b{die_at}"
        d.mkdir()
        _replay_killed_at_save(d, 30, die_at)
        b = k9.stored(f"sqlite:///{d}/s.db")
        assert b["ledger"] == a["ledger"]
        assert b["site_factors"] == a["site_factors"], f"killed while saving cycle {die_at}"
