"""The preemption records say what Slurm did, with several victims at once and with slow
checkpoints: the state machine of ``prioritizer.preempt`` over cycles, against a scripted
in-memory cluster (``test_cycle.MemoryCluster``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

from prioritizer import Prioritizer
from prioritizer.metrics import PrioritizerMetrics
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.checkpoint_time import is_late_requeue, is_lost_work
from slurm_dl.core.model import JobState
from slurm_dl.explain.query import gather
from slurm_dl.explain.view import preemption_words
from slurm_dl.store import Store
from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]
STEPS_TAG = "sdl1:class=train;ckpt=steps;gpus=2;shape=1x2;lead=40"  # submitit, @40
BLOCKER = "sdl1:class=serve;ckpt=0;gpus=8;shape=1x8"


@pytest.fixture
def config():
    return load_config(ROOT / "site-configs" / "testbed.toml")


def _requeue_self(c: MemoryCluster, job_id: int) -> None:
    """What submitit does once checkpoint() returns: scontrol requeue of its own job."""
    j = c.jobs[job_id]
    j.state, j.nodes, j.start_time, j.restarts = JobState.PENDING, (), None, j.restarts + 1


def _notes(store: Store, victim: int) -> list[str]:
    """The note of each of the victim's preemptions where it stands now, newest first."""
    return [r["note"] for r in reversed(gather(store, victim).preemptions)]


def test_four_victims_two_slow_that_requeue_themselves_late_are_recorded_so(config, tmp_path):
    """Two victims requeue themselves within their lead; the waiting job then starts on GPUs
    freed elsewhere, so the two slow ones are let go; they requeue themselves all the same
    when their checkpoint ends. Their records must say that (Slurm took their GPUs), not
    "kept running, not requeued"."""
    c = MemoryCluster(nodes=2)
    for v in (1, 2, 3, 4):
        c.add(v, 2, running_on="gpu01", admin_comment=STEPS_TAG)
    c.add(9, 8, running_on="gpu02", admin_comment=BLOCKER)  # never a victim
    store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
    p = Prioritizer(config, c, store)
    p.run_cycle()
    c.now += 30
    c.add(10, 8)
    r = p.run_cycle()
    assert sorted(r.signalled) == [1, 2, 3, 4]
    assert sorted(c.signals) == [(v, "USR2@steps") for v in (1, 2, 3, 4)]
    c.now += 5
    _requeue_self(c, 1)
    _requeue_self(c, 2)
    c.jobs[9].state = JobState.COMPLETED  # the GPUs free up elsewhere: the waiting job starts
    p.run_cycle()
    c.start(10, "gpu02")
    c.now += 40  # past the 40 s lead: 3 and 4 still save
    p.run_cycle()
    states = {r.victim_job_id: r.state for r in store.preemptions()}
    assert states == {1: "requeued-self", 2: "requeued-self", 3: "abandoned", 4: "abandoned"}
    c.now += 20
    _requeue_self(c, 3)
    _requeue_self(c, 4)
    r = p.run_cycle()
    assert sorted(r.closed) == [(3, "requeued-self"), (4, "requeued-self")]
    rows = {r.victim_job_id: r for r in store.preemptions()}
    assert {v: row.state for v, row in rows.items()} == dict.fromkeys((1, 2, 3, 4), "requeued-self")
    assert c.requeues == []  # slurm-dl requeued none of them
    for v in (3, 4):
        assert is_late_requeue(_notes(store, v)[0]), _notes(store, v)
        assert p.ledger.jobs[v].checkpoint_s == pytest.approx(65.0)  # signal -> requeue seen
        doc = gather(store, v)
        words = preemption_words({"state": "PENDING"}, doc.preemptions)
        assert "after slurm-dl had stopped waiting" in words and "gave up its GPUs" in words
    for v in (1, 2):
        assert not is_late_requeue(_notes(store, v)[0])
        assert p.ledger.jobs[v].checkpoint_s == pytest.approx(5.0)
    for _ in range(3):  # watched once: a later cycle changes nothing
        c.now += 3
        assert p.run_cycle().closed == []


def test_a_requeue_that_cuts_a_save_short_is_lost_work_and_the_next_wait_is_longer(
    config, tmp_path
):
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01", account="vision", admin_comment=STEPS_TAG.replace("2", "8"))
    store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
    p = Prioritizer(config, c, store)
    metrics = PrioritizerMetrics()
    p.run_cycle()
    c.now += 30
    c.add(2, 8)
    p.run_cycle()
    c.now += 41  # the lead is over, the job still saves: slurm-dl requeues it
    r = p.run_cycle()
    metrics.observe(r, p)
    assert c.requeues == [1] and r.lost_work == ["vision"]
    (row,) = store.preemptions()
    assert row.state == "requeued"
    note = _notes(store, 1)[0]
    assert is_lost_work(note) and "requeued 41 s after the signal" in note, note
    assert "give it a lead of at least 110 s" in note
    rec = p.ledger.jobs[1]
    assert rec.lost_work == 1 and rec.checkpoint_s == pytest.approx(82.0)
    text = generate_latest(metrics.registry).decode()
    assert 'slurm_dl_prioritizer_lost_work_total{account="vision"} 1.0' in text
    words = preemption_words({"state": "PENDING"}, gather(store, 1).preemptions)
    assert "requeued while it still ran" in words and "was lost" in words
    # It runs again; the next preemption waits what its save needs, not its 40 s lead.
    c.start(1, "gpu01")
    c.jobs.pop(2)
    c.now += 30
    c.add(3, 8)
    p.run_cycle()
    assert "requeued after 110 s" in _notes(store, 1)[0], _notes(store, 1)[0]
    c.now += 60
    p.run_cycle()
    assert c.requeues == [1]  # 60 s > 40 s lead: still waited for
    c.now += 55
    p.run_cycle()
    assert c.requeues == [1, 1]


def test_a_job_that_saves_and_requeues_itself_is_a_clean_preemption(config, tmp_path):
    """The dlsubmit script's ending: save, exit the program, scontrol requeue at once."""
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01")
    store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
    p = Prioritizer(config, c, store)
    p.run_cycle()
    c.now += 30
    c.add(2, 1)
    p.run_cycle()
    c.now += 4
    _requeue_self(c, 1)
    r = p.run_cycle()
    assert r.closed == [(1, "requeued-self")] and r.lost_work == [] and c.requeues == []
    note = _notes(store, 1)[0]
    assert not is_lost_work(note) and not is_late_requeue(note)
    assert p.ledger.jobs[1].checkpoint_s == pytest.approx(4.0)
