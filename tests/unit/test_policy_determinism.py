"""Every policy gives the same order for the same inputs, whatever the input order, and a fresh
instance agrees with a used one (caches never change answers)."""

from __future__ import annotations

import random

import pytest

from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobClass, JobState
from slurm_dl.core.policy import PolicyContext, get_policy, policy_names

CLASSES = list(JobClass)


def population(seed: int, n: int = 300) -> tuple[list[Job], Ledger]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        running = rng.random() < 0.3
        gpus = rng.choice([1, 1, 1, 2, 4, 8, 16])
        executed = rng.choice([0.0, rng.uniform(0, 50_000)])
        jobs.append(
            Job(
                i,
                user=f"u{rng.randrange(8)}",
                account=f"a{rng.randrange(4)}",
                name=f"n{rng.randrange(5)}",
                job_class=rng.choice(CLASSES),
                num_gpus=gpus,
                submit_time=float(rng.randrange(0, 5000, 50)),  # many equal submit times: ties
                time_limit=rng.choice([None, 3600.0, 36_000.0]),
                deadline=rng.choice([None, None, 20_000.0 + rng.uniform(0, 50_000)]),
                state=JobState.RUNNING if running else JobState.PENDING,
                start_time=9000.0 if running else None,
                attained_gpu_s=executed * gpus,
                executed_s=executed,
                duration=rng.uniform(100, 100_000),
            )
        )
    led = Ledger(3600.0)
    for k in range(200):
        led.add_history(rng.uniform(10, 1e6), f"u{k % 8}", f"n{k % 5}", f"a{k % 4}")
    led.observe([j for j in jobs if j.running], now=9000.0)
    led.observe([j for j in jobs if j.running], now=10_000.0)
    return jobs, led


@pytest.mark.parametrize("name", policy_names())
def test_order_is_deterministic(name):
    jobs, led = population(1)
    ctx = PolicyContext(now=10_000.0, ledger=led)
    first = [j.job_id for j in get_policy(name).order(jobs, ctx)]
    used = get_policy(name)
    rng = random.Random(2)
    for _ in range(3):
        shuffled = jobs[:]
        rng.shuffle(shuffled)
        assert [j.job_id for j in used.order(shuffled, ctx)] == first
    assert sorted(first) == list(range(len(jobs)))
    scores = get_policy(name).scores(jobs, ctx)
    assert scores == used.scores(list(reversed(jobs)), ctx)
    assert all(0.0 <= s <= 1.0 for s in scores.values())


@pytest.mark.parametrize("name", policy_names())
def test_next_key_change_is_in_the_future_or_none(name):
    jobs, led = population(3)
    ctx = PolicyContext(now=10_000.0, ledger=led)
    p = get_policy(name)
    for j in jobs:
        t = p.next_key_change(j, ctx)
        assert t is None or t > ctx.now


def test_in_order_of_puts_jobs_in_an_earlier_ranking_and_newcomers_after():
    """The cycle hands its policy the queue as the last cycle ranked it (the sort is adaptive);
    jobs that left are skipped, new ones follow in their own order, nothing is lost or doubled,
    and every policy ranks the arranged queue as it ranks the queue as given."""
    from slurm_dl.core.policy.base import in_order_of

    jobs, led = population(3)
    before = [j.job_id for j in reversed(jobs[:200])] + [10_000, 10_001]  # two that left
    arranged = in_order_of(jobs, before)
    assert [j.job_id for j in arranged] == [j.job_id for j in reversed(jobs[:200])] + [
        j.job_id for j in jobs[200:]
    ]
    assert all(a is b for a, b in zip(arranged[:200], reversed(jobs[:200])))
    assert in_order_of(jobs, []) == jobs
    twice = jobs[:5] + [jobs[0]]  # a repeated id: the queue as given, not one copy dropped
    assert in_order_of(twice, [j.job_id for j in reversed(twice)]) == twice
    ctx = PolicyContext(now=10_000.0, ledger=led, total_gpus=64)
    for name in policy_names():
        policy = get_policy(name)
        assert [j.job_id for j in policy.order(arranged, ctx)] == [
            j.job_id for j in policy.order(jobs, ctx)
        ], name
