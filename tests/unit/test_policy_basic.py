"""FIFO, SJF and SRTF on small hand-built cases, and the registry."""

from __future__ import annotations

import pytest

from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy import PolicyContext, get_policy, policy_names

CTX = PolicyContext(now=1000.0)


def ids(jobs):
    return [j.job_id for j in jobs]


def test_fifo_orders_by_submit_then_row_order():
    jobs = [Job(3, submit_time=10), Job(1, submit_time=20), Job(2, submit_time=10)]
    assert ids(get_policy("fifo").order(jobs, CTX)) == [2, 3, 1]


def test_fifo_variants_share_order_but_not_discipline():
    jobs = [Job(i, submit_time=float(10 - i)) for i in range(5)]
    orders = {
        n: ids(get_policy(n).order(jobs, CTX)) for n in ("fifo", "fifo-firstfit", "fifo-backfill")
    }
    assert orders["fifo"] == orders["fifo-firstfit"] == orders["fifo-backfill"] == [4, 3, 2, 1, 0]
    assert [get_policy(n).discipline for n in orders] == ["strict", "firstfit", "backfill"]
    assert not get_policy("fifo").preemptive


def test_sjf_orders_by_duration_and_is_an_oracle():
    p = get_policy("sjf")
    jobs = [
        Job(1, duration=300),
        Job(2, duration=100),
        Job(3, duration=None),
        Job(4, duration=100, submit_time=-1),
    ]
    assert ids(p.order(jobs, CTX)) == [4, 2, 1, 3]
    assert p.oracle and p.discipline == "strict" and not p.preemptive


def test_srtf_ranks_by_remaining_time_pending_first_on_ties():
    p = get_policy("srtf")
    jobs = [
        Job(1, duration=1000, executed_s=900, state=JobState.RUNNING),  # 100 left
        Job(2, duration=100),  # 100 left, pending: before job 1
        Job(3, duration=50, executed_s=0),
        Job(4, duration=5000, executed_s=100, state=JobState.RUNNING),
    ]
    assert ids(p.order(jobs, CTX)) == [3, 2, 1, 4]
    assert p.preemptive and p.oracle and p.discipline == "preemptive"


def test_scores_are_rank_based_in_unit_interval():
    jobs = [Job(1, submit_time=0), Job(2, submit_time=1), Job(3, submit_time=2)]
    assert get_policy("fifo").scores(jobs, CTX) == {1: 1.0, 2: 0.5, 3: 0.0}


def test_unknown_policy_lists_valid_names():
    with pytest.raises(ValueError) as e:
        get_policy("nope")
    for name in ("fifo", "srtf"):
        assert name in str(e.value)
    assert set(policy_names()) >= {"fifo", "fifo-firstfit", "fifo-backfill", "sjf", "srtf"}


def test_unknown_override_is_a_value_error():
    with pytest.raises(ValueError, match="bad override"):
        get_policy("fifo", bogus=1)
