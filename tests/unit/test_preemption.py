"""Preemption planning: gang-aware, minimum runtime, restart cap, classes, hysteresis, ties."""

from __future__ import annotations

import random

from slurm_dl.core.config import parse_config
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobClass, JobState, Node, Switch, Topology
from slurm_dl.core.policy import PolicyContext
from slurm_dl.core.preemption import plan_preemption

R = JobState.RUNNING
NOW = 10_000.0


def cfg(**pre):
    base = {"min_runtime_seconds": 600, "max_restarts": 3, "hysteresis": 0.1}
    base.update(pre)
    return parse_config(
        {
            "gpu_types": [{"name": "h100"}],
            "node_groups": [
                {"name": "g", "nodes": "n[0-3]", "gpus_per_node": 8, "gpu_type": "h100"}
            ],
            "preemption": base,
        }
    )


def running(i, gpus, nodes, start=0.0, **kw):
    return Job(i, num_gpus=gpus, nodes=tuple(nodes), state=R, start_time=start, **kw)


def node_state(jobs, names=("n0", "n1", "n2", "n3")):
    used = {n: 0 for n in names}
    for j in jobs:
        per = j.num_gpus // len(j.nodes)
        for n in j.nodes:
            used[n] += per
    return [Node(n, 8, "h100", gpus_used=used[n]) for n in names]


def plan(waiting, jobs, scores, config=None, topo=None, ledger=None, nodes=None):
    return plan_preemption(
        waiting,
        jobs,
        nodes or node_state(jobs),
        topo,
        PolicyContext(now=NOW, ledger=ledger),
        config or cfg(),
        scores=scores,
    )


def test_no_victims_when_the_job_already_fits():
    p = plan(Job(1, num_gpus=4), [running(2, 4, ["n0"])], {1: 1.0, 2: 0.0})
    assert p is not None and p.victims == () and p.placement.num_gpus == 4


def test_picks_the_cheapest_node_and_whole_gang_victims():
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 4, ["n1"]),
        running(12, 4, ["n1"]),
        running(13, 16, ["n2", "n3"]),
    ]
    scores = {1: 1.0, 10: 0.2, 11: 0.3, 12: 0.1, 13: 0.0}
    p = plan(Job(1, num_gpus=4), jobs, scores)
    assert p.victim_ids == (12,)  # a 4-GPU victim on n1 frees exactly 4: no waste
    assert p.gpus_wasted == 0 and p.placement.nodes == ("n1",)
    assert "yields to job 1" in p.victims[0].reason
    # a 16-GPU job needs two whole nodes: the 2-node gang job 13 is taken whole
    p = plan(Job(2, num_gpus=16), jobs, {**scores, 2: 1.0})
    assert p.victim_ids == (13,) and sorted(p.placement.nodes) == ["n2", "n3"]
    assert p.gpus_freed == 16 and p.gpus_wasted == 0


def test_minimum_runtime_and_restart_cap_and_classes_protect_jobs():
    jobs = [
        running(10, 8, ["n0"], start=NOW - 100),
        running(11, 8, ["n1"], restarts=3),
        running(12, 8, ["n2"], job_class=JobClass.SERVE),
        running(13, 8, ["n3"], job_class=JobClass.INTERACTIVE),
    ]
    scores = {1: 1.0, 10: 0.0, 11: 0.0, 12: 0.0, 13: 0.0}
    assert plan(Job(1, num_gpus=8), jobs, scores) is None
    jobs.append(running(14, 8, ["n4"]))
    p = plan(
        Job(1, num_gpus=8),
        jobs,
        {**scores, 14: 0.0},
        nodes=node_state(jobs, ("n0", "n1", "n2", "n3", "n4")),
    )
    assert p.victim_ids == (14,)
    why = dict(p.skipped)
    assert "minimum runtime" in why[10] and "restarted 3" in why[11]
    assert "serve is not preemptible" in why[12] and "interactive is not preemptible" in why[13]


