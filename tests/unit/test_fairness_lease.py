"""The pure finish-time fair-share decision (slurm_dl.core.fairness): who yields GPUs to whom."""

from __future__ import annotations

import pytest

from slurm_dl.core.fairness import (LeaseSettings, lease_end, plan_fair_preemptions, standings,
                                    water_fill)
from slurm_dl.core.model import Job, JobState

NOW = 100_000.0


def job(i, account, gpus=8, *, running=False, start=None, submit=0.0, ckpt=True, requeue=True,
        restarts=0, executed=0.0):
    j = Job(job_id=i, account=account, num_gpus=gpus, submit_time=submit, checkpointable=ckpt,
            requeue=requeue, restarts=restarts)
    if running:
        j.state = JobState.RUNNING
        j.start_time = NOW - 10_000.0 if start is None else start
        j.executed_s = executed or (NOW - j.start_time)
    else:
        j.executed_s = executed
    return j


def flood(account="a", n=4, gpus=8, **kw):
    return [job(100 + i, account, gpus, running=True, **kw) for i in range(n)]


S = LeaseSettings(lease_s=3600.0, restart_s=60.0, hysteresis=0.1)


def test_water_fill_gives_unused_share_to_others():
    fair = water_fill({"a": 100, "b": 4, "c": 0}, {"a": 1.0, "b": 1.0, "c": 1.0}, 32)
    assert fair == {"a": 28.0, "b": 4.0, "c": 0.0}
    assert water_fill({"a": 40, "b": 40}, {"a": 3.0, "b": 1.0}, 32) == {"a": 24.0, "b": 8.0}


def test_under_share_account_takes_gpus_from_the_flooding_one():
    running = flood()
    waiting = [job(1, "b", 8, submit=NOW - 5000), job(2, "b", 8, submit=NOW - 4000)]
    plan = plan_fair_preemptions(waiting, running, 32, NOW, S)
    assert [m.need for m in plan.moves] == [1, 2]
    victims = [v for m in plan.moves for v in m.victims]
    assert len(victims) == 2 and all(v >= 100 for v in victims)
    assert all(m.account == "b" for m in plan.moves)
    reason = next(iter(plan.moves[0].reasons.values()))
    assert "account a" in reason and "job 1 of account b" in reason
    # b now holds its fair 16: a third job of b takes nothing more
    more = waiting + [job(3, "b", 8, submit=NOW - 3000)]
    assert [m.need for m in plan_fair_preemptions(more, running, 32, NOW, S).moves] == [1, 2]


def test_jobs_that_did_not_opt_in_are_never_victims():
    running = flood(ckpt=False, requeue=True) + [job(200, "a", 8, running=True, requeue=False)]
    plan = plan_fair_preemptions([job(1, "b", 8)], running, 40, NOW, S)
    assert plan.moves == ()
    # only the one opted-in job may go
    running = flood(n=3, ckpt=False) + [job(300, "a", 8, running=True)]
    plan = plan_fair_preemptions([job(1, "b", 8)], running, 32, NOW, S)
    assert [m.victims for m in plan.moves] == [(300,)]


def test_lease_is_respected_and_wake_at_says_when_it_ends():
    started = NOW - 1000.0
    running = flood(start=started)
    plan = plan_fair_preemptions([job(1, "b", 8)], running, 32, NOW, S)
    assert plan.moves == ()
    assert plan.wake_at == pytest.approx(started + 3600.0)
    later = plan_fair_preemptions([job(1, "b", 8)], running, 32, started + 3600.0, S)
    assert len(later.moves) == 1


def test_restart_cost_is_not_part_of_the_lease():
    started = NOW - 3630.0  # a whole lease ago, but this run began with a 60 s restart
    restarted = flood(start=started, restarts=1)
    assert lease_end(restarted[0], S) == pytest.approx(started + 3660.0)
    assert plan_fair_preemptions([job(1, "b", 8)], restarted, 32, NOW, S).moves == ()
    fresh = flood(start=started)
    assert len(plan_fair_preemptions([job(1, "b", 8)], fresh, 32, NOW, S).moves) == 1


