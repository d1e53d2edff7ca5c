"""The pure ledger: accrual, requeue keeps attained service, decay, history, round trip."""

from __future__ import annotations

import json

import pytest

from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobState

R, P = JobState.RUNNING, JobState.PENDING
H = 3600.0


def job(i, state, gpus=2, **kw):
    return Job(i, user="ann", account="nlp", name="bert", num_gpus=gpus, state=state, **kw)


def test_running_job_accrues_gpus_times_time():
    led = Ledger(H)
    led.observe([job(1, R)], now=100.0)
    assert led.attained(1) == 0.0
    led.observe([job(1, R)], now=160.0)
    assert led.attained(1) == pytest.approx(120.0)
    assert led.jobs[1].executed_s == pytest.approx(60.0)
    led.observe([job(1, P)], now=200.0)  # requeued: was running until now
    assert led.attained(1) == pytest.approx(200.0)
    led.observe([job(1, P)], now=500.0)  # pending: no accrual
    assert led.attained(1) == pytest.approx(200.0)


def test_requeue_keeps_attained_and_it_never_decreases():
    led = Ledger(H)
    led.observe([job(1, R)], now=0.0)
    led.observe([job(1, R)], now=50.0)
    before = led.attained(1)
    # the restarted job's own counters start over at 0: ignored
    led.observe([job(1, R, restarts=1, attained_gpu_s=0.0, executed_s=0.0)], now=50.0)
    assert led.attained(1) == before == 100.0
    assert led.jobs[1].restarts == 1


def test_gone_job_is_closed_into_history():
    led = Ledger(H)
    led.observe([job(1, R), job(2, P)], now=0.0)
    led.observe([job(1, R), job(2, P)], now=10.0)
    led.observe([job(2, P)], now=30.0)  # gone: charged up to when last seen (t=10)
    assert led.jobs[1].finished and led.history == [pytest.approx(20.0)]
    assert [(f.user, f.name, f.account, f.gpu_s) for f in led.finished] == [
        ("ann", "bert", "nlp", pytest.approx(20.0))
    ]
    led.observe([job(2, JobState.CANCELLED)], now=40.0)
    assert led.jobs[2].finished and led.history[-1] == 0.0


def test_usage_decays_with_half_life():
    led = Ledger(H)
    led.observe([job(1, R, gpus=1)], now=0.0)
    led.observe([job(1, R, gpus=1)], now=1000.0)
    assert led.usage("nlp", 1000.0) == pytest.approx(1000.0)
    assert led.usage("nlp", 1000.0 + H) == pytest.approx(500.0)
    assert led.usage("nlp", 1000.0 + 2 * H) == pytest.approx(250.0)
    assert led.usage("nobody", 0.0) == 0.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="half-life must be positive"):
            Ledger(bad)
        with pytest.raises(ValueError, match="half-life must be positive"):
            led.half_life_s = bad
    assert led.half_life_s == H  # a refused value leaves it as it was


def test_half_life_is_the_sites_and_not_saved():
    from slurm_dl.core.config import FairShareConfig

    assert Ledger().half_life_s == 168 * 3600.0  # the default config's
    assert Ledger.from_config(None).half_life_s == 168 * 3600.0

    class Site:  # what from_config reads of a SiteConfig
        class policy:
            fairshare = FairShareConfig(half_life_hours=2.0)

    led = Ledger.from_config(Site)
    assert led.half_life_s == 7200.0
    led.observe([job(1, R, gpus=1)], now=0.0)
    led.observe([job(1, R, gpus=1)], now=100.0)
    back = Ledger.from_dict(led.to_dict(), 7200.0)
    assert back == led and back.usage("nlp", 7300.0) == pytest.approx(50.0)
    assert "half_life_s" not in str(led.to_dict())


def test_round_trip_through_json():
    led = Ledger(H)
    led.observe([job(1, R), job(2, P)], now=0.0)
    led.observe([job(1, R), job(2, R)], now=10.0)
    led.observe([job(2, R)], now=20.0)
    led.jobs[2].last_checkpoint_signal = 15.0
    again = Ledger.from_dict(json.loads(json.dumps(led.to_dict())))
    assert again == led
    assert again.attained(2) == led.attained(2) and again.history == led.history
    with pytest.raises(ValueError, match="format"):
        Ledger.from_dict({"jobs": [{"bogus": 1}]})


