"""Gittins index: a hand-computed distribution, binning, learning from history, the prior."""

from __future__ import annotations

import pytest

from slurm_dl.core.policy import tiresias_prior
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy import PolicyContext, get_policy
from slurm_dl.core.policy.gittins import gittins_index, history_checkpoint


def test_index_of_a_known_distribution():
    # S uniform on {1, 2, 4}.
    v, w = [1.0, 2.0, 4.0], [1.0, 1.0, 1.0]
    # G(0,1) = P(S<=1) / E[min(S,1)] = (1/3) / 1
    assert gittins_index(v, w, 0.0, 1.0) == pytest.approx(1 / 3)
    # G(0,2) = (2/3) / ((1+2+2)/3) = 2/5
    assert gittins_index(v, w, 0.0, 2.0) == pytest.approx(0.4)
    # G(1,1): survivors {2,4}; P(S-1<=1|S>1) = 1/2, E[min(S-1,1)|S>1] = 1
    assert gittins_index(v, w, 1.0, 1.0) == pytest.approx(0.5)
    # G(2,2): survivor {4}: finishes within 2 for sure, expected 2 more
    assert gittins_index(v, w, 2.0, 2.0) == pytest.approx(0.5)
    # weights count: S = 1 w.p. 3/4, 4 w.p. 1/4 -> G(0,1) = 0.75 / 1
    assert gittins_index([1.0, 4.0], [3.0, 1.0], 0.0, 1.0) == pytest.approx(0.75)
    # past the largest size: no information, index 0
    assert gittins_index(v, w, 4.0, 1.0) == 0.0


def test_policy_orders_by_binned_index_and_reports_bin_edges():
    # Prior: half the jobs take 10 GPU-s, half 1000. A job at 20 GPU-s is surely long.
    p = get_policy("gittins", prior_samples=[10.0] * 5 + [1000.0] * 5, edges_gpu_s=[10.0, 100.0])
    ctx = PolicyContext(now=0.0)
    assert p.edges == [0.0, 10.0, 100.0]
    fresh = Job(1, num_gpus=1, submit_time=5.0)
    long_running = Job(2, num_gpus=2, attained_gpu_s=20.0, executed_s=10.0, state=JobState.RUNNING)
    # Gittins = sup over quanta ending on a later edge or the largest size (1000):
    # bin 0: G(0, 10) = 0.5 / (0.5*10 + 0.5*10) = 0.05 beats G(0, 100) = 0.5/55 and G(0, 1000) = 1/505
    assert p.index_at(0.0, ctx) == pytest.approx(0.05)
    # bin 1 (a = 10): G(10, 90) = 0, G(10, 990) = 1/990
    assert p.index_at(20.0, ctx) == pytest.approx(1 / 990)
    assert p.index_at(100.0, ctx) == pytest.approx(1 / 900)
    assert p.next_edge(20.0, ctx) == 100.0 and p.next_edge(100.0, ctx) is None
    # one bin as the quantum: nothing ends inside (10, 100], index 0
    one_bin = get_policy(
        "gittins",
        prior_samples=[10.0] * 5 + [1000.0] * 5,
        edges_gpu_s=[10.0, 100.0],
        delta_gpu_s="bin",
    )
    assert one_bin.index_at(20.0, ctx) == 0.0 and one_bin.index_at(0.0, ctx) == pytest.approx(0.05)
    assert [j.job_id for j in p.order([long_running, fresh], ctx)] == [1, 2]
    # the running job's key next changes at the 100 GPU-s edge: 80 GPU-s / 2 GPUs = 40 s
    assert p.next_key_change(long_running, ctx) == pytest.approx(40.0)
    assert p.score(fresh, ctx) == 1.0 and p.preemptive


def test_history_updates_the_distribution():
    led = Ledger()
    p = get_policy("gittins", prior_weight=0.0, prior_samples=[], edges_gpu_s=[100.0])
    ctx = PolicyContext(now=0.0, ledger=led)
    assert p.index_at(0.0, ctx) == p.index_at(500.0, ctx)  # no information yet
    for _ in range(10):
        led.add_history(50.0)
    led.add_history(1000.0)
    # now most jobs end below 100: the first bin's index beats the second's
    assert p.index_at(0.0, ctx) > p.index_at(500.0, ctx) > 0.0


def test_history_checkpoints_are_fixed_lengths():
    assert [history_checkpoint(n) for n in (0, 10, 64, 65, 70, 76, 77)] == [
        0,
        10,
        64,
        64,
        70,
        70,
        77,
    ]
    assert history_checkpoint(100_000) <= 100_000 < int(history_checkpoint(100_000) * 1.1) + 2


def test_default_prior_is_the_tiresias_summary():
    p = get_policy("gittins")
    assert len(p.edges) == 32 and p.edges[0] == 0.0
    assert p.edges == sorted(p.edges)
    assert tiresias_prior.SAMPLE_COUNT == 1001 and len(tiresias_prior.PERCENTILES_GPU_S) == 101