def test_restart_cap():
    running = flood(restarts=3)
    capped = LeaseSettings(lease_s=3600.0, hysteresis=0.1, max_restarts=3)
    assert plan_fair_preemptions([job(1, "b", 8)], running, 32, NOW, capped).moves == ()


def test_hysteresis_no_move_near_the_fair_share_and_no_ping_pong():
    # a holds 24 of 32, b 8 and waits for 8 more: fair 16 each; b takes 8 (a keeps 16)
    running = flood(n=3) + [job(50, "b", 8, running=True)]
    plan = plan_fair_preemptions([job(1, "b", 8)], running, 32, NOW, S)
    assert len(plan.moves) == 1
    # after the move (a 16, b 16) a's waiting job takes nothing back
    after = flood(n=2) + [job(50, "b", 8, running=True), job(1, "b", 8, running=True)]
    assert plan_fair_preemptions([job(7, "a", 8)], after, 32, NOW, S).moves == ()
    # a big victim that would leave its account further below than it was above: not taken
    big = [job(100, "a", 24, running=True), job(50, "b", 8, running=True)]
    assert plan_fair_preemptions([job(1, "b", 8)], big, 32, NOW, S).moves == ()


def test_free_gpus_first_then_only_what_is_missing():
    running = flood(n=3)  # 24 of 32 held: 8 free
    plan = plan_fair_preemptions([job(1, "b", 8), job(2, "b", 8)], running, 32, NOW, S)
    assert [m.need for m in plan.moves] == [2]  # job 1 starts on the free GPUs
    assert len(plan.moves[0].victims) == 1


def test_worst_rho_account_served_first():
    running = flood(n=4)
    s = standings([job(1, "b", 8, submit=NOW - 90_000), job(2, "c", 8, submit=NOW - 1000)], running, 32, NOW, S)
    assert s["b"].rho > s["c"].rho
    plan = plan_fair_preemptions([job(2, "c", 8, submit=NOW - 1000), job(1, "b", 8, submit=NOW - 90_000)],
                                 running, 32, NOW, LeaseSettings(lease_s=0.0, hysteresis=0.1, max_moves=1))
    assert [m.account for m in plan.moves] == ["b"]


def test_within_account_demotion_by_level():
    running = [job(100, "a", 8, running=True), job(101, "a", 8, running=True)]
    waiting = [job(1, "a", 8)]
    lv = {100: 1, 101: 0, 1: 0}
    plan = plan_fair_preemptions(waiting, running, 16, NOW, S, level=lambda j: lv[j.job_id])
    assert [(m.need, m.victims) for m in plan.moves] == [(1, (100,))]
    assert "same account" in plan.moves[0].reasons[100]
    assert plan_fair_preemptions(waiting, running, 16, NOW, S).moves == ()  # no level: no move


def test_config_reads_the_lease_and_warns_when_fair_share_cannot_preempt():
    from slurm_dl.core.config import config_warnings, parse_config

    base = {"gpu_types": [{"name": "h100"}],
            "node_groups": [{"name": "g", "nodes": "n[0-1]", "gpus_per_node": 8, "gpu_type": "h100"}],
            "policy": {"mix": "fairshare", "fairshare": {"lease_seconds": 900, "lease_hysteresis": 0.2}}}
    cfg = parse_config(base)
    s = LeaseSettings.from_config(cfg)
    assert (s.lease_s, s.hysteresis, s.restart_s) == (900.0, 0.2, cfg.preemption.restart_delay_seconds)
    assert config_warnings(cfg) == []
    off = parse_config({**base, "preemption": {"enabled": False}})
    assert any("fair share get GPUs only as jobs end" in w for w in config_warnings(off))
    short = parse_config({**base, "policy": {"mix": "fairshare", "fairshare": {"lease_seconds": 5}}})
    assert any("shorter than a restart" in w for w in config_warnings(short))
