"""The history learner: name normalisation, the fallback ladder, conditioning on attained
service, and that a job never learns from its own run."""

from __future__ import annotations

import pytest

from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job
from slurm_dl.core.policy import PolicyContext, get_policy
from slurm_dl.core.policy.history import (
    LADDERS,
    Finished,
    HistoryLearner,
    HistoryView,
    features,
    gittins_from_samples,
    job_features,
    normalise_name,
)
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.ranking.ranker import PolicyRanker
from slurm_dl.sim.engine.state import PreemptionCost


@pytest.mark.parametrize(
    "raw,norm",
    [
        ("train-bert-7f3a9c21", "train_bert"),
        ("train_bert_12", "train_bert"),
        ("Train_BERT_0012", "train_bert"),
        ("ResNet50_lr0.1_seed3", "resnet_lr_seed"),
        ("sweep.ab12cd34ef.run7", "sweep_run"),
        ("job-deadbeef", "job_deadbeef"),  # an all-letter word is a word, not a hash
        ("vgg16", "vgg"),
        ("12345", ""),
        ("", ""),
    ],
)
def test_names_lose_digits_and_hashes(raw, norm):
    assert normalise_name(raw) == norm


def rec(gpu_s, user="ann", account="nlp", name="bert", gpus=1, partition="gpu", limit=3600.0):
    return Finished(user, account, name, gpus, partition, limit, gpu_s)


def test_the_most_specific_key_with_enough_jobs_answers():
    h = HistoryLearner(min_jobs=2)
    h.extend([rec(100.0), rec(300.0)])  # ann/bert, 1 GPU, gpu, 1 h
    h.extend([rec(10_000.0, name="gpt-7"), rec(30_000.0, name="gpt-8")])
    h.extend([rec(5.0, user="bob", account="vision", name="resnet")] * 2)
    same = features("ann", "nlp", "bert", 1, "gpu", 3600.0)
    m = h.match(same)
    assert m.level == 0 and m.samples == (100.0, 300.0)
    # another time limit: (user, name, gpus) still has both
    assert h.match(features("ann", "nlp", "bert_3", 1, "gpu", 60.0)).level == 1
    # another GPU count: (user, name)
    assert h.match(features("ann", "nlp", "bert", 8, "gpu", 3600.0)).level == 2
    # a new name of ann's: (user, gpus) has all four of ann's 1-GPU jobs
    m = h.match(features("ann", "nlp", "llama", 1, "", None))
    assert LADDERS["full"][m.level] == ("user", "gpus") and len(m.samples) == 4
    # a new user of account vision: (account, gpus)
    m = h.match(features("cat", "vision", "x", 1))
    assert LADDERS["full"][m.level] == ("account", "gpus") and m.samples == (5.0, 5.0)
    # nobody like it: the whole history
    m = h.match(features("dan", "bio", "x", 4))
    assert LADDERS["full"][m.level] == () and len(m.samples) == 6


def test_a_key_with_too_little_history_is_skipped():
    h = HistoryLearner(min_jobs=3)
    h.extend([rec(100.0), rec(200.0)])  # only two ann/bert jobs
    h.extend([rec(1000.0, name="other")])
    m = h.match(features("ann", "nlp", "bert", 1, "gpu", 3600.0))
    assert LADDERS["full"][m.level] == ("user", "gpus") and m.samples == (100.0, 200.0, 1000.0)
    assert HistoryLearner(min_jobs=4).match(features("ann")) is None
    assert h.predict(features("ann", "nlp", "bert", 1, "gpu", 3600.0)) == pytest.approx(1300.0 / 3)


def test_conditioning_on_attained_service_falls_back_to_a_longer_tail():
    h = HistoryLearner(min_jobs=2)
    h.extend([rec(100.0), rec(200.0), rec(300.0)])
    h.extend([rec(5000.0, name="other"), rec(9000.0, name="other")])
    f = features("ann", "nlp", "bert", 1, "gpu", 3600.0)
    m = h.match(f, above=150.0)
    assert m.level == 0 and m.samples == (200.0, 300.0) and m.below == 100.0
    # past all but one of its key's jobs: a coarser key, only its jobs beyond 250
    m = h.match(f, above=250.0)
    assert m.level > 0 and m.samples == (300.0, 5000.0, 9000.0) and m.below == 200.0
    assert h.predict(f, above=1e6) is None


def test_each_key_keeps_only_its_recent_jobs():
    h = HistoryLearner(LADDERS["user-name"], min_jobs=1, per_key=3)
    h.extend([rec(x) for x in (1.0, 2.0, 3.0, 4.0, 5.0)])
    assert h.match(features("ann", "nlp", "bert")).samples == (3.0, 4.0, 5.0)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="unknown history keys"):
        HistoryLearner("nope")
    with pytest.raises(ValueError, match="unknown history field"):
        HistoryLearner([["user", "colour"]])
    with pytest.raises(ValueError, match="min_jobs"):
        HistoryLearner(min_jobs=0)


def test_config_names_every_ladder():
    from typing import get_args

    from slurm_dl.core.config import GittinsConfig, QssfConfig

    assert set(get_args(GittinsConfig.model_fields["history_keys"].annotation)) == {
        *LADDERS,
        "none",
    }
    assert set(get_args(QssfConfig.model_fields["history_keys"].annotation)) == set(LADDERS)


