"""The pure finish-time fair-share decision (slurm_dl.core.fairness): who yields GPUs to whom."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.fairness import (
    LeaseSettings,
    NodeView,
    fit,
    lease_end,
    plan_fair_preemptions,
    standings,
    water_fill,
)
from slurm_dl.core.model import Job, JobState

NOW = 100_000.0


def job(
    i,
    account,
    gpus=8,
    *,
    running=False,
    start=None,
    submit=0.0,
    ckpt=True,
    requeue=True,
    restarts=0,
    executed=0.0,
):
    j = Job(
        job_id=i,
        account=account,
        num_gpus=gpus,
        submit_time=submit,
        checkpointable=ckpt,
        requeue=requeue,
        restarts=restarts,
    )
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
    s = standings(
        [job(1, "b", 8, submit=NOW - 90_000), job(2, "c", 8, submit=NOW - 1000)],
        running,
        32,
        NOW,
        S,
    )
    assert s["b"].rho > s["c"].rho
    plan = plan_fair_preemptions(
        [job(2, "c", 8, submit=NOW - 1000), job(1, "b", 8, submit=NOW - 90_000)],
        running,
        32,
        NOW,
        LeaseSettings(lease_s=0.0, hysteresis=0.1, max_moves=1),
    )
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

    base = {
        "gpu_types": [{"name": "h100"}],
        "node_groups": [{"name": "g", "nodes": "n[0-1]", "gpus_per_node": 8, "gpu_type": "h100"}],
        "policy": {
            "mix": "fairshare",
            "fairshare": {"lease_seconds": 900, "lease_hysteresis": 0.2},
        },
    }
    cfg = parse_config(base)
    s = LeaseSettings.from_config(cfg)
    assert (s.lease_s, s.hysteresis, s.restart_s) == (
        900.0,
        0.2,
        cfg.preemption.restart_delay_seconds,
    )
    assert config_warnings(cfg) == []
    off = parse_config({**base, "preemption": {"enabled": False}})
    assert any("fair share get GPUs only as jobs end" in w for w in config_warnings(off))
    short = parse_config(
        {**base, "policy": {"mix": "fairshare", "fairshare": {"lease_seconds": 5}}}
    )
    assert any("shorter than a restart" in w for w in config_warnings(short))
    # the lease never ends before the minimum run every preemption respects
    floor = parse_config(
        {
            **base,
            "policy": {"mix": "fairshare", "fairshare": {"lease_seconds": 5}},
            "preemption": {"min_runtime_seconds": 120},
        }
    )
    assert LeaseSettings.from_config(floor).lease_s == 120.0


# --- where the GPUs are: free GPUs in pieces do not start a one-node job --------------------


def _view(running, free, size=8):
    """Node view of two nodes: ``running`` as (job, node) pairs, ``free`` per node."""
    return NodeView(
        size={0: size, 1: size},
        free=dict(enumerate(free)),
        alloc={j.job_id: ((n, j.num_gpus),) for j, n in running},
    )


def test_fit_is_the_consolidated_rule():
    size = {0: 8, 1: 8, 2: 8}
    assert fit({0: 2, 1: 2, 2: 3}, size, 4) is None  # 7 free, no node with 4
    assert fit({0: 6, 1: 4, 2: 8}, size, 4) == ((1, 4),)  # the fullest node that fits
    assert fit({0: 8, 1: 3, 2: 8}, size, 11) == (
        (0, 8),
        (2, 3),
    )  # the rest: the free-most other node
    assert fit({0: 8, 1: 2, 2: 7}, size, 16) is None


def test_fragmented_free_gpus_do_not_hide_a_needed_move():
    # a holds 12 of 16 GPUs as four 3-GPU jobs, two per node: 2 + 2 GPUs free; b waits for
    # two 4-GPU jobs, each on one node (fair: 8 each). Counting GPUs alone, b's first job
    # "starts on the free ones" and no move is made for it, though it cannot start anywhere
    a = [(job(100 + i, "a", 3, running=True), i // 2) for i in range(4)]
    running = [j for j, _ in a]
    node = {j.job_id: n for j, n in a}
    waiting = [
        job(1, "b", 4, submit=NOW - 100),
        job(2, "b", 4, submit=NOW - 50),
        job(3, "a", 3, submit=NOW - 5000),
    ]
    assert 1 not in [m.need for m in plan_fair_preemptions(waiting, running, 16, NOW, S).moves]
    plan = plan_fair_preemptions(waiting, running, 16, NOW, S, nodes=_view(a, [2, 2]))
    assert [m.need for m in plan.moves] == [1, 2]
    for move in plan.moves:  # one 3-GPU job makes 5 free on its node
        assert len(move.victims) == 1
        assert {node[c] for c in move.candidates} == {node[move.victims[0]]}


def test_node_moves_respect_leases_and_opt_in():
    a = [
        (job(100, "a", 3, running=True, start=NOW - 100), 0),
        (job(101, "a", 3, running=True, ckpt=False), 0),
        (job(102, "a", 3, running=True), 1),
        (job(103, "a", 3, running=True), 1),
    ]
    waiting = [job(1, "b", 4), job(2, "b", 4), job(3, "a", 3)]
    plan = plan_fair_preemptions(waiting, [j for j, _ in a], 16, NOW, S, nodes=_view(a, [2, 2]))
    # node 0's jobs are in their lease or did not opt in: every move takes from node 1
    assert plan.moves and {v for m in plan.moves for v in m.victims} <= {102, 103}


def test_a_whole_node_job_gets_a_node_opened():
    # the trace that showed it: an account arrives with 8-GPU jobs of seconds while 1-GPU
    # jobs of another leave a few GPUs free on every node (four nodes, 2 free on each)
    a = [(job(100 + 10 * n + i, "a", 1, running=True), n) for n in range(4) for i in range(6)]
    running = [j for j, _ in a]
    waiting = [job(1, "b", 8), job(2, "b", 8), job(9, "a", 1)]
    view = NodeView(
        size=dict.fromkeys(range(4), 8),
        free=dict.fromkeys(range(4), 2),
        alloc={j.job_id: ((n, 1),) for j, n in a},
    )
    # counting GPUs alone, 8 are free: job 1 is taken for started and gets no move
    assert [m.need for m in plan_fair_preemptions(waiting, running, 32, NOW, S).moves] == [2]
    plan = plan_fair_preemptions(waiting, running, 32, NOW, S, nodes=view)
    assert [m.need for m in plan.moves] == [1, 2]  # a: 24 of its fair 16 -> 12, b: 0 -> 16
    for move in plan.moves:
        assert len(move.victims) == 6 and len({v // 10 for v in move.victims}) == 1


def test_max_min_move_for_an_account_that_holds_nothing():
    # fair shares of 5.3 GPUs; a holds an 8-GPU job on node 0 and a 1-GPU job on node 1,
    # where c's 4-GPU job leaves 3 free; b holds nothing and asks for one node. Only a's
    # 8-GPU job opens one: a ends 4.3 GPUs under its share, further than it was over (the
    # first rule refuses), but a ends holding more of its share than b did (max-min allows)
    a = [(job(100, "a", 8, running=True), 0), (job(101, "a", 1, running=True), 1)]
    c = [(job(200, "c", 4, running=True), 1)]
    waiting = [job(1, "b", 8), job(3, "a", 8), job(4, "c", 4)]
    view = _view(a + c, [0, 3])
    plan = plan_fair_preemptions(waiting, [j for j, _ in a + c], 16, NOW, S, nodes=view)
    assert [(m.need, m.victims) for m in plan.moves] == [(1, (100,))]
    # the same when a holds only that job: it would end with nothing, no better than b: refused
    plan = plan_fair_preemptions(
        waiting, [j for j, _ in a[:1] + c], 16, NOW, S, nodes=_view(a[:1] + c, [0, 4])
    )
    assert plan.moves == ()


def test_an_account_that_holds_nothing_is_served_by_accounts_within_the_hysteresis():
    # 26 nodes; a and c hold 13 whole-node jobs each, 104 GPUs against fair shares of 100
    # (over by 4 %, inside the 10 % hysteresis); b holds nothing and asks for one node. The
    # first rule takes from no one (no account is over by more than the hysteresis): b would
    # wait for a job to end. Max-min: a ends at 96 % of its share, above b's 0 %: b gets a node
    running = [job(100 + i, "a", 8, running=True) for i in range(13)]
    running += [job(200 + i, "c", 8, running=True) for i in range(13)]
    waiting = [job(1, "b", 8), job(3, "a", 8), job(4, "c", 8)]
    plan = plan_fair_preemptions(waiting, running, 208, NOW, S)
    (move,) = plan.moves
    assert move.need == 1 and len(move.victims) == 1
    # once b holds its share, nobody within the band yields to anyone
    after = [j for j in running if j.job_id != move.victims[0]] + [job(1, "b", 8, running=True)]
    assert plan_fair_preemptions([job(3, "a", 8), job(4, "c", 8)], after, 208, NOW, S).moves == ()


def test_sim_a_late_account_starts_within_a_decision_on_fragmented_nodes():
    """Replay: one account's 3-GPU jobs leave 2 GPUs free on each of two nodes; a second
    account's 4-GPU job of 10 s arrives after the lease. It starts at the next decision, not
    when one of the long jobs ends (counting GPUs alone, the 4 free ones looked enough)."""
    from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
    from slurm_dl.sim.ranking.ranker import make_ranker
    from slurm_dl.sim.engine.state import PreemptionCost

    jobs = [
        Job(job_id=100 + i, account="a", num_gpus=3, submit_time=float(i), duration=100_000.0)
        for i in range(5)
    ]
    late = [
        Job(job_id=1 + i, account="b", num_gpus=4, submit_time=5000.0 + i, duration=10.0)
        for i in range(2)
    ]
    res = run_cluster(
        jobs + late,
        ClusterSpec("c", 2, 8),
        make_ranker("fairshare", lease_s=3600.0),
        PreemptionCost(60.0),
    )
    first = min(s.first_start for s in res.jobs if s.account == "b")
    assert first - 5000.0 <= 60.0
    assert sum(s.preemptions for s in res.jobs if s.account == "a") >= 1


def test_yields_kept_by_the_caller_give_the_same_plan():
    """``yields`` (each running job's yield_from, kept while it runs) decides as the rules read
    at the decision do: leases running and over, jobs that cannot resume, the restart cap."""
    from slurm_dl.core.fairness import yield_from

    capped = LeaseSettings(lease_s=3600.0, restart_s=60.0, hysteresis=0.1, max_restarts=2)
    running = (
        flood(n=2, start=NOW - 1000.0)
        + flood(n=2, start=NOW - 3600.0)
        + [
            job(200, "a", 8, running=True, ckpt=False, requeue=False),
            job(201, "a", 8, running=True, restarts=2),
            job(202, "a", 8, running=True, restarts=1),
        ]
    )
    for i, j in enumerate(running):
        j.job_id = 300 + i
    waiting = [job(1, "b", 8, submit=NOW - 5000), job(2, "b", 16, submit=NOW - 4000)]
    yields = {j.job_id: yield_from(j, capped, None) for j in running}
    assert yields[304] == float("inf") and yields[305] == float("inf")
    for now in (NOW, NOW + 1800.0, NOW + 3600.0):
        a = plan_fair_preemptions(waiting, running, 56, now, capped, level=lambda j: 0)
        b = plan_fair_preemptions(
            waiting, running, 56, now, capped, level=lambda j: 0, yields=yields
        )
        assert a == b
    assert a.moves and b.wake_at is None
    assert plan_fair_preemptions(
        waiting, running, 56, NOW, capped, yields=yields
    ).wake_at == pytest.approx(NOW + 2600.0)


def test_running_jobs_ranked_by_the_caller_give_the_same_plan():
    """``ranked`` (each account's running jobs in the within-account order, kept by the caller)
    gives the plan that sorting ``running`` at the decision gives, with or without ``yields``."""
    from slurm_dl.core.fairness import yield_from

    running = (
        flood(n=3, start=NOW - 1000.0)
        + flood(n=3)
        + [job(60, "b", 8, running=True), job(61, "c", 8, running=True, ckpt=False)]
    )
    for i, j in enumerate(running):
        j.job_id = 300 + i
        j.executed_s = 1000.0 * (i % 4)
    lv = {j.job_id: int(j.executed_s // 1500) for j in running}
    waiting = [
        job(1, "b", 8, submit=NOW - 5000),
        job(2, "c", 16, submit=NOW - 4000),
        job(3, "a", 8),
    ]
    lv.update({1: 0, 2: 0, 3: 0})
    order = lambda j: (lv[j.job_id], j.submit_time, j.job_id)  # noqa: E731
    ranked: dict[str, list] = {}
    for j in sorted(running, key=lambda j: (order(j), j.job_id)):
        ranked.setdefault(j.account, []).append(j)
    yields = {j.job_id: yield_from(j, S, None) for j in running}
    for now in (NOW, NOW + 3000.0):
        a = plan_fair_preemptions(
            waiting, running, 64, now, S, order=order, level=lambda j: lv[j.job_id]
        )
        for kw in ({"ranked": ranked}, {"ranked": ranked, "yields": yields}):
            b = plan_fair_preemptions(
                waiting, running, 64, now, S, order=order, level=lambda j: lv[j.job_id], **kw
            )
            assert a == b
    assert a.moves


def test_held_jobs_do_not_inflate_an_accounts_standing() -> None:
    """A job held by its owner waits for nothing: it neither adds demand nor waiting time."""
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.core.model import Job, JobState
    from slurm_dl.core.policy import PolicyContext
    from slurm_dl.core.policy.fairshare_lease import FairShareLeasePolicy

    cfg = load_config(Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml")
    pol = FairShareLeasePolicy(cfg)
    ctx = PolicyContext(now=10_000.0, total_gpus=8)
    running = Job(
        1, account="a", num_gpus=4, state=JobState.RUNNING, start_time=0.0, executed_s=100.0
    )
    held = [
        Job(i, account="b", num_gpus=4, submit_time=0.0, state_reason="JobHeldUser") for i in (2, 3)
    ]
    waiting = Job(4, account="b", num_gpus=4, submit_time=0.0, state_reason="Resources")
    with_held = pol.standings_of([running, *held, waiting], ctx)
    without = pol.standings_of([running, waiting], ctx)
    assert with_held == without