def test_compact_round_trip_rows_by_name_and_a_short_row_refused():
    led = Ledger(H)
    led.observe([job(1, R), job(2, P)], now=0.0)
    led.observe([job(1, R), job(2, R)], now=10.0)
    led.jobs[2].last_checkpoint_signal = 15.0
    saved = json.loads(json.dumps(led.to_dict(compact=True)))
    assert saved["jobs"][0][:2] == [1, "ann"] and "job_fields" in saved
    again = Ledger.from_dict(saved)
    assert (
        again == led and again.attained(1) == 20.0 and again.jobs[2].last_checkpoint_signal == 15.0
    )
    # rows saved with fewer fields (an older version): read by name, the rest take their defaults
    names = saved["job_fields"]
    keep = [n for n in names if n not in ("waited_before_s", "wait_from")]
    older = {
        **saved,
        "job_fields": keep,
        "jobs": [[v for n, v in zip(names, row) if n in keep] for row in saved["jobs"]],
    }
    back = Ledger.from_dict(older)
    assert back.attained(1) == 20.0 and back.waited(1) is None
    with pytest.raises(ValueError, match="format: a job record has 2 values for"):
        Ledger.from_dict({**saved, "jobs": [[1, "ann"]]})
    with pytest.raises(ValueError, match="format"):
        Ledger.from_dict({**saved, "job_fields": ["job_id", "bogus"], "jobs": [[1, 2]]})


def test_job_missing_from_one_snapshot_is_reopened_with_its_service():
    led = Ledger(H)
    led.observe([job(1, R)], now=0.0)
    led.observe([job(1, R)], now=10.0)
    led.observe([], now=20.0)  # odd state mid-requeue: missing
    assert led.jobs[1].finished and led.history == [20.0]
    led.observe([job(1, P, restarts=1)], now=30.0)
    rec = led.jobs[1]
    assert not rec.finished and rec.attained_gpu_s == 20.0 and rec.restarts == 1
    assert led.history == [] and led.finished == []
    led.observe([job(1, R)], now=40.0)
    led.observe([job(1, R)], now=50.0)
    assert led.attained(1) == 40.0
    # a job that showed a finished state stays closed
    led.observe([job(1, JobState.COMPLETED)], now=60.0)
    led.observe([job(1, R)], now=70.0)
    assert led.jobs[1].finished and led.history == [60.0]
    assert led.reopen(99) is False


def test_the_global_history_keeps_the_latest_jobs_only(monkeypatch):
    import slurm_dl.core.ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "HISTORY_KEPT", 100)
    led = ledger_mod.Ledger(H)
    for i in range(1000):
        led.add_history(float(i), "u", "n", "a")
    assert 100 <= len(led.history) <= 110
    assert led.history[-1] == 999.0 and led.history == sorted(led.history)


def test_a_run_is_a_stretch_at_one_rate_opened_again_when_the_rate_changes():
    """Service of a running job is a stretch from when it began to count at GPUs × speed; a
    new GPU count or speed opens a new stretch from the last sighting, a larger figure from
    the snapshot is taken as it is and counted on from; the sums match cycle by cycle."""
    led = Ledger(H)
    speeds = {"a100": 1.0, "h100": 3.0}
    step = [
        (0.0, 2, {}),
        (10.0, 2, {}),
        (20.0, 2, {}),
        (30.0, 4, {}),
        (40.0, 4, {}),
        (50.0, 4, {"attained_gpu_s": 500.0}),
        (60.0, 4, {}),
    ]
    for now, gpus, extra in step:
        led.observe([job(1, R, gpus=gpus, gpu_type="h100", **extra)], now=now, speeds=speeds)
    # 0-30 at 2 GPUs × 3 (the count seen at 30 applies from 30), 30-50 at 4 × 3, then 500 from the snapshot
    assert led.attained(1) == pytest.approx(500.0 + 4 * 3 * 10)
    rec = led.jobs[1]
    assert rec.executed_s == pytest.approx(60.0) and rec.norm_executed_s == pytest.approx(180.0)
    assert rec.run_from == 50.0 and rec.run_rate == 12.0
    assert led.usage("nlp", 60.0) == pytest.approx(2 * 3 * 30 + 4 * 3 * 30, rel=1e-2)  # decay: ~1 %
    speeds["h100"] = 2.0  # the site changed the type's speed
    led.observe([job(1, R, gpus=4, gpu_type="h100")], now=70.0, speeds=speeds)
    led.observe([job(1, P, gpus=4)], now=80.0, speeds=speeds)  # requeued: ran until now
    assert led.attained(1) == pytest.approx(500.0 + 120.0 + 2 * 4 * 2 * 10)
    assert led.jobs[1].run_from is None and led.jobs[1].executed_s == pytest.approx(80.0)
    again = Ledger.from_dict(json.loads(json.dumps(led.to_dict(compact=True))))
    assert again == led and again.attained(1) == led.attained(1)


