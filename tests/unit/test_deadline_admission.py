"""Deadline admission (the EDF demand test on promised work) and soft deadlines (utility steps):
the pure decisions, the policy's levels for demoted and soft jobs, the Chronus reader's steps,
and the simulator's utility figures."""

from __future__ import annotations

import pytest

from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy import PolicyContext
from slurm_dl.core.policy.admission import DeadlineAdmission, demand_fits, demotion_message
from slurm_dl.core.policy.deadline import DEMOTED_TAG, SOFT_FROM_TAG, DeadlinePolicy
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import read_trace

H = 3600.0


def _dl(job_id: int, gpus: int, limit: float, deadline: float, **kw) -> Job:
    return Job(
        job_id, user="u", account="a", num_gpus=gpus, time_limit=limit, deadline=deadline, **kw
    )


def test_demand_test_counts_the_work_due_before_each_deadline() -> None:
    # 8 GPUs, 2 h away: 16 GPU-hours fit; 10 promised + 6 asked fit, + 7 do not
    assert demand_fits([(2 * H, 10 * H)], (2 * H, 6 * H), 0.0, 8)[0]
    ok, why = demand_fits([(2 * H, 10 * H)], (2 * H, 7 * H), 0.0, 8)
    assert not ok and "already promised fill 1 h 15 min" in why and "add 52 min" in why
    # a new early job may not break a later promise: 8 GPUs × 3 h = 24 GPU-h, 20 promised by then
    ok, why = demand_fits([(3 * H, 20 * H)], (1 * H, 5 * H), 0.0, 8)
    assert not ok and "earlier-admitted deadline" in why
    assert demand_fits([(3 * H, 20 * H)], (1 * H, 4 * H), 0.0, 8)[0]


def test_admission_promises_in_arrival_order_and_demotes_what_no_longer_fits() -> None:
    adm = DeadlineAdmission(share=1.0)
    # 8 GPUs; each job 4 GPUs × 1 h due in 2 h: four fit (16 GPU-h), the fifth does not
    jobs = [_dl(i, 4, H, 2 * H) for i in range(5)]
    answers = [adm.decide(j, 0.0, 8) for j in jobs]
    assert answers[:4] == [None] * 4
    assert answers[4] is not None and "already promised" in answers[4]
    assert adm.decide(jobs[4], 0.0, 8) == answers[4]  # decided once: asking again changes nothing
    # a promised job that ends frees its share for the next newcomer
    adm.forget(0)
    assert adm.decide(_dl(9, 4, H, 2 * H), 0.0, 8) is None


def test_admission_share_keeps_part_of_the_cluster_for_best_effort() -> None:
    adm = DeadlineAdmission(share=0.5)
    assert adm.decide(_dl(1, 4, H, 2 * H), 0.0, 8) is None  # 4 GPU-h of 8 set aside
    assert adm.decide(_dl(2, 4, H, 2 * H), 0.0, 8) is None  # 8 of 8
    assert adm.decide(_dl(3, 1, 600.0, 2 * H), 0.0, 8) is not None
    # a job wider than the share may still be promised when its window holds its GPU-time
    assert DeadlineAdmission(share=0.5).decide(_dl(4, 8, 600.0, H), 0.0, 8) is None
    assert "cluster has 8" in DeadlineAdmission(share=0.5).decide(_dl(5, 9, 60.0, H), 0.0, 8)


def test_the_time_limit_is_the_promised_work_not_the_real_run_time() -> None:
    # the user knows the job runs 10 min but asks 2 h: admission plans 2 h, and 2 h do not fit
    adm = DeadlineAdmission()
    liar = _dl(1, 8, 2 * H, 1.5 * H, duration=600.0)
    assert "ends after the deadline" in adm.decide(liar, 0.0, 8)
    assert (
        DeadlineAdmission().decide(Job(2, num_gpus=1, deadline=H), 0.0, 8) is not None
    )  # no limit
    # a running promised job owes only what is left of its limit
    adm = DeadlineAdmission()
    run = _dl(3, 8, 2 * H, 3 * H, state=JobState.RUNNING, start_time=0.0)
    assert adm.decide(run, 0.0, 8) is None
    run.executed_s = 1.5 * H  # 1.5 h later it owes 0.5 h: 1 h more fits before its deadline
    assert adm.decide(_dl(4, 8, H, 3 * H), 1.5 * H, 8) is None
    assert adm.decide(_dl(5, 8, 600.0, 3 * H), 1.5 * H, 8) is not None


