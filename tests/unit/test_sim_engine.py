"""The simulator engine on small hand-built traces whose right answer is worked out by hand."""

from __future__ import annotations

import pytest

from slurm_dl.core.model import Job
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.engine.placement import place_consolidated, place_spread, slowdown
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.engine.state import PreemptionCost


def job(i: int, gpus: int, submit: float, duration: float, account: str = "a") -> Job:
    return Job(
        job_id=i,
        account=account,
        user=account,
        num_gpus=gpus,
        submit_time=submit,
        duration=duration,
    )


def run(jobs, policy, nodes=1, per_node=8, cost=PreemptionCost(0.0), ranker=None):
    r = run_cluster(jobs, ClusterSpec("c", nodes, per_node), ranker or make_ranker(policy), cost)
    return {sj.job.job_id: sj for sj in r.jobs}, r


def test_strict_fifo_head_blocks_and_firstfit_does_not():
    jobs = [job(1, 6, 0, 100), job(2, 4, 1, 10), job(3, 1, 2, 10)]
    strict, _ = run(jobs, "fifo")
    assert strict[2].first_start == 100  # waits for A's GPUs
    assert strict[3].first_start == 100  # blocked behind the head although 2 GPUs are free
    firstfit, _ = run(jobs, "fifo-firstfit")
    assert firstfit[3].first_start == 2
    assert firstfit[2].first_start == 100


def test_completions_before_arrivals_at_the_same_time():
    jobs = [job(1, 8, 0, 10), job(2, 8, 10, 5)]
    res, _ = run(jobs, "fifo")
    assert res[2].first_start == 10 and res[2].queue_s == 0
    assert res[2].end_time == 15


def test_sjf_orders_waiting_jobs_by_duration_and_blocks():
    jobs = [job(1, 8, 0, 100), job(2, 8, 1, 50), job(3, 4, 2, 10), job(4, 8, 3, 5)]
    res, _ = run(jobs, "sjf")
    # at t=100 the queue by duration is 4 (5 s), 3 (10 s), 2 (50 s)
    assert res[4].first_start == 100
    assert res[3].first_start == 105
    assert res[2].first_start == 115


def test_srtf_skips_a_job_that_does_not_fit():
    jobs = [job(1, 8, 0, 1000), job(2, 6, 5, 10), job(3, 4, 5, 20), job(4, 2, 5, 30)]
    res, r = run(jobs, "srtf")
    # at t=5: rank 2 (10), 3 (20), 4 (30), 1 (995): 2 takes 6 GPUs, 3 is skipped, 4 takes the last 2
    assert res[2].first_start == 5
    assert res[4].first_start == 5
    assert res[3].first_start == 15  # when job 2 ends
    assert res[1].preemptions == 1 and r.preemptions == 1


def test_srtf_pending_first_on_ties():
    jobs = [job(1, 8, 0, 20), job(2, 8, 10, 10)]
    res, _ = run(jobs, "srtf")
    assert res[2].first_start == 10  # remaining 10 == 10: the waiting job wins the tie
    assert res[1].preemptions == 1


@pytest.mark.parametrize(
    "cost, a_end",
    [
        (PreemptionCost.parse("helios"), 117),  # 1 GPU: 7 s
        (PreemptionCost.parse("60"), 170),
        (
            PreemptionCost(0.0, checkpoint_interval_s=30),
            130,
        ),  # 50 s run, 20 s since the checkpoint lost
    ],
)
def test_preemption_cost_is_added_to_remaining_work(cost, a_end):
    jobs = [job(1, 1, 0, 100), job(2, 1, 50, 10)]
    res, _ = run(jobs, "srtf", per_node=1, cost=cost)
    assert res[2].first_start == 50 and res[2].end_time == 60
    assert res[1].end_time == a_end
    assert res[1].preemptions == 1


def test_helios_cost_by_gpu_count():
    c = PreemptionCost.parse("helios")
    assert (c.restart(1), c.restart(2), c.restart(8), c.restart(9), c.restart(64)) == (
        7,
        30,
        30,
        60,
        60,
    )
    with pytest.raises(ValueError, match="helios"):
        PreemptionCost.parse("soon")


def test_las_threshold_crossing_is_an_event_and_drops_a_queue():
    # one GPU, one threshold at 100 GPU-s, no preemption cost
    jobs = [job(1, 1, 0, 300), job(2, 1, 50, 300)]
    res, r = run(jobs, None, per_node=1, ranker=make_ranker("las", las_thresholds=[100.0]))
    # t=100: job 1 crosses into queue 1 → job 2 (queue 0) preempts it; t=200: job 2 crosses,
    # both in queue 1, FIFO → job 1 back; it needs 200 more s → ends 400; job 2 ends 600.
    assert res[1].end_time == 400
    assert res[2].end_time == 600
    assert r.preemptions == 2


def test_easy_backfill_never_delays_the_reserved_head():
    jobs = [job(1, 4, 0, 100), job(2, 8, 1, 10), job(3, 2, 2, 50), job(4, 2, 3, 500)]
    res, _ = run(jobs, "fifo-backfill")
    assert res[3].first_start == 2  # ends at 52, before the head's reservation at 100
    assert res[2].first_start == 100
    assert res[4].first_start == 110  # would run past the reservation: waits


