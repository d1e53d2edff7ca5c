"""QSSF's predictor: run time learnt per GPU, keys shrunk towards coarser keys, and the time
limit asked corrected by the run/limit ratio learnt from finished jobs."""

from __future__ import annotations

import pytest

from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job
from slurm_dl.core.policy import PolicyContext, get_policy
from slurm_dl.core.policy.history import (
    Finished,
    HistoryLearner,
    features,
    limit_ratio,
    per_gpu_seconds,
    without_limit,
)
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.ranking.ranker import PolicyRanker
from slurm_dl.sim.engine.state import PreemptionCost

LADDER = (("user", "name"), ("user",), ())


def rec(gpu_s, user="ann", name="bert", gpus=1, limit=None):
    return Finished(user, "nlp", name, gpus, "gpu", limit, gpu_s)


def test_shrink_zero_is_the_most_specific_key_and_more_pulls_towards_the_coarser():
    h = HistoryLearner(LADDER, min_jobs=2)
    h.extend([rec(100.0), rec(300.0), rec(1000.0, name="gpt"), rec(1600.0, name="gpt")])
    h.extend([rec(10.0, user="bob")] * 4)
    f = features("ann", "nlp", "bert")
    assert h.shrunk_mean(f) == h.predict(f) == 200.0
    # whole history 380 (8 jobs); ann: (3000 + 2 x 380) / (4 + 2) = 626.67; ann/bert:
    # (400 + 2 x 626.67) / (2 + 2) = 413.33
    assert h.shrunk_mean(f, shrink=2.0) == pytest.approx((400.0 + 2 * (3000.0 + 2 * 380.0) / 6) / 4)
    # a huge pseudo-count: the whole history's mean
    assert h.shrunk_mean(f, shrink=1e12) == pytest.approx(380.0)
    # a key below min_jobs does not move the estimate (a new name of ann's: ann's own)
    assert h.shrunk_mean(features("ann", "nlp", "new"), shrink=2.0) == pytest.approx(3760.0 / 6)
    assert HistoryLearner(LADDER, min_jobs=2).shrunk_mean(f, shrink=5.0) is None


def test_shrunk_mean_conditions_on_what_the_job_has_shown():
    h = HistoryLearner(LADDER, min_jobs=2)
    h.extend([rec(100.0), rec(200.0), rec(300.0), rec(5000.0, user="bob"), rec(9000.0, user="bob")])
    f = features("ann", "nlp", "bert")
    assert h.shrunk_mean(f, above=150.0) == 250.0  # ann/bert beyond 150: 200, 300
    # beyond 250 only one ann/bert job: the whole history's jobs beyond 250
    assert h.shrunk_mean(f, above=250.0) == pytest.approx((300.0 + 5000.0 + 9000.0) / 3)
    assert h.shrunk_mean(f, above=1e6) is None
    # the sums follow new jobs
    h.add(rec(700.0))
    assert h.shrunk_mean(f, above=250.0) == 500.0


def test_values_other_than_gpu_seconds():
    assert (
        per_gpu_seconds(rec(800.0, gpus=4)) == 200.0 and per_gpu_seconds(rec(50.0, gpus=0)) == 50.0
    )
    assert limit_ratio(rec(800.0, gpus=4, limit=400.0)) == 0.5 and limit_ratio(rec(1.0)) is None
    h = HistoryLearner(LADDER, min_jobs=1, value=limit_ratio)
    h.extend([rec(800.0, gpus=4, limit=400.0), rec(5.0), rec(100.0, limit=1000.0)])
    assert h.count == 3 and h.match(features("ann", "nlp", "bert")).samples == (0.1, 0.5)
    assert without_limit("full")[0] == ("user", "name", "gpus")
    assert all("time_limit" not in lv for lv in without_limit("full")) and without_limit(
        "global"
    ) == ((),)
    assert without_limit([["time_limit"]]) == ((),)


def _ctx(*records) -> PolicyContext:
    led = Ledger()
    for gpu_s, user, name, gpus, limit in records:
        led.add_history(gpu_s, user, name, "nlp", gpus, "gpu", limit)
    return PolicyContext(now=0.0, ledger=led)


def test_qssf_learns_run_time_per_gpu():
    ctx = _ctx((800.0, "ann", "bert", 4, None), (1600.0, "ann", "bert", 8, None))
    p = get_policy(
        "qssf", None, history_keys=LADDER, min_jobs=1, use_time_limit=False, preemptive=False
    )
    # ann/bert ran 200 s on every GPU count: a 2-GPU run is 400 GPU-s
    assert p.predict(Job(1, user="ann", account="nlp", name="bert", num_gpus=2), ctx) == 400.0
    # past every job it is like (450 s a GPU): the site default, never below what it has used
    assert (
        p.predict(
            Job(2, user="ann", account="nlp", name="bert", num_gpus=2, attained_gpu_s=900.0), ctx
        )
        == 3600.0
    )
    assert (
        p.predict(
            Job(2, user="ann", account="nlp", name="bert", num_gpus=2, attained_gpu_s=5000.0), ctx
        )
        == 5000.0
    )
    assert (
        p.predict(Job(3, user="cat", account="x", name="y", num_gpus=2), ctx) == 400.0
    )  # whole history