def test_prioritizer_step_forgets_ended_jobs_and_decides_new_ones_in_submission_order() -> None:
    adm = DeadlineAdmission()
    a, b = _dl(1, 8, H, 1.5 * H), _dl(2, 8, H, 1.5 * H)
    b.submit_time = 5.0
    assert adm.step([b, a], 10.0, 8) == {2: adm.demoted[2]}  # the earlier submission got the slot
    assert adm.step([b], 20.0, 8) == {2: adm.demoted[2]}  # a ended; b's answer stands
    assert 1 not in adm.admitted


def test_a_demoted_deadline_is_never_boosted_and_lost_like_any_other() -> None:
    pol = DeadlinePolicy(boost_slack_s=H)
    job = _dl(1, 1, 600.0, 1800.0)
    assert pol.level(job, 0.0) == pol.BOOSTED
    job.tags = {DEMOTED_TAG: "no room"}
    assert pol.level(job, 0.0) == pol.NEUTRAL
    assert pol.level(job, 1500.0) == pol.HOPELESS
    assert pol.next_key_change(job, PolicyContext(now=0.0)) > 1200.0
    assert "best effort" in demotion_message("no room")


def test_soft_deadlines_boost_by_the_utility_still_reachable() -> None:
    pol = DeadlinePolicy(boost_slack_s=H)
    steps = ((2 * H, 10.0), (3 * H, 5.0), (5 * H, 2.0))
    job = Job(1, num_gpus=1, time_limit=H, soft_deadlines=steps)
    ctx = PolicyContext(now=0.0)
    assert pol.target(job, 0.0) == (2 * H, 1.0)
    assert pol.score(job, ctx) == 0.25  # an hour to spare: waits behind best effort (0.5)
    ctx.now = 0.5 * H
    assert pol.score(job, ctx) == 1.0  # boosted for the full value
    ctx.now = 1.5 * H  # the first step is out of reach: aims at the second, worth half
    assert pol.target(job, ctx.now) == (3 * H, 0.5)
    assert pol.score(job, ctx) == 0.75
    ctx.now = 4.5 * H  # nothing reachable any more
    assert pol.level(job, ctx.now) == pol.HOPELESS and pol.score(job, ctx) == 0.0
    # admission promised the second step: the first is given up
    job.tags = {SOFT_FROM_TAG: repr(3 * H)}
    assert pol.target(job, 0.0) == (3 * H, 0.5)


def test_a_soft_job_is_boosted_only_for_the_step_admission_promised() -> None:
    """Past its promised step it can still earn a later one, but takes no GPUs for it: it waits
    behind best effort; a soft job admission did not promise waits too, until it is lost."""
    pol = DeadlinePolicy(boost_slack_s=H)
    steps = ((2 * H, 10.0), (3 * H, 5.0), (5 * H, 2.0))
    job = Job(1, num_gpus=1, time_limit=H, soft_deadlines=steps, tags={SOFT_FROM_TAG: repr(2 * H)})
    assert pol.level(job, 0.5 * H) == pol.BOOSTED
    assert pol.level(job, 1.5 * H) == pol.WAITING  # aims at the 3 h step, not promised
    assert pol.score(job, PolicyContext(now=1.5 * H)) == 0.25
    assert pol.next_key_change(job, PolicyContext(now=0.5 * H)) == pytest.approx(H)
    demoted = Job(2, num_gpus=1, time_limit=H, soft_deadlines=steps, tags={DEMOTED_TAG: "no room"})
    assert (
        pol.level(demoted, 0.5 * H) == pol.WAITING and pol.level(demoted, 4.5 * H) == pol.HOPELESS
    )
    assert pol.next_key_change(demoted, PolicyContext(now=0.0)) == pytest.approx(4 * H)
    strict = Job(3, num_gpus=1, time_limit=H, deadline=3 * H)
    assert pol.level(strict, 0.0) == pol.NEUTRAL  # a strict one with time to spare is best effort