def test_shipped_summary_matches_the_real_sample(shared_traces):
    path = shared_traces / "tiresias" / "yarn-gput1000.csv"
    lines = path.read_text().split()
    assert lines[0] == "duration"
    xs = sorted(float(x) for x in lines[1:])
    n = len(xs)
    assert n == tiresias_prior.SAMPLE_COUNT
    assert sum(xs) / n == pytest.approx(tiresias_prior.SAMPLE_MEAN_GPU_S)
    expected = tuple(xs[round(p / 100 * (n - 1))] for p in range(101))
    assert expected == tiresias_prior.PERCENTILES_GPU_S


def test_bad_parameters_are_value_errors():
    with pytest.raises(ValueError, match="gittins"):
        get_policy("gittins", bins=1)


def test_hold_factor_keeps_a_running_job_until_a_waiting_index_is_that_many_times_higher():
    # half the jobs take 10 GPU-s, half 1000: a fresh job's index (0.05) is 50x that of a job
    # past 10 GPU-s (1/990); a job at 2 GPU-s has index 0.5/(0.5*8+0.5*8) = 0.0625 (1.25x a fresh one)
    samples = [10.0] * 5 + [1000.0] * 5
    ctx = PolicyContext(now=0.0)
    fresh = Job(1, num_gpus=1, submit_time=5.0)
    early = Job(
        2, num_gpus=1, submit_time=1.0, attained_gpu_s=2.0, executed_s=2.0, state=JobState.RUNNING
    )
    late = Job(
        3, num_gpus=1, submit_time=2.0, attained_gpu_s=20.0, executed_s=20.0, state=JobState.RUNNING
    )
    plain = get_policy(
        "gittins", prior_samples=samples, edges_gpu_s=[2.0, 10.0, 100.0], hold_factor=1.0
    )
    held = get_policy(
        "gittins", prior_samples=samples, edges_gpu_s=[2.0, 10.0, 100.0], hold_factor=4.0
    )
    assert plain.index_at(2.0, ctx) == pytest.approx(0.0625) and plain.index_at(
        0.0, ctx
    ) == pytest.approx(0.05)
    assert [j.job_id for j in plain.order([early, fresh, late], ctx)] == [2, 1, 3]
    # held: the running job past 10 GPU-s counts 4/990, still far below the fresh job's 0.05
    assert [j.job_id for j in held.order([late, fresh, early], ctx)] == [2, 1, 3]
    # a job waiting at 2 GPU-s (0.0625) does not displace one running at 0 GPU-s (4 x 0.05 = 0.2)
    waiting_early = Job(4, num_gpus=1, submit_time=1.0, attained_gpu_s=2.0, executed_s=2.0)
    running_fresh = Job(5, num_gpus=1, submit_time=5.0, state=JobState.RUNNING)
    assert [j.job_id for j in plain.order([running_fresh, waiting_early], ctx)] == [4, 5]
    assert [j.job_id for j in held.order([running_fresh, waiting_early], ctx)] == [5, 4]
    # the key and its next change from one look-up agree with key()
    k, _ = held.key_and_next_change(running_fresh, ctx)
    assert k == held.key(running_fresh, ctx) and k[0] == pytest.approx(-0.2) and k[1:] == (5.0, 5)
    # waiting jobs' scores are the plain index
    assert held.score(waiting_early, ctx) == plain.score(waiting_early, ctx)


def test_hold_factor_default_and_bounds():
    from slurm_dl.core.config import GittinsConfig

    assert get_policy("gittins").hold_factor == GittinsConfig().hold_factor == 8.0
    for bad in (0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            get_policy("gittins", hold_factor=bad)


def test_key_and_next_change_from_the_step_function_matches_key_and_next_key_change():
    # learnt keys (user, name, GPUs) and the global table, read at many attained services,
    # at bin edges and a hair either side of them, while the history grows
    import random

    rnd = random.Random(7)
    led = Ledger()
    p = get_policy("gittins")
    ctx = PolicyContext(now=100.0, ledger=led)
    users, names = ["u1", "u2", "u3"], ["train-bert-1", "resnet", "eval"]
    for step in range(6):
        for _ in range(40 * step):
            led.add_history(
                rnd.choice([30.0, 600.0, 7200.0, 86400.0]) * rnd.uniform(0.5, 2.0),
                user=rnd.choice(users),
                name=rnd.choice(names),
                account="vc",
                num_gpus=rnd.choice([1, 2, 8]),
            )
        for k in range(60):
            j = Job(
                k,
                user=rnd.choice(users),
                name=rnd.choice(names),
                account="vc",
                num_gpus=rnd.choice([1, 2, 8]),
                submit_time=float(k),
                state=JobState.RUNNING,
            )
            edges = p.edges + [f.gpu_s for f in led.finished]
            e = rnd.choice(edges)
            j.attained_gpu_s = rnd.choice([0.0, e, e - 1e-6, e + 1e-6, e - 1e-7, e * rnd.random()])
            got = p.key_and_next_change(j, ctx)
            assert got == (p.key(j, ctx), p.next_key_change(j, ctx)), (step, k, j.attained_gpu_s)
            j.state = JobState.PENDING
            assert p.key_and_next_change(j, ctx) == (p.key(j, ctx), None)
