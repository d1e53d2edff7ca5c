"""plan_preemption's ``prefer_victims``: a job deprioritized for idle GPUs is taken first."""

from __future__ import annotations

from test_preemption import (
    cfg,
    node_state,
    running,
)  # the helpers of the planner's tests (same directory)

from slurm_dl.core.model import Job
from slurm_dl.core.policy import PolicyContext
from slurm_dl.core.preemption import plan_preemption

NOW = 10_000.0


def plan(waiting, jobs, scores, prefer=frozenset()):
    return plan_preemption(
        waiting,
        jobs,
        node_state(jobs),
        None,
        PolicyContext(now=NOW),
        cfg(),
        scores=scores,
        prefer_victims=prefer,
    )


def test_idle_job_is_chosen_over_the_busy_one_that_would_be_picked() -> None:
    # Two 8-GPU jobs, one per node; job 11 has the lower score, so it is the usual victim.
    jobs = [running(10, 8, ["n0"]), running(11, 8, ["n1"])]
    nodes = ("n0", "n1")
    scores = {1: 1.0, 10: 0.4, 11: 0.1}
    usual = plan_preemption(
        Job(1, num_gpus=8),
        jobs,
        node_state(jobs, nodes),
        None,
        PolicyContext(now=NOW),
        cfg(),
        scores=scores,
    )
    assert usual.victim_ids == (11,)
    idle = plan_preemption(
        Job(1, num_gpus=8),
        jobs,
        node_state(jobs, nodes),
        None,
        PolicyContext(now=NOW),
        cfg(),
        scores=scores,
        prefer_victims=frozenset({10}),
    )
    assert idle.victim_ids == (10,)
    assert "idle" in idle.victims[0].reason


def test_preferred_victim_needs_no_hysteresis_but_keeps_the_other_rules() -> None:
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 8, ["n1"]),
        running(12, 8, ["n2"]),
        running(13, 8, ["n3"]),
    ]
    scores = {1: 0.5, 10: 0.9, 11: 0.9, 12: 0.9, 13: 0.9}  # the waiting job beats nobody
    assert plan(Job(1, num_gpus=8), jobs, scores) is None
    assert plan(Job(1, num_gpus=8), jobs, scores, frozenset({12})).victim_ids == (12,)
    young = [running(10, 8, ["n0"], start=NOW - 10), *jobs[1:]]  # under the 600 s minimum runtime
    p = plan(Job(1, num_gpus=8), young, scores, frozenset({10}))
    assert p is None


def test_empty_preference_changes_nothing() -> None:
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 4, ["n1"]),
        running(12, 4, ["n1"]),
        running(13, 16, ["n2", "n3"]),
    ]
    scores = {1: 1.0, 10: 0.2, 11: 0.3, 12: 0.1, 13: 0.0}
    for need in (4, 8, 16):
        a = plan(Job(1, num_gpus=need), jobs, scores)
        b = plan_preemption(
            Job(1, num_gpus=need),
            jobs,
            node_state(jobs),
            None,
            PolicyContext(now=NOW),
            cfg(),
            scores=scores,
        )
        assert a == b


def test_preferred_victims_fill_a_multi_node_need_first() -> None:
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 8, ["n1"]),
        running(12, 8, ["n2"]),
        running(13, 8, ["n3"]),
    ]
    scores = {1: 1.0, 10: 0.1, 11: 0.2, 12: 0.6, 13: 0.7}
    assert set(plan(Job(1, num_gpus=16), jobs, scores).victim_ids) == {10, 11}
    assert set(plan(Job(1, num_gpus=16), jobs, scores, frozenset({12, 13})).victim_ids) == {12, 13}