@pytest.mark.parametrize(
    "mode, soft_top, cheap_above_dear",
    [("utility", 1.0, False), ("strict-first", 0.99, False), ("value-rate", None, True)],
)
def test_soft_boost_modes(mode, soft_top, cheap_above_dear) -> None:
    pol = DeadlinePolicy(boost_slack_s=H, soft_boost=mode)
    ctx = PolicyContext(now=0.5 * H)
    strict = Job(1, num_gpus=1, time_limit=H, deadline=2 * H)
    cheap = Job(2, num_gpus=1, time_limit=H, soft_deadlines=((2 * H, 10.0),))
    dear = Job(3, num_gpus=8, time_limit=H, soft_deadlines=((2 * H, 10.0),))
    assert pol.score(strict, ctx) == 1.0
    for soft in (cheap, dear):
        assert 0.5 < pol.score(soft, ctx) <= 1.0
        if soft_top is not None:
            assert pol.score(soft, ctx) == pytest.approx(soft_top)
    assert (pol.score(cheap, ctx) > pol.score(dear, ctx)) == cheap_above_dear
    # at the same deadline: EDF alone (utility), else a strict job first
    assert (pol.tiebreak(strict, ctx) < pol.tiebreak(cheap, ctx)) == (mode != "utility")
    with pytest.raises(ValueError, match="soft_boost"):
        DeadlinePolicy(soft_boost="loudest")


def test_soft_job_is_admitted_at_its_first_step_that_fits() -> None:
    adm = DeadlineAdmission()
    assert adm.decide(_dl(1, 8, H, 1.5 * H), 0.0, 8) is None
    soft = Job(
        2, num_gpus=8, time_limit=H, soft_deadlines=((1.5 * H, 10.0), (3 * H, 5.0), (4 * H, 0.0))
    )
    assert adm.decide(soft, 0.0, 8) is None and adm.admitted[2] == 3 * H
    late = Job(3, num_gpus=8, time_limit=H, soft_deadlines=((1.5 * H, 10.0), (1.75 * H, 5.0)))
    assert adm.decide(late, 0.0, 8) is not None


CHRONUS = """job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,expect_time_list,expect_value_list,best_effort,job_type
0,vc_a,8,0,10,vgg16,60,1,90,10,0,strict
1,vc_a,8,0,10,vgg16,60,1,90,10,0,strict
2,vc_b,8,0,10,resnet50,60,1,90-150-240,10-6-2,0,soft
3,vc_b,8,0,10,resnet50,30,1,30,10,1,best
"""


def test_chronus_utility_steps_and_the_admission_in_the_simulator(tmp_path) -> None:
    path = tmp_path / "mix.csv"
    path.write_text(CHRONUS)
    jobs = read_trace(path, "chronus")
    assert jobs[2].soft_deadlines == ((90 * 60.0, 10.0), (150 * 60.0, 6.0), (240 * 60.0, 2.0))
    assert jobs[0].soft_deadlines == ((90 * 60.0, 10.0),)
    setup = SimSetup(nodes=1, gpus_per_node=8, cost=PreemptionCost(60.0), fairness=False)
    on, _ = simulate(
        jobs,
        lambda: make_ranker("deadline-las", boost_s=H, admission=True, admission_share=1.0),
        setup,
    )
    off, _ = simulate(jobs, lambda: make_ranker("deadline-las", boost_s=H, admission=False), setup)
    # one 8-GPU hour fits before 90 min: job 0 is promised, job 1 demoted, the soft job gets its
    # 150-min step, and the best-effort job runs next (120-150 min), before the demoted one;
    # without admission both strict jobs are boosted and the best-effort job waits as long
    assert on["deadline_miss_rate"] == 0.5
    assert on["utility_max"] == 30.0 and on["utility_earned"] == 16.0
    assert on["best_effort_avg_jct_s"] == 150 * 60.0 <= off["best_effort_avg_jct_s"]
    assert on["value_earned"] == 6.0


def test_the_best_effort_reserve_is_only_what_best_effort_work_wants() -> None:
    adm = DeadlineAdmission(share=0.5)
    assert adm.capacity(8, None) == 4.0  # not known: the whole reserve
    assert adm.capacity(8, 0) == 8.0  # no best-effort work about: deadlines may promise it all
    assert adm.capacity(8, 2) == 6.0
    assert adm.capacity(8, 100) == 4.0
    # two 8-GPU hours due in 1 h fit only while nobody else wants GPUs
    assert adm.decide(_dl(1, 8, 3000.0, H), 0.0, 8, best_effort_gpus=0) is None
    assert (
        DeadlineAdmission(share=0.5).decide(_dl(2, 8, 3000.0, H), 0.0, 8, best_effort_gpus=8)
        is not None
    )
    # the prioritizer counts the live jobs that asked for no deadline
    adm = DeadlineAdmission(share=0.5)
    plain = Job(3, num_gpus=4, submit_time=-1.0)
    assert adm.step([plain, _dl(4, 8, 1900.0, H)], 0.0, 8) == {4: adm.demoted[4]}
    assert DeadlineAdmission(share=0.5).step([_dl(4, 8, 1900.0, H)], 0.0, 8) == {}


