"""The simulator ranks with the policy core: every name, its overrides, and what the ledger feeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.model import Job
from slurm_dl.core.policy.combined import CombinedPolicy
from slurm_dl.core.policy.fairshare import FairSharePolicy
from slurm_dl.core.policy.gittins import GittinsPolicy
from slurm_dl.core.policy.las import LasPolicy
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.ranking.ranker import make_ranker, sim_policy_names
from slurm_dl.sim.engine.state import PreemptionCost

NAMES = (
    "fifo",
    "fifo-firstfit",
    "fifo-backfill",
    "sjf",
    "srtf",
    "las",
    "las-tiresias",
    "gittins",
    "fairshare",
    "fairshare-queue",
    "deadline",
    "deadline-las",
    "combined",
    "qssf",
)


def job(i, gpus, submit, duration, account="a", **kw) -> Job:
    return Job(
        job_id=i,
        account=account,
        user=account,
        num_gpus=gpus,
        submit_time=submit,
        duration=duration,
        **kw,
    )


def run(jobs, ranker, nodes=1, per_node=1):
    r = run_cluster(jobs, ClusterSpec("c", nodes, per_node), ranker, PreemptionCost(0.0))
    return {sj.job.job_id: sj for sj in r.jobs}, r


@pytest.mark.parametrize("name", NAMES)
def test_every_name_is_a_core_policy_and_finishes_every_job(name):
    assert name in sim_policy_names()
    rk = make_ranker(name)
    assert rk.policy.__class__.__module__.startswith("slurm_dl.core.policy.")
    jobs = [
        job(
            i,
            1 + i % 3,
            i * 5.0,
            50.0 + 17 * i,
            account=f"a{i % 2}",
            time_limit=400.0,
            deadline=(i * 5.0 + 600.0) if i % 4 == 0 else None,
        )
        for i in range(12)
    ]
    res, _ = run(jobs, rk, nodes=1, per_node=4)
    assert all(sj.end_time is not None for sj in res.values())
    assert (
        jobs[0].state.value == "PENDING" and jobs[0].attained_gpu_s == 0.0
    )  # trace left untouched


def test_unknown_name_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed: .*deadline-las"):
        make_ranker("nope")


def test_cli_options_become_get_policy_overrides():
    las = make_ranker("las", las_thresholds=[10.0, 20.0], starvation=2.0).policy
    assert (
        isinstance(las, LasPolicy)
        and las.thresholds == (10.0, 20.0)
        and las.starvation_factor == 2.0
    )
    g = make_ranker("gittins", prior=[1.0, 2.0, 3.0], gittins_bins=4).policy
    assert isinstance(g, GittinsPolicy) and g.bins == 4
    fs = make_ranker("fairshare-queue", shares={"a": 3.0}).policy
    assert isinstance(fs, FairSharePolicy) and fs.share("a") == 3.0
    dl = make_ranker("deadline-las", las_thresholds=[100.0], boost_s=600.0).policy
    assert isinstance(dl, CombinedPolicy) and dl.tiers == [["deadline"], ["las"]]
    assert (
        dl.components["las"].thresholds == (100.0,)
        and dl.components["deadline"].boost_slack_s == 600.0
    )
    assert dl.discipline == "preemptive"


def test_fairshare_reads_usage_the_engine_charges_to_the_ledger():
    # one GPU: a1 runs 0..100; at t=100 account a has used 100 GPU-s, b nothing → b1 before a2
    jobs = [job(1, 1, 0, 100, "a"), job(2, 1, 1, 10, "a"), job(3, 1, 2, 10, "b")]
    rk = make_ranker("fairshare-queue")
    res, _ = run(jobs, rk)
    assert res[3].first_start == 100 and res[2].first_start == 110
    fifo, _ = run(jobs, make_ranker("fifo"))
    assert fifo[2].first_start == 100


def test_gittins_and_qssf_learn_from_the_finished_jobs_history():
    jobs = [job(i, 1, float(i), 10.0 * (i + 1)) for i in range(5)]
    rk = make_ranker("gittins")
    run(jobs, rk)
    assert sorted(rk.ledger.history) == [10.0, 20.0, 30.0, 40.0, 50.0]
    q = make_ranker("qssf")
    run(jobs, q)
    assert sorted(f.gpu_s for f in q.ledger.finished if f.account == "a") == [
        10.0,
        20.0,
        30.0,
        40.0,
        50.0,
    ]


def test_deadline_las_boosts_a_job_whose_slack_runs_low():
    # j2's slack at t=10: 500 - 10 - 100 = 390 s < boost → it preempts j1 (LAS alone: FIFO in queue 0)
    jobs = [job(1, 1, 0, 1000), job(2, 1, 10, 100, time_limit=100.0, deadline=500.0)]
    res, r = run(jobs, make_ranker("deadline-las"))
    assert res[2].first_start == 10 and res[2].end_time == 110 and r.preemptions == 1
    las, _ = run(jobs, make_ranker("las"))
    assert las[2].first_start == 1000


def test_las_starvation_guard_promotes_without_livelock():
    # thresholds 10 GPU-s, S = 1, one GPU: jobs 1 and 2 fall to queue 1 while 3 and 4 arrive in
    # queue 0. Without hysteresis in the guard a promoted job lost its promotion the moment it
    # ran and the replay flipped jobs in and out at one instant forever. Now the run ends, the
    # starving jobs 1 and 2 take turns (each runs, waits, is promoted, runs again) instead of
    # job 2 waiting for all of job 1, and the new short job 3 is not held up behind them.
    jobs = [job(1, 1, 0, 100), job(2, 1, 0.5, 100), job(3, 1, 20, 5), job(4, 1, 21, 100)]
    guarded, g = run(jobs, make_ranker("las", las_thresholds=[10.0], starvation=1.0))
    plain, p = run(jobs, make_ranker("las", las_thresholds=[10.0]))
    assert all(sj.end_time is not None for sj in guarded.values())
    assert guarded[3].end_time == plain[3].end_time == 25.0
    assert plain[1].preemptions == plain[2].preemptions == 1
    assert (
        guarded[1].preemptions >= 2
        and guarded[2].preemptions >= 2
        and g.preemptions > p.preemptions
    )


@pytest.mark.parametrize(
    "name,kw",
    [
        ("deadline-las", {"las_thresholds": [50.0, 500.0], "boost_s": 300.0}),
        ("las", {"las_thresholds": [50.0, 500.0], "starvation": 2.0}),
    ],
)
def test_sorted_pending_queue_with_wakeups_matches_rekeying_every_job(name, kw):
    # deadline boosts and starvation promotions change waiting jobs' keys on their own; the
    # engine's fast path re-inserts a job only at its wake-up. It must give exactly the schedule
    # of re-keying every pending job at every event.
    jobs = [
        job(
            i,
            1 + i % 4,
            i * 7.0,
            40.0 + (i * 37) % 400,
            account=f"a{i % 3}",
            time_limit=500.0,
            deadline=(i * 7.0 + 700.0 + (i * 13) % 300) if i % 3 == 0 else None,
        )
        for i in range(60)
    ]
    fast = make_ranker(name, **kw)
    assert fast.pending_piecewise and fast.running_key_cached
    slow = make_ranker(name, **kw)
    slow.pending_piecewise = False
    a, ra = run(jobs, fast, nodes=2, per_node=4)
    b, rb = run(jobs, slow, nodes=2, per_node=4)
    assert ra.preemptions == rb.preemptions > 0
    assert {i: (sj.first_start, sj.end_time) for i, sj in a.items()} == {
        i: (sj.first_start, sj.end_time) for i, sj in b.items()
    }


def test_a_deadline_job_with_time_to_spare_waits_like_best_effort_and_a_hopeless_one_yields():
    # one GPU. j2 has 10,000 s of slack: it does not jump ahead of j3 (LAS order, FIFO within the
    # queue). j4's deadline cannot be met any more: it yields to the best-effort j5.
    jobs = [
        job(1, 1, 0, 100),
        job(2, 1, 1, 50, time_limit=50.0, deadline=10_050.0),
        job(3, 1, 0.5, 50),
        job(4, 1, 2, 50, time_limit=50.0, deadline=40.0),
        job(5, 1, 3, 50),
    ]
    res, _ = run(jobs, make_ranker("deadline-las", las_thresholds=[1e6]))
    assert res[3].first_start < res[2].first_start
    assert res[5].first_start < res[4].first_start


@pytest.mark.parametrize("policy", ["las", "combined"])
def test_splitting_a_job_into_pieces_buys_nothing_under_the_site_configs_las(policy):
    # account B splits one 8-GPU job into eight 1-GPU pieces of the same run time; under the site
    # config (LAS by run time, fair share charging GPU-seconds) A and B finish exactly when they
    # would have without the split. Under Tiresias' 2D-LAS B would get ahead by splitting.
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.core.policy import get_policy
    from slurm_dl.sim.ranking.ranker import PolicyRanker

    cfg = load_config(
        Path(__file__).resolve().parents[2] / "site-configs" / "university-small.toml"
    )

    def finish(jobs, service=None):
        pol = (
            get_policy(policy, cfg) if service is None else get_policy("las", cfg, service=service)
        )
        r = run_cluster(
            jobs, ClusterSpec("c", 1, 8), PolicyRanker(pol, policy, cfg, 8), PreemptionCost(60.0)
        )
        ends = {sj.job.job_id: sj.end_time for sj in r.jobs}
        return ends[1], max(v for k, v in ends.items() if k >= 10)

    whole = [job(1, 8, 0, 10_000, "A"), job(10, 8, 0.5, 10_000, "B")]
    split = [job(1, 8, 0, 10_000, "A")] + [job(10 + k, 1, 0.5, 10_000, "B") for k in range(8)]
    assert finish(split) == finish(whole)
    if policy == "las":
        a_end, b_end = finish(split, service="gpu-seconds")
        assert b_end < a_end  # 2D-LAS: the pieces overtake the whole job


def test_fair_share_sorted_per_account_matches_a_key_call_per_job():
    jobs = [
        job(i, 1 + i % 3, i * 11.0, 60.0 + (i * 53) % 500, account=f"a{i % 4}") for i in range(80)
    ]
    fast = make_ranker("fairshare-queue")
    assert fast.account_key is not None
    slow = make_ranker("fairshare-queue")
    slow.account_key = None
    slow.grouped = False
    a, _ = run(jobs, fast, nodes=2, per_node=4)
    b, _ = run(jobs, slow, nodes=2, per_node=4)
    assert {i: (sj.first_start, sj.end_time) for i, sj in a.items()} == {
        i: (sj.first_start, sj.end_time) for i, sj in b.items()
    }
    assert len({sj.first_start for sj in a.values()}) > 20  # a real queue formed


def _mixed_jobs(n=160):
    from slurm_dl.core.model import JobClass

    out = []
    for i in range(n):
        dur = 40.0 + (i * 137) % 900
        out.append(
            job(
                i,
                (1, 1, 2, 4, 1, 8)[i % 6],
                i * 7.0 + (i % 5),
                dur,
                account=f"a{i % 5}",
                time_limit=dur * 1.5,
                deadline=(i * 7.0 + dur * 3) if i % 9 == 0 else None,
                job_class=JobClass.SERVE if i % 13 == 0 else JobClass.TRAIN,
            )
        )
    return out


@pytest.mark.parametrize(
    "name,cfg_name",
    [("fairshare-queue", None), ("combined", None), ("combined", "university-small.toml")],
)
def test_per_account_queues_give_the_same_schedule_as_a_key_call_per_job(name, cfg_name):
    # the engine's per-account queues (and per-account usage charging) against the reference
    # path that ranks every waiting and running job by a policy key call at every event
    from slurm_dl.cli.config_file import load_config

    cfg = (
        load_config(Path(__file__).resolve().parents[2] / "site-configs" / cfg_name)
        if cfg_name
        else None
    )
    jobs = _mixed_jobs()
    spec = ClusterSpec("c", 2, 8)
    a = run_cluster(jobs, spec, make_ranker(name, config=cfg, total_gpus=16), PreemptionCost(0.0))
    b = run_cluster(
        jobs, spec, make_ranker(name, config=cfg, total_gpus=16), PreemptionCost(0.0), fast=False
    )
    assert make_ranker(name, config=cfg).grouped
    sched = [(sj.first_start, sj.end_time, sj.preemptions) for sj in a.jobs]
    assert sched == [(sj.first_start, sj.end_time, sj.preemptions) for sj in b.jobs]
    assert a.preemptions == b.preemptions
    assert len({s for s, _, _ in sched}) > 40  # a real queue formed
    if name == "combined":
        assert a.preemptions > 0
