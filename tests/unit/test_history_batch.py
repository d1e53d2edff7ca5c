"""The batch key: a job's burst (or job array) siblings that have finished predict it first.

What is checked: the batch level answers before the coarser keys and only from finished
siblings; jobs without a batch skip it; bursts are derived from submit times alone; the ledger
keeps the batch; a job's own duration never reaches its own prediction in a replay; and the
engine's targeted re-keying of a batch's jobs gives the schedule of keying every job afresh at
every pass.
"""

from __future__ import annotations

import random

import pytest

from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job
from slurm_dl.core.policy import PolicyContext, get_policy
from slurm_dl.core.policy.gittins import GittinsPolicy
from slurm_dl.core.policy.history import (
    BATCH_TAG,
    Finished,
    HistoryLearner,
    features,
    has_batch,
    job_batch,
    job_features,
    split_batch,
    with_batch,
)
from slurm_dl.core.policy.qssf import QssfPolicy
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.ranking.ranker import PolicyRanker
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import derive_batches

LADDER = with_batch("account-gpus")


def rec(gpu_s: float, batch: str = "", account: str = "vc", gpus: int = 1) -> Finished:
    return Finished(account, account, "", gpus, "", None, gpu_s, batch)


def test_ladders_with_a_batch():
    assert LADDER == (("batch",), ("account", "gpus"), ("account",), ())
    assert with_batch(LADDER) == LADDER
    assert has_batch(LADDER) and not has_batch("full")
    assert split_batch(LADDER) == ((("batch",),), (("account", "gpus"), ("account",), ()))


def test_siblings_answer_first_and_only_for_their_batch():
    lr = HistoryLearner(LADDER, min_jobs=3, batch_min_jobs=1)
    lr.extend([rec(10.0), rec(20.0), rec(30.0)])
    assert lr.predict(features(account="vc", gpus=1, batch="b1")) == pytest.approx(20.0)
    lr.add(rec(500.0, "b1"))
    m = lr.match(features(account="vc", gpus=1, batch="b1"))
    assert m.level == 0 and m.samples == (500.0,)
    # another batch, and a job without one, go on to the coarser keys
    assert lr.match(features(account="vc", gpus=1, batch="b2")).level == 1
    assert lr.match(features(account="vc", gpus=1)).level == 1
    # a sibling that has run past every finished sibling falls back too (here to nothing)
    assert lr.match(features(account="vc", gpus=1, batch="b1"), above=400.0).level == 0
    assert lr.match(features(account="vc", gpus=1, batch="b1"), above=600.0) is None


def test_jobs_without_a_batch_do_not_pool_under_the_empty_batch():
    lr = HistoryLearner(LADDER, min_jobs=1)
    lr.add(rec(7.0))
    assert lr.match(features(account="vc", gpus=1)).level == 1
    assert not any(k[0] == 0 for k in lr._by_key)


def test_batch_min_jobs_applies_to_the_batch_levels_only():
    lr = HistoryLearner(LADDER, min_jobs=3, batch_min_jobs=2)
    lr.extend([rec(1.0), rec(2.0), rec(3.0), rec(100.0, "b")])
    assert lr.match(features(account="vc", gpus=1, batch="b")).level == 1
    lr.add(rec(110.0, "b"))
    assert lr.match(features(account="vc", gpus=1, batch="b")).level == 0
    assert lr.gittins(features(account="vc", gpus=1, batch="b"), 0.0)[0] == pytest.approx(
        1 / 105.0
    )  # mean size
    with pytest.raises(ValueError, match="batch_min_jobs"):
        HistoryLearner(LADDER, batch_min_jobs=0)


def test_a_job_array_names_the_batch_before_a_derived_tag():
    j = Job(job_id=1, account="vc", num_gpus=1, tags={BATCH_TAG: "burst:x"})
    assert job_batch(j) == "burst:x" and job_features(j).batch == "burst:x"
    j.array_job_id = 77
    assert job_batch(j) == "array:77"
    assert job_batch(Job(job_id=2)) == ""


def test_derive_batches_from_submit_times_alone():
    jobs = [
        Job(job_id=i, account=a, num_gpus=g, submit_time=t, duration=1.0)
        for i, (a, g, t) in enumerate(
            [
                ("a", 1, 0),
                ("a", 1, 50),
                ("b", 1, 60),
                ("a", 2, 70),
                ("a", 1, 140),
                ("a", 1, 300),
                ("a", 1, 390),
            ]
        )
    ]
    jobs.append(Job(job_id=9, account="a", num_gpus=1, submit_time=100, array_job_id=5))
    assert derive_batches(jobs, 90.0) == 4
    b = [job_batch(j) for j in jobs]
    assert b[0] == b[1] == b[4]  # 50 s and 90 s after the one before
    assert len({b[0], b[2], b[3], b[5]}) == 4  # other account, other GPU count, a gap of 160 s
    assert b[6] == b[5] and b[7] == "array:5"
    with pytest.raises(ValueError):
        derive_batches(jobs, -1.0)