def test_simulate_prints_the_utility_earned(tmp_path) -> None:
    from typer.testing import CliRunner

    from slurm_dl.cli.main import app

    path = tmp_path / "mix.csv"
    path.write_text(CHRONUS)
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(path),
            "--format",
            "chronus",
            "--policy",
            "deadline-las",
            "--nodes",
            "1",
            "--no-fairness",
        ],
        env={"COLUMNS": "80"},
    )
    assert r.exit_code == 0, r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("deadline-las: utility "))
    assert " of 30 (" in line and line.endswith("%)")
    assert all(len(x) <= 80 for x in r.stdout.splitlines()), r.stdout


# --- held jobs: a job that cannot start owes nothing until it can -------------------------
HELD = {"state_reason": "JobHeldUser"}


def _user(
    job_id: int, user: str, gpus: int, limit: float, deadline: float, submit: float = 0.0, **kw
) -> Job:
    return Job(
        job_id,
        user=user,
        account=user,
        num_gpus=gpus,
        time_limit=limit,
        deadline=deadline,
        submit_time=submit,
        **kw,
    )


def test_held_deadline_jobs_take_no_room_and_are_tested_again_in_turn_when_released() -> None:
    """User a's four held 8-GPU deadline jobs (the per-user quota) made user b's deadline
    "not admitted". 8 GPUs, due in 5.5 h: 44 GPU-hours; a's jobs ask 8 each, b's 16."""
    adm = DeadlineAdmission()
    a = [_user(i, "a", 8, H, 5.5 * H, **HELD) for i in range(1, 5)]
    assert (
        adm.step(a, 0.0, 8) == {}
        and adm.admitted == {}
        and adm.held == dict.fromkeys(range(1, 5), "hold")
    )
    b = _user(10, "b", 8, 2 * H, 5.5 * H, submit=60.0)
    assert adm.step([*a, b], 60.0, 8) == {} and adm.admitted == {10: 5.5 * H}
    # all four released at once: a newcomer each, after b, one after another (16 + 3 × 8 fit)
    for j in a:
        j.state_reason = ""
    demoted = adm.step([*a, b], 120.0, 8)
    assert adm.admitted.keys() == {10, 1, 2, 3} and demoted.keys() == {4} and adm.held == {}
    assert demoted[4].startswith("after its hold was released, deadlines already promised fill")


def test_a_held_promise_counts_again_when_released_if_it_still_fits() -> None:
    adm = DeadlineAdmission()
    job = _dl(1, 8, H, 3 * H)
    assert adm.step([job], 0.0, 8) == {} and 1 in adm.admitted
    job.state_reason = "JobHeldAdmin"  # scontrol hold (or requeuehold)
    assert adm.step([job], 60.0, 8) == {} and 1 not in adm.admitted and adm.held == {1: "hold"}
    other = _dl(2, 8, H, 3 * H, submit_time=90.0)  # fits beside it: both kept
    job.state_reason = "Priority"
    assert adm.step([job, other], 120.0, 8) == {} and adm.admitted == {1: 3 * H, 2: 3 * H}
    # held again, and meanwhile the room goes to someone else: demoted on release, and told why
    job.state_reason = "JobHeldUser"
    third = _dl(3, 8, H, 3 * H, submit_time=150.0)
    adm.step([job, other, third], 180.0, 8)
    job.state_reason = ""
    assert "after its hold was released" in adm.step([job, other, third], 240.0, 8)[1]
    assert adm.admitted.keys() == {2, 3}
    # a demoted job released again is a newcomer again: admitted once the room is back
    job.state_reason = "JobHeldUser"
    adm.step([job, other], 300.0, 8)
    job.state_reason = ""
    assert adm.step([job, other], 360.0, 8) == {} and adm.admitted.keys() == {1, 2}