def test_hysteresis():
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 8, ["n1"]),
        running(12, 8, ["n2"]),
        running(13, 8, ["n3"]),
    ]
    near = {1: 0.55, 10: 0.5, 11: 0.5, 12: 0.5, 13: 0.5}
    assert plan(Job(1, num_gpus=8), jobs, near, cfg(hysteresis=0.1)) is None
    assert plan(Job(1, num_gpus=8), jobs, near, cfg(hysteresis=0.05)).victim_ids == (10,)
    equal = {1: 0.5, 10: 0.5, 11: 0.5, 12: 0.5, 13: 0.5}
    assert plan(Job(1, num_gpus=8), jobs, equal, cfg(hysteresis=0.0)) is None


def test_prefers_recently_checkpointed_then_lowest_score():
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 8, ["n1"]),
        running(12, 8, ["n2"]),
        running(13, 8, ["n3"]),
    ]
    scores = {1: 1.0, 10: 0.1, 11: 0.3, 12: 0.2, 13: 0.4}
    assert plan(Job(1, num_gpus=8), jobs, scores).victim_ids == (10,)
    led = Ledger(3600.0)
    led.observe(jobs, now=NOW - 1000)
    led.jobs[13].last_checkpoint_signal = NOW - 60
    p = plan(Job(1, num_gpus=8), jobs, scores, ledger=led)
    assert p.victim_ids == (13,) and "checkpointed recently" in p.victims[0].reason


def test_gang_job_in_one_switch():
    topo = Topology((Switch("s1", ("n0", "n1")), Switch("s2", ("n2", "n3"))))
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 8, ["n1"]),
        running(12, 8, ["n2"]),
        running(13, 8, ["n3"]),
    ]
    scores = {1: 1.0, 10: 0.1, 11: 0.5, 12: 0.2, 13: 0.2}
    p = plan(Job(1, num_gpus=16), jobs, scores, topo=topo)
    # s2 costs 0.2 + 0.2 < s1's 0.1 + 0.5; both are single switches
    assert set(p.victim_ids) == {12, 13} and p.placement.switches == ("s2",)


def test_deterministic_regardless_of_input_order():
    jobs = [running(i, 4, [f"n{i % 4}"]) for i in range(10, 18)]
    scores = {1: 1.0, **{j.job_id: 0.3 for j in jobs}}
    first = plan(Job(1, num_gpus=8), jobs, scores)
    rng = random.Random(7)
    for _ in range(5):
        shuffled = jobs[:]
        rng.shuffle(shuffled)
        assert plan(Job(1, num_gpus=8), shuffled, scores) == first
    assert first.victim_ids == (12, 16)  # the two on n0 (ids 12, 16): lowest node index on the tie


def test_disabled_preemption_plans_nothing():
    jobs = [
        running(10, 8, ["n0"]),
        running(11, 8, ["n1"]),
        running(12, 8, ["n2"]),
        running(13, 8, ["n3"]),
    ]
    assert plan(Job(1, num_gpus=8), jobs, {1: 1.0}, cfg(enabled=False)) is None


# --- properties over random clusters ---------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from slurm_dl.core.packing import job_allocation, pack  # noqa: E402


@st.composite
def scenario(draw):
    names = [f"n{i}" for i in range(draw(st.integers(2, 6)))]
    free = {n: 8 for n in names}
    jobs = []
    for jid in range(10, 10 + draw(st.integers(0, 12))):
        gpus = draw(st.sampled_from([1, 2, 4, 8, 16]))
        if gpus > 8:
            whole = [n for n in names if free[n] == 8][:2]
            if len(whole) < 2:
                continue
            placed = whole
        else:
            fits = [n for n in names if free[n] >= gpus]
            if not fits:
                continue
            placed = [draw(st.sampled_from(fits))]
        for n in placed:
            free[n] -= gpus // len(placed)
        jobs.append(
            running(
                jid,
                gpus,
                placed,
                start=NOW - draw(st.sampled_from([100.0, 5000.0])),
                restarts=draw(st.integers(0, 4)),
                job_class=draw(st.sampled_from([JobClass.TRAIN, JobClass.TRAIN, JobClass.SERVE])),
            )
        )
    scores = {j.job_id: draw(st.floats(0.0, 1.0)) for j in jobs}
    waiting = Job(1, num_gpus=draw(st.sampled_from([1, 4, 8, 12, 16])))
    scores[1] = draw(st.floats(0.0, 1.0))
    nodes = [Node(n, 8, "h100", gpus_used=8 - free[n]) for n in names]
    return waiting, jobs, nodes, scores