def test_qssf_predicts_the_time_limit_times_the_learnt_ratio():
    p = get_policy("qssf", None, min_jobs=1, use_time_limit=True, shrink_jobs=0.0)
    job = Job(
        1, user="ann", account="nlp", name="bert", num_gpus=2, partition="gpu", time_limit=1000.0
    )
    # nothing learnt: the limit itself
    assert p.predict(job, _ctx()) == 2000.0
    assert p.predict(job, PolicyContext(now=0.0)) == 2000.0
    # ann's bert jobs ran a quarter of their limits; jobs without a limit teach no ratio
    ctx = _ctx(
        (500.0, "ann", "bert", 2, 1000.0),
        (50.0, "ann", "bert", 1, 200.0),
        (9e9, "ann", "bert", 2, None),
    )
    assert p.predict(job, ctx) == 500.0
    # a ratio above 1 (a job that overran its limit) counts as 1
    assert p.predict(job, _ctx((3000.0, "ann", "bert", 2, 1000.0))) == 2000.0
    # switched off, the limit is only a key: the one finished job with the same limit
    off = get_policy("qssf", None, min_jobs=1, use_time_limit=False, shrink_jobs=0.0)
    assert off.predict(job, ctx) == 500.0
    assert off.predict(
        Job(2, user="ann", account="nlp", name="bert", num_gpus=2, partition="gpu", time_limit=7.0),
        ctx,
    ) == pytest.approx(250.0 + 4.5e9)  # ann/bert on 2 GPUs


def test_the_defaults_use_the_time_limit_and_shrink():
    p = get_policy("qssf", None)
    assert p.use_time_limit and p.shrink_jobs > 0 and p.preemptive and p.discipline == "preemptive"
    with pytest.raises(ValueError, match="shrink_jobs"):
        get_policy("qssf", None, shrink_jobs=-1.0)


@pytest.mark.parametrize(
    "kw", [{}, {"preemptive": False}, {"use_time_limit": False, "shrink_jobs": 0.0}]
)
def test_a_jobs_own_run_never_shapes_its_own_start(kw):
    """The job under test asks the same limit in both runs; only its actual run differs."""
    starts = []
    for d in (1.0, 900.0):
        jobs = [
            Job(
                i,
                user="ann",
                account="nlp",
                name=f"bert-{i}",
                num_gpus=1,
                submit_time=i * 10.0,
                duration=100.0 + 50.0 * (i % 4),
                time_limit=400.0 if i % 2 else None,
            )
            for i in range(40)
        ]
        jobs.append(
            Job(
                99,
                user="ann",
                account="nlp",
                name="bert-x",
                num_gpus=1,
                submit_time=205.0,
                duration=d,
                time_limit=1000.0,
            )
        )
        res = run_cluster(
            jobs,
            ClusterSpec("c", 1, 2),
            PolicyRanker(get_policy("qssf", None, **kw), "qssf"),
            PreemptionCost(0.0),
        )
        starts.append(next(s for s in res.jobs if s.job.job_id == 99).first_start)
    assert starts[0] == starts[1] and starts[0] is not None


def test_preemptive_qssf_ranks_by_predicted_remaining():
    p = get_policy("qssf", None, preemptive=True, use_time_limit=True)
    ctx = _ctx()
    running = Job(1, user="a", account="nlp", num_gpus=1, time_limit=1000.0, attained_gpu_s=900.0)
    pending = Job(2, user="b", account="nlp", num_gpus=1, time_limit=500.0)
    assert p.key(running, ctx) < p.key(pending, ctx)  # 100 s left beats 500 s


def test_preemptive_qssf_does_not_condition_a_running_jobs_prediction_on_its_age():
    """Queue order: a requeued job is predicted from the finished jobs that ran longer than it
    has. Preemptive: the unconditioned prediction minus its service, so a job past its
    prediction ranks first instead of looking longer the longer it runs."""
    ctx = _ctx(
        (100.0, "ann", "bert", 1, None),
        (200.0, "ann", "bert", 1, None),
        (300.0, "ann", "bert", 1, None),
        (5000.0, "bob", "x", 1, None),
        (9000.0, "bob", "x", 1, None),
        (10_000.0, "bob", "x", 1, None),
    )
    kw = {"history_keys": (("user", "name"), ()), "min_jobs": 2, "shrink_jobs": 0.0}
    old = Job(1, user="ann", account="nlp", name="bert", num_gpus=1, attained_gpu_s=250.0)
    queue = get_policy("qssf", None, preemptive=False, **kw)
    assert queue.predict(old, ctx) == pytest.approx((300.0 + 5000.0 + 9000.0 + 10_000.0) / 4)
    pre = get_policy("qssf", None, preemptive=True, **kw)
    assert pre.predict(old, ctx) == 250.0  # 200 predicted, 250 used
    fresh = Job(2, user="ann", account="nlp", name="bert", num_gpus=1)
    assert pre.key(old, ctx)[0] == 0.0 and pre.key(fresh, ctx)[0] == 200.0
    assert pre.order([fresh, old], ctx)[0].job_id == 1