def test_a_dependency_that_can_never_be_met_owes_nothing() -> None:
    adm = DeadlineAdmission()
    stuck = _dl(1, 8, 4 * H, 5 * H, state_reason="DependencyNeverSatisfied")
    waiting = _dl(2, 8, 4 * H, 5 * H, state_reason="Dependency", submit_time=1.0)  # may still start
    assert adm.step([stuck, waiting], 0.0, 8) == {} and adm.admitted.keys() == {2}
    assert adm.held == {1: "dependency"}
    stuck.state_reason = ""  # an operator fixed the dependency
    assert adm.step([stuck, waiting], 60.0, 8)[1].startswith("once its dependency could be met, ")


def test_held_jobs_survive_a_restart() -> None:
    adm = DeadlineAdmission()
    held = _dl(1, 8, H, 5 * H, **HELD)
    adm.step([held], 0.0, 8)
    again = DeadlineAdmission()
    again.restore(adm.to_dict())
    assert again.held == {1: "hold"} and again.admitted == {}
    assert "held" not in DeadlineAdmission().to_dict()  # as older daemons saved it
    held.state_reason = ""
    assert again.step([held], 60.0, 8) == {} and again.admitted == {1: 5 * H} and again.held == {}


def test_a_held_best_effort_job_reserves_no_gpus() -> None:
    """The reserve kept from deadlines is for best-effort work that can start."""
    plain = Job(3, num_gpus=8, submit_time=-1.0, **HELD)
    adm = DeadlineAdmission(share=0.5)
    assert adm.step([plain, _dl(4, 8, 1900.0, H)], 0.0, 8) == {}


def test_the_simulator_never_holds_and_decides_as_before() -> None:
    adm = DeadlineAdmission()
    jobs = [_dl(i, 4, H, 2 * H) for i in range(5)]
    assert [adm.decide(j, 0.0, 8) is None for j in jobs] == [True] * 4 + [False]
    assert "held" not in adm.to_dict()  # nothing new in what it saves


def test_a_task_released_from_a_hold_is_tested_on_its_own_not_given_its_arrays_answer() -> None:
    adm = DeadlineAdmission()
    array = _dl(100, 8, H, 2.5 * H, array_job_id=100, array_tasks=2)  # 2 × 8 GPU-h of 20: promised
    assert adm.step([array], 0.0, 8) == {} and 100 in adm.admitted
    task = _dl(101, 8, H, 2.5 * H, array_job_id=100, state_reason="JobHeldUser")  # split off, held
    array.array_tasks = 1
    other = _dl(7, 8, H, 2.5 * H, submit_time=30.0)  # takes the room the held task left
    assert adm.step([array, task, other], 60.0, 8) == {} and adm.admitted.keys() == {100, 7}
    task.state_reason = ""
    assert "after its hold was released" in adm.step([array, task, other], 120.0, 8)[101]


def test_a_release_is_tested_after_the_jobs_that_arrived_meanwhile() -> None:
    """Held since before c was submitted, a is released in the cycle that first sees c: room for
    one of them. a's early submission buys it nothing: it comes in as at its release."""
    adm = DeadlineAdmission()
    a = _user(1, "a", 8, H, 1.5 * H, **HELD)
    adm.step([a], 0.0, 8)
    c = _user(2, "c", 8, H, 1.5 * H, submit=30.0)
    a.state_reason = ""
    assert adm.step([a, c], 60.0, 8).keys() == {1} and adm.admitted.keys() == {2}


def test_the_dry_runs_verdict_tests_the_new_job_after_the_queues_deadlines() -> None:
    """dlsubmit --dry-run: 8 GPUs; a promised 8-GPU hour due in 1 h fills them, so a new
    8-GPU hour due soon after is not admitted, and one due in 3 h is."""
    from slurm_dl.core.model import Job
    from slurm_dl.core.policy.admission import admitted_now

    queued = Job(1, user="u", num_gpus=8, time_limit=3600.0, deadline=4000.0, submit_time=0.0)
    tight = Job(2, user="v", num_gpus=8, time_limit=3600.0, deadline=4100.0, submit_time=100.0)
    why = admitted_now(tight, [queued], 100.0, 8, 1.0)
    assert why is not None and "deadlines already promised" in why, why
    later = Job(2, user="v", num_gpus=8, time_limit=3600.0, deadline=3 * 3600.0, submit_time=100.0)
    assert admitted_now(later, [queued], 100.0, 8, 1.0) is None