@settings(max_examples=100, deadline=None)
@given(scenario())
def test_every_plan_is_valid(case):
    waiting, jobs, nodes, scores = case
    c = cfg()
    p = plan_preemption(waiting, jobs, nodes, None, PolicyContext(now=NOW), c, scores=scores)
    if p is None:
        return
    by_id = {j.job_id: j for j in jobs}
    freed: dict[str, int] = {}
    for v in p.victims:
        j = by_id[v.job_id]
        assert j.job_class is JobClass.TRAIN and NOW - j.start_time >= 600 and j.restarts < 3
        assert scores[1] - scores[j.job_id] >= 0.1 - 1e-9
        assert set(v.nodes) == set(j.nodes)  # whole gang
        for n, g in job_allocation(j).items():
            freed[n] = freed.get(n, 0) + g
    after = [
        Node(n.name, n.gpus, n.gpu_type, gpus_used=n.gpus_used - freed.get(n.name, 0))
        for n in nodes
    ]
    assert pack(waiting, after) is not None
    assert p.placement.num_gpus == waiting.num_gpus
    # minimal: dropping any single victim no longer makes room
    for v in p.victims:
        less = {n: 0 for n in freed}
        for w in p.victims:
            if w.job_id != v.job_id:
                for n, g in job_allocation(by_id[w.job_id]).items():
                    less[n] += g
        fewer = [
            Node(n.name, n.gpus, n.gpu_type, gpus_used=n.gpus_used - less.get(n.name, 0))
            for n in nodes
        ]
        assert pack(waiting, fewer) is None
    again = plan_preemption(
        waiting, list(reversed(jobs)), nodes, None, PolicyContext(now=NOW), c, scores=scores
    )
    assert again == p


def test_no_one_is_preempted_for_a_job_that_freed_gpus_would_not_start():
    """A held job, one whose begin time is ahead, one waiting on a dependency or a limit: the
    cluster's GPUs would not start it, so no running job yields to it."""
    from prioritizer.planning import plan_intents
    from slurm_dl.core.model import ClusterSnapshot
    from slurm_dl.core.preemption import waits_only_for_gpus

    victim = running(10, 32, ["n0", "n1", "n2", "n3"], start=0.0, checkpointable=True, requeue=True)
    blocked = [
        Job(1, num_gpus=1, state_reason="JobHeldUser", submit_time=1.0),
        Job(2, num_gpus=1, state_reason="BeginTime", submit_time=2.0, eligible_time=NOW + 3600),
        Job(3, num_gpus=1, state_reason="Dependency", submit_time=3.0),
        Job(4, num_gpus=1, state_reason="AssocGrpGRES", submit_time=4.0),
        Job(5, num_gpus=1, state_reason="Priority", submit_time=5.0, eligible_time=NOW + 3600),
    ]
    assert not any(waits_only_for_gpus(j, NOW) for j in blocked)
    scores = {j.job_id: 1.0 for j in blocked} | {10: 0.0}
    snap = ClusterSnapshot(taken_at=NOW, jobs=[victim, *blocked], nodes=node_state([victim]))
    ctx = PolicyContext(now=NOW)
    assert plan_intents(snap, snap.jobs, scores, cfg(), ctx) == []
    waiting = Job(6, num_gpus=1, state_reason="Resources", submit_time=6.0, eligible_time=NOW - 5)
    assert waits_only_for_gpus(waiting, NOW)
    snap = ClusterSnapshot(
        taken_at=NOW, jobs=[victim, *blocked, waiting], nodes=node_state([victim])
    )
    (intent,) = plan_intents(snap, snap.jobs, {**scores, 6: 1.0}, cfg(), ctx)
    assert intent.need == 6 and intent.victims == (10,)