def test_gittins_index_of_samples():
    # one sure size: index 1 / remaining
    assert gittins_from_samples([100.0, 100.0], 0.0) == pytest.approx(1 / 100.0)
    # a short and a long job: the best quantum ends at the short one
    assert gittins_from_samples([10.0, 1000.0], 0.0) == pytest.approx(0.5 / (10.0))
    assert gittins_from_samples([1000.0], 10.0) == pytest.approx(1 / 990.0)


def test_the_view_follows_the_ledger_and_starts_over_when_a_record_is_withdrawn():
    led = Ledger()
    view = HistoryView(lambda: HistoryLearner(min_jobs=1))
    led.add_history(10.0, "ann", "bert", "nlp", 1)
    led.add_history(20.0, "ann", "bert", "nlp", 1)
    assert view.sync(led, upto=1).count == 1
    assert view.sync(led).count == 2
    led.finished.pop()
    led.finished_withdrawn += 1
    assert view.sync(led).count == 1


def test_ledger_keeps_finished_records_across_a_save(tmp_path):
    led = Ledger()
    led.add_history(10.0, "ann", "bert", "nlp", 2, "gpu", 600.0)
    back = Ledger.from_dict(led.to_dict())
    assert back.finished == [Finished("ann", "nlp", "bert", 2, "gpu", 600.0, 10.0)]
    assert Ledger.from_dict({"history": [1.0]}).finished == []  # a ledger saved before


# --- no future leakage -----------------------------------------------------------------
def _trace(last_duration: float) -> list[Job]:
    jobs = []
    for i in range(40):
        jobs.append(
            Job(
                i,
                user="ann",
                account="nlp",
                name=f"bert-{i}",
                num_gpus=1,
                submit_time=i * 10.0,
                duration=100.0 + 50.0 * (i % 4),
            )
        )
    # the job under test is submitted while the cluster is busy
    jobs.append(
        Job(
            99,
            user="ann",
            account="nlp",
            name="bert-x",
            num_gpus=1,
            submit_time=205.0,
            duration=last_duration,
        )
    )
    return jobs


@pytest.mark.parametrize(
    "policy,kw",
    [
        ("qssf", {}),
        ("qssf", {"preemptive": True}),
        ("gittins", {"history_keys": "full", "min_jobs": 2}),
    ],
)
def test_a_jobs_own_duration_never_shapes_its_own_schedule(policy, kw):
    """The job's start depends only on jobs that finished before: a 1 s and a 10^6 s run of it
    start at the same time (and its first prediction is the same)."""
    starts = []
    for d in (1.0, 1e6):
        ranker = PolicyRanker(get_policy(policy, None, **kw), policy)
        res = run_cluster(_trace(d), ClusterSpec("c", 1, 2), ranker, PreemptionCost(0.0))
        sj = next(s for s in res.jobs if s.job.job_id == 99)
        starts.append(sj.first_start)
    assert starts[0] == starts[1] and starts[0] is not None


def test_the_learner_only_knows_jobs_that_finished_before_now():
    """In the simulator the ledger's finished log grows as jobs complete, never ahead."""
    seen: list[tuple[float, int, set[int]]] = []

    class Spy(PolicyRanker):
        def key(self, sj, now):
            done = {s for s in ends if ends[s] <= now}
            seen.append((now, len(self.ledger.finished), done))
            return super().key(sj, now)

    jobs = _trace(500.0)
    ends: dict[int, float] = {}
    ranker = Spy(get_policy("qssf", None), "qssf")
    res = run_cluster(jobs, ClusterSpec("c", 1, 2), ranker, PreemptionCost(0.0))
    ends.update({s.job.job_id: s.end_time for s in res.jobs})
    # replay: at every key call, the log held exactly the jobs that had ended by then
    ranker2 = Spy(get_policy("qssf", None), "qssf")
    seen.clear()
    run_cluster(jobs, ClusterSpec("c", 1, 2), ranker2, PreemptionCost(0.0))
    assert seen and all(n == len(done) for _, n, done in seen)


def test_qssf_uses_the_learnt_prediction():
    led = Ledger()
    for x in (100.0, 200.0, 300.0):
        led.add_history(x, "ann", "bert-1", "nlp", 1)
    p = get_policy("qssf", None, min_jobs=3, preemptive=False)  # a requeued job: conditioned
    ctx = PolicyContext(now=0.0, ledger=led)
    assert p.predict(
        Job(1, user="ann", account="nlp", name="bert-22", num_gpus=1), ctx
    ) == pytest.approx(200.0)
    # past 250 GPU-s no key has 3 jobs beyond it: the site default
    assert (
        p.predict(
            Job(2, user="ann", account="nlp", name="bert", num_gpus=1, attained_gpu_s=250.0), ctx
        )
        == 3600.0
    )
    assert (
        get_policy("qssf", None, min_jobs=1, preemptive=False).predict(
            Job(2, user="ann", account="nlp", name="bert", num_gpus=1, attained_gpu_s=250.0), ctx
        )
        == 300.0
    )
    assert job_features(Job(3, name="x-1", num_gpus=2, time_limit=59.6)).time_limit == 60