def test_best_fit_placement_rules():
    # ≤ 8 GPUs: fewest free that fit, lowest index on ties
    assert place_consolidated([8, 3, 5, 3], 3, 8) == ((1, 3),)
    assert place_consolidated([8, 2, 5, 4], 3, 8) == ((3, 3),)
    assert place_consolidated([2, 2], 3, 8) is None
    # 8k: k wholly free nodes
    assert place_consolidated([8, 7, 8, 8], 16, 8) == ((0, 8), (2, 8))
    assert place_consolidated([8, 7, 7], 16, 8) is None
    # 8k+r: k free nodes plus r GPUs on the most-free other node (Helios)
    assert place_consolidated([8, 3, 5, 8], 12, 8) == ((0, 8), (3, 4))
    assert place_consolidated([8, 3, 5], 12, 8) == ((0, 8), (2, 4))
    assert place_consolidated([8, 3, 2], 12, 8) is None
    # spread only when consolidated fails
    assert place_spread([3, 3, 3], 6, 8) == ((0, 3), (1, 3))


def test_placement_sensitivity_slows_spread_jobs():
    info = {"vgg16": {"4": {"1": 1.0, "2": 0.5}}}
    assert slowdown(info, "vgg16", 4, 2, 8) == 0.5
    assert slowdown(info, "vgg16", 4, 1, 8) == 1.0
    assert slowdown(info, "unknown", 4, 2, 8) == 1.0


def test_a_job_larger_than_the_cluster_is_an_error():
    with pytest.raises(ValueError, match=r"too big for .* \(max 16\)"):
        run([job(1, 16, 0, 10)], "fifo")


def test_the_engine_copies_every_field_of_a_job_and_leaves_the_trace_alone() -> None:
    import dataclasses

    from slurm_dl.core.model import Job, JobState
    from slurm_dl.sim.engine.state import SimJob

    job = Job(
        7,
        user="u",
        account="a",
        name="n",
        num_gpus=4,
        gpus_per_node=4,
        num_nodes=1,
        submit_time=5.0,
        time_limit=60.0,
        deadline=90.0,
        soft_deadlines=((1.0, 2.0),),
        tags={"k": "v"},
        duration=30.0,
        comment="c",
        qos="q",
        restarts=3,
        state=JobState.RUNNING,
        attained_gpu_s=9.0,
    )
    sj = SimJob(0, job)
    assert sj.job is not job
    for f in dataclasses.fields(Job):
        if f.name not in (
            "state",
            "start_time",
            "attained_gpu_s",
            "executed_s",
            "restarts",
            "duration",
        ):
            assert getattr(sj.job, f.name) == getattr(job, f.name), f.name
    # the engine's copy starts afresh; the trace's job is untouched
    assert (sj.job.state, sj.job.attained_gpu_s, sj.job.restarts) == (JobState.PENDING, 0.0, 0)
    assert (job.state, job.attained_gpu_s, job.restarts) == (JobState.RUNNING, 9.0, 3)


def _place_reference(free: list[int], gpus: int, per_node: int):
    """The consolidated rule written plainly (one pass over the nodes per decision)."""
    if gpus <= per_node:
        best, best_free = -1, per_node + 1
        for i, f in enumerate(free):
            if gpus <= f < best_free:
                best, best_free = i, f
        return ((best, gpus),) if best >= 0 else None
    k, r = divmod(gpus, per_node)
    whole = [i for i, f in enumerate(free) if f == per_node]
    if len(whole) < k:
        return None
    alloc = [(i, per_node) for i in whole[:k]]
    if r:
        rest = [(f, -i) for i, f in enumerate(free) if i not in whole[:k]]
        if not rest or max(rest)[0] < r:
            return None
        alloc.append((-max(rest)[1], r))
    return tuple(alloc)


def test_consolidated_placement_matches_the_plain_rule_on_random_clusters() -> None:
    import random

    from slurm_dl.sim.engine.placement import place_consolidated

    rnd = random.Random(7)
    for _ in range(20000):
        per = rnd.choice([1, 2, 4, 8])
        n = rnd.randint(1, 10)
        free = [rnd.choice([0, per, rnd.randint(0, per)]) for _ in range(n)]
        g = rnd.randint(1, per * n + 1)
        assert place_consolidated(free, g, per) == _place_reference(free, g, per), (free, g, per)


def test_the_replay_ledger_builds_history_only_when_read_and_the_same_as_the_ledger() -> None:
    from slurm_dl.core.ledger import Ledger
    from slurm_dl.sim.ranking.ranker import LazySimLedger as SimLedger

    eager, lazy = Ledger(), SimLedger()
    for i in range(30):
        args = (float(i * 10), f"u{i % 3}", f"job{i % 5}", f"acct{i % 2}", 1 + i % 4, "p", 3600.0)
        eager.add_history(*args)
        lazy.add_history(*args)
        assert lazy.revision == eager.revision
    assert lazy._held  # nothing built yet
    assert lazy.history == eager.history
    assert not lazy._held and lazy.revision == eager.revision
    assert lazy.finished == eager.finished
    assert lazy.finished_dropped == eager.finished_dropped