def test_a_record_saved_with_its_sums_reads_and_counts_on():
    """Saved by a release that added each cycle's service to ``attained_gpu_s``,
    ``executed_s`` and ``norm_executed_s``: the same figures, a new stretch at the next sighting."""
    led = Ledger(H)
    for now in (0.0, 10.0):
        led.observe([job(1, R)], now=now)
    d = led.to_dict()
    r = d["jobs"][0]
    for old, new in (
        ("attained_gpu_s", "attained_base_gpu_s"),
        ("executed_s", "executed_base_s"),
        ("norm_executed_s", "norm_executed_base_s"),
    ):
        r[old] = getattr(led.jobs[1], old)
        del r[new]
    for k in ("run_from", "run_rate", "run_speed"):
        del r[k]
    back = Ledger.from_dict(d)
    assert back.attained(1) == 20.0 and back.jobs[1].executed_s == 10.0
    back.observe([job(1, R)], now=25.0)
    assert back.attained(1) == 50.0 and back.jobs[1].executed_s == 25.0


def test_an_earlier_releases_per_key_history_is_read_and_not_kept():
    # earlier releases saved per-key lists beside the history; no policy reads them
    led = Ledger(H)
    led.observe([job(1, R)], now=0.0)
    led.observe([], now=10.0)
    saved = led.to_dict()
    assert "history_by_key" not in saved
    old = {**saved, "history_by_key": {"user/name:ann/bert": [10.0], "user:ann": [10.0]}}
    assert Ledger.from_dict(old) == led


def test_an_entry_log_counts_front_trims_apart_from_other_edits():
    import pickle

    from slurm_dl.core import ledger
    from slurm_dl.core.ledger import EntryLog

    log = EntryLog(range(10), dropped=5)
    log.append(10)
    log.extend([11, 12])
    log += [13]
    assert (log.dropped, log.edits, log[0], len(log)) == (5, 0, 0, 14)
    del log[:3]
    del log[0]
    del log[-len(log)]
    assert (log.dropped, log.edits, log[0]) == (10, 0, 5)
    assert log == [5, 6, 7, 8, 9, 10, 11, 12, 13]
    for change, at in (
        (lambda x: x.__delitem__(2), 2),
        (lambda x: x.__delitem__(slice(1, 3)), 1),
        (lambda x: x.pop(), 5),
        (lambda x: x.remove(11), 3),
        (lambda x: x.insert(-1, -1), 3),
        (lambda x: x.__setitem__(-1, 7), 4),
        (lambda x: x.sort(), 0),
        (lambda x: x.reverse(), 0),
        (lambda x: x.clear(), 0),
    ):
        before = log.edits
        change(log)
        assert log.edits == before + 1 and log.dropped == 10 and log.edited[-1] == 10 + at
    assert len(log.edited) == 9
    log.extend(range(100))
    for _ in range(100):
        log[0] = 1
    assert len(log.edited) == ledger.EDITS_KEPT and log.edits == 109
    back = pickle.loads(pickle.dumps(log))
    assert (type(back), back, back.dropped, back.edits, back.edited) == (
        EntryLog,
        log,
        10,
        109,
        log.edited,
    )


def test_history_trims_count_as_drops_and_a_reopen_as_an_edit(monkeypatch):
    import slurm_dl.core.ledger as ledger

    monkeypatch.setattr(ledger, "HISTORY_KEPT", 10)
    monkeypatch.setattr(ledger, "FINISHED_KEPT", 4)
    led = Ledger(H)
    for i in range(12):
        led.add_history(float(i), "ann", "bert", "nlp")
    assert (led.history.dropped, len(led.history), led.history.edits) == (2, 10, 0)
    assert (led.finished.dropped, led.finished_dropped, len(led.finished)) == (8, 8, 4)
    led.observe([job(1, R)], now=0.0)
    led.observe([job(1, R)], now=10.0)
    led.observe([], now=20.0)  # missing: closed into the history
    led.observe([job(1, R)], now=30.0)  # back: its entry withdrawn
    assert led.history.edits == 1 and led.finished.edits == 1