def test_fair_share_plan_takes_gpus_from_the_flooding_account_for_the_late_one():
    """The daemon's fair-share path: needs and victims from the shared lease decision, placed on
    nodes; a held job is no demand, a job that did not opt in is never a victim."""
    from prioritizer.planning import plan_intents
    from slurm_dl.core.fairness import yielded_to
    from slurm_dl.core.model import ClusterSnapshot
    from slurm_dl.core.policy import get_policy

    config = parse_config(
        {
            "gpu_types": [{"name": "h100"}],
            "node_groups": [
                {"name": "g", "nodes": "n[0-3]", "gpus_per_node": 8, "gpu_type": "h100"}
            ],
            "preemption": {"min_runtime_seconds": 60},
            "policy": {"mix": "fairshare", "fairshare": {"lease_seconds": 600}},
        }
    )
    flood = [
        running(
            10 + i,
            8,
            [f"n{i}"],
            start=0.0,
            account="flood",
            checkpointable=i > 0,
            requeue=True,
            executed_s=NOW,
        )
        for i in range(4)
    ]
    late = Job(
        1,
        account="late",
        num_gpus=8,
        state_reason="Resources",
        submit_time=NOW - 100,
        eligible_time=0.0,
    )
    held = Job(2, account="held", num_gpus=8, state_reason="JobHeldUser", submit_time=1.0)
    jobs = [*flood, late, held]
    snap = ClusterSnapshot(taken_at=NOW, jobs=jobs, nodes=node_state(flood))
    policy = get_policy("fairshare", config)
    ctx = PolicyContext(now=NOW, config=config, total_gpus=32)
    scores = policy.scores(jobs, ctx)
    (intent,) = plan_intents(snap, jobs, scores, config, ctx, policy=policy)
    assert intent.need == 1 and len(intent.victims) == 1 and intent.victims[0] in (11, 12, 13)
    assert yielded_to(intent.reason) == (1, "late")
    # the lease protects: nothing before 600 s of run
    young = [
        running(
            j.job_id,
            8,
            j.nodes,
            start=NOW - 100,
            account="flood",
            checkpointable=True,
            requeue=True,
            executed_s=100,
        )
        for j in flood
    ]
    snap = ClusterSnapshot(taken_at=NOW, jobs=[*young, late], nodes=node_state(young))
    assert plan_intents(snap, snap.jobs, scores, config, ctx, policy=policy) == []


def test_fair_share_plan_sees_free_gpus_in_pieces():
    """The daemon gives the lease decision where the GPUs are, as the simulator does: 2 free
    GPUs on each of four nodes do not start a late account's 8-GPU job, so the flooding
    account's jobs on one node yield to it."""
    from prioritizer.planning import plan_intents
    from slurm_dl.core.fairness import yielded_to
    from slurm_dl.core.model import ClusterSnapshot
    from slurm_dl.core.policy import get_policy

    config = parse_config(
        {
            "gpu_types": [{"name": "h100"}],
            "node_groups": [
                {"name": "g", "nodes": "n[0-3]", "gpus_per_node": 8, "gpu_type": "h100"}
            ],
            "preemption": {"min_runtime_seconds": 60},
            "policy": {"mix": "fairshare", "fairshare": {"lease_seconds": 600}},
        }
    )
    flood = [
        running(
            10 + 10 * n + i,
            1,
            [f"n{n}"],
            start=0.0,
            account="flood",
            checkpointable=True,
            requeue=True,
            executed_s=NOW,
        )
        for n in range(4)
        for i in range(6)
    ]
    late = [
        Job(
            k,
            account="late",
            num_gpus=8,
            state_reason="Resources",
            submit_time=NOW - 100,
            eligible_time=0.0,
        )
        for k in (1, 2)
    ]
    jobs = [*flood, *late]
    snap = ClusterSnapshot(taken_at=NOW, jobs=jobs, nodes=node_state(flood))
    assert sum(n.gpus_free for n in snap.nodes) == 8
    policy = get_policy("fairshare", config)
    ctx = PolicyContext(now=NOW, config=config, total_gpus=32)
    intents = plan_intents(snap, jobs, policy.scores(jobs, ctx), config, ctx, policy=policy)
    assert [i.need for i in intents] == [1, 2]
    for intent in intents:
        assert len(intent.victims) == 6 and len({v // 10 for v in intent.victims}) == 1  # one node
        assert yielded_to(intent.reason) == (intent.need, "late")
    assert len({v // 10 for i in intents for v in i.victims}) == 2