def test_the_ledger_keeps_the_batch():
    led = Ledger()
    led.add_history(10.0, "u", "n", "a", 2, "p", 60.0, "burst:a")
    led.add_history(20.0, "u", "n", "a", 2, "p", 60.0)
    back = Ledger.from_dict(led.to_dict())
    assert [f.batch for f in back.finished] == ["burst:a", ""]
    old = led.to_dict()
    old["finished"] = [f[:7] for f in old["finished"]]  # a file written before the batch
    assert [f.batch for f in Ledger.from_dict(old).finished] == ["", ""]


def test_gittins_learns_a_batch_at_once_and_the_rest_at_checkpoints():
    pol = GittinsPolicy(history_keys=LADDER, batch_min_jobs=1, prior_weight=0.0)
    led = Ledger()
    ctx = PolicyContext(now=0.0, ledger=led)
    job = Job(job_id=1, account="vc", num_gpus=1, tags={BATCH_TAG: "b"})
    for x in range(100):
        led.add_history(1000.0 + x, "vc", "", "vc", 1)
    before = pol.job_index(job, ctx)
    led.add_history(10.0, "vc", "", "vc", 1, "", None, "b")
    assert pol.job_index(job, ctx) == pytest.approx(1 / 10.0)
    assert pol.job_index(job, ctx) != before


def _burst_jobs(seed: int, n: int = 90, dur_of: dict | None = None) -> list[Job]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.choice((0.0, 10.0, 10.0, 30.0, 2000.0))
        acct = f"a{rng.randint(0, 2)}"
        dur = float(rng.choice((60, 300, 900, 4000))) + rng.randint(0, 30)
        if dur_of and i in dur_of:
            dur = dur_of[i]
        out.append(
            Job(
                job_id=i,
                user=acct,
                account=acct,
                num_gpus=rng.choice((1, 1, 2, 4)),
                submit_time=t,
                duration=dur,
            )
        )
    derive_batches(out, 60.0)
    return out


def _policies():
    return {
        "gittins": lambda: GittinsPolicy(
            history_keys=LADDER, batch_min_jobs=1, prior_samples=[50.0, 5000.0]
        ),
        "qssf": lambda: QssfPolicy(history_keys=LADDER, batch_min_jobs=1),
        "qssf-queue": lambda: QssfPolicy(history_keys=LADDER, batch_min_jobs=1, preemptive=False),
    }


@pytest.mark.parametrize("name", ["gittins", "qssf", "qssf-queue"])
def test_a_jobs_own_duration_never_reaches_its_prediction(name):
    """Two replays that differ only in one job's duration see the same keys for every job
    until that job finishes in the shorter replay (a duration-blind policy: nothing before
    its end can depend on its length)."""
    seen: dict[int, list] = {}
    for k, dur in enumerate((333.0, 33_333.0)):
        jobs = _burst_jobs(3, dur_of={40: dur})
        pol = _policies()[name]()
        log = seen[k] = []
        inner = pol.key

        def spy(job, ctx, _inner=inner, _log=log):
            out = _inner(job, ctx)
            _log.append((ctx.now, job.job_id, out))
            return out

        pol.key = spy
        if hasattr(pol, "key_and_next_change"):
            inner_kn = pol.key_and_next_change

            def spy_kn(job, ctx, _inner=inner_kn, _log=log):
                out = _inner(job, ctx)
                _log.append((ctx.now, job.job_id, out[0]))
                return out

            pol.key_and_next_change = spy_kn
        res = run_cluster(
            jobs, ClusterSpec("c", 1, 8), PolicyRanker(pol, name), PreemptionCost(60.0)
        )
        if k == 0:
            end = next(sj.end_time for sj in res.jobs if sj.job.job_id == 40)
    a = [e for e in seen[0] if e[0] < end]
    b = [e for e in seen[1] if e[0] < end]
    assert a and a == b
    assert any(e[1] == 40 for e in a)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_targeted_rekeying_gives_the_schedule_of_keying_every_pass(seed):
    def replay(reference: bool):
        pol = _policies()["gittins"]()
        ranker = PolicyRanker(pol, "gittins")
        assert ranker.touched is not None
        if reference:  # every key read afresh at every pass
            ranker.pending_static = ranker.running_key_cached = False
            ranker.pending_wakes = True
            ranker.touched = None
        res = run_cluster(
            _burst_jobs(seed, 120), ClusterSpec("c", 1, 8), ranker, PreemptionCost(60.0)
        )
        return [(sj.first_start, sj.end_time, sj.preemptions) for sj in res.jobs]

    assert replay(False) == replay(True)


def test_qssf_predicts_a_burst_from_its_finished_siblings():
    pol = get_policy("qssf", None, history_keys=LADDER, batch_min_jobs=1, shrink_jobs=0.0)
    led = Ledger()
    ctx = PolicyContext(now=0.0, ledger=led)
    for x in (100.0, 200.0, 300.0):
        led.add_history(x, "vc", "", "vc", 1)
    job = Job(job_id=1, account="vc", user="vc", num_gpus=2, tags={BATCH_TAG: "b"})
    assert pol.predict(job, ctx) == pytest.approx(400.0)  # 200 s per GPU
    led.add_history(9000.0, "vc", "", "vc", 2, "", None, "b")  # a sibling: 4,500 s on 2 GPUs
    assert pol.predict(job, ctx) == pytest.approx(9000.0)
