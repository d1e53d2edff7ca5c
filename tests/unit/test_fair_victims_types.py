"""Fair share on several GPU types: a waiting job's victims are sought on the type it runs
fastest on (slurm_dl.core.fair_victims.node_victims with ``gain``), worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace

from slurm_dl.core.config import parse_config
from slurm_dl.core.fairness import LeaseSettings, NodeView, plan_fair_preemptions
from slurm_dl.core.model import Job, JobState, Node

from prioritizer.planning import job_type_speeds, plan_fair_intents

NOW = 100_000.0
S = LeaseSettings(lease_s=3600.0, restart_s=60.0, hysteresis=0.1, victims_by_type=True)
BLIND = LeaseSettings(lease_s=3600.0, restart_s=60.0, hysteresis=0.1, victims_by_type=False)


def job(i, account, gpus, *, running=False):
    j = Job(
        job_id=i, account=account, num_gpus=gpus, submit_time=0.0, checkpointable=True, requeue=True
    )
    if running:
        j.state = JobState.RUNNING
        j.start_time = NOW - 10_000.0
        j.executed_s = 10_000.0
    return j


def two_types():
    """16 GPUs, all account a's: node 0 (k80) runs jobs 100 and 101 (4 GPUs each), node 1
    (v100) runs job 102 (8 GPUs); b waits with a 4-GPU job.

    Fair shares (demand a 16, b 4; 16 GPUs): b 4, a 12. Job 101 (4 GPUs) may yield: a ends at
    12, its surplus 4 is over 12 × 0.1 and over its deficit after (0). Job 102 (8 GPUs) may
    yield by max-min: b ends at 4/4 of its share, above 0/4 + 0.1, and a at 8/12 > 0.1. On
    GPU count alone node 0 costs 4 preempted GPUs and node 1 costs 8: node 0 (job 101, the
    least urgent there: a's jobs in reverse submit-then-id order)."""
    running = [job(100, "a", 4, running=True), job(101, "a", 4, running=True)]
    running.append(job(102, "a", 8, running=True))
    where = {100: 0, 101: 0, 102: 1}
    view = NodeView(
        size={0: 8, 1: 8},
        free={0: 0, 1: 0},
        alloc={j.job_id: ((where[j.job_id], j.num_gpus),) for j in running},
        kind={0: "k80", 1: "v100"},
    )
    return running, [job(1, "b", 4)], view


def victims(plan):
    return [(m.need, m.victims) for m in plan.moves]


def test_victims_on_the_type_the_job_runs_fastest_on():
    running, waiting, view = two_types()
    fast_on_v100 = {"k80": 1.0, "v100": 3.0}
    plan = plan_fair_preemptions(
        waiting, running, 16, 100_000.0, S, nodes=view, speeds=lambda j: fast_on_v100
    )
    assert victims(plan) == [(1, (102,))]  # the v100 node, at 8 preempted GPUs
    # without the setting, or without speeds, the fewest preempted GPUs: node 0
    for settings, speeds in ((BLIND, lambda j: fast_on_v100), (S, None)):
        plan = plan_fair_preemptions(waiting, running, 16, NOW, settings, nodes=view, speeds=speeds)
        assert victims(plan) == [(1, (101,))]
    # a job that runs faster on the k80 keeps node 0
    plan = plan_fair_preemptions(
        waiting, running, 16, NOW, S, nodes=view, speeds=lambda j: {"k80": 2.0, "v100": 1.0}
    )
    assert victims(plan) == [(1, (101,))]


def test_nodes_as_fast_fall_back_to_the_fewest_gpus():
    # 24 GPUs, all a's: node 0 (k80) jobs 100 and 101 (4 each), node 1 (v100) job 102 (8),
    # node 2 (v100) jobs 103 and 104 (4 each). Fair: b 4, a 20; every job of a may yield (a
    # 4-GPU one by the first rule: surplus 4 > 2 and > 20 - 20; the 8-GPU one by max-min).
    # Nodes 1 and 2 are as fast for b's job: node 2 costs 4 GPUs, node 1 costs 8
    where = {100: 0, 101: 0, 102: 1, 103: 2, 104: 2}
    running = [job(i, "a", 8 if i == 102 else 4, running=True) for i in where]
    view = NodeView(
        size=dict.fromkeys(range(3), 8),
        free=dict.fromkeys(range(3), 0),
        alloc={j.job_id: ((where[j.job_id], j.num_gpus),) for j in running},
        kind={0: "k80", 1: "v100", 2: "v100"},
    )
    plan = plan_fair_preemptions(
        [job(1, "b", 4)], running, 24, NOW, S, nodes=view, speeds=lambda j: {"k80": 1, "v100": 3}
    )
    assert victims(plan) == [(1, (104,))]  # the least urgent of node 2


def test_gain_per_node():
    _, _, view = two_types()
    assert view.gain({"k80": 1.0, "v100": 3.0}) == {0: 1.0, 1: 3.0}
    assert view.gain({"v100": 3.0}) == {0: 0.0, 1: 3.0}  # a type the job does not accept
    assert view.gain(None) is None and view.gain({}) is None
    one = NodeView(size={0: 8, 1: 8}, free={}, alloc={}, kind={0: "v100", 1: "v100"})
    assert one.gain({"v100": 3.0}) is None  # one type: nothing to prefer


def test_site_config_sets_it():
    base = {
        "gpu_types": [{"name": "k80"}],
        "node_groups": [{"name": "g", "nodes": "n[1-2]", "gpus_per_node": 8, "gpu_type": "k80"}],
    }
    assert LeaseSettings.from_config(parse_config(base)).victims_by_type is False  # default
    on = {**base, "policy": {"fairshare": {"lease_victims_by_type": True}}}
    assert LeaseSettings.from_config(parse_config(on)).victims_by_type is True


class _Model:
    """A throughput model's ``speeds(job)`` (type -> an object with ``value``)."""

    def __init__(self, speeds):
        self._s = {t: SimpleNamespace(value=v) for t, v in speeds.items()}

    def speeds(self, job):
        return dict(self._s)


def test_job_type_speeds_keeps_the_types_a_job_accepts():
    m = _Model({"k80": 1.0, "v100": 3.0})
    assert job_type_speeds(m, job(1, "b", 4)) == {"k80": 1.0, "v100": 3.0}
    j = job(2, "b", 4)
    j.accepted_types = ("k80",)
    assert job_type_speeds(m, j) == {"k80": 1.0}


def test_the_daemon_takes_the_same_victims():
    # the prioritizer's decision on the cluster of two_types: nodes named by Slurm, typed
    running, waiting, _ = two_types()
    nodes = (
        Node("n0", 8, "k80", gpus_used=8),
        Node("n1", 8, "v100", gpus_used=8),
    )
    for j in running:
        j.nodes = ("n1",) if j.job_id == 102 else ("n0",)
        j.gpus_per_node = j.num_gpus
    cfg = parse_config(
        {
            "gpu_types": [{"name": "k80"}, {"name": "v100", "speed": 3.0}],
            "node_groups": [
                {"name": "k", "nodes": "n0", "gpus_per_node": 8, "gpu_type": "k80"},
                {"name": "v", "nodes": "n1", "gpus_per_node": 8, "gpu_type": "v100"},
            ],
            "policy": {"mix": "fairshare", "fairshare": {"lease_victims_by_type": True}},
        }
    )
    from slurm_dl.core.model import ClusterSnapshot
    from slurm_dl.core.policy import PolicyContext, get_policy

    snap = ClusterSnapshot(jobs=tuple(running + waiting), nodes=nodes, taken_at=NOW)
    policy = get_policy("fairshare", cfg)
    ctx = PolicyContext(now=NOW, config=cfg, total_gpus=16)
    scores = {j.job_id: 0.0 for j in running + waiting}
    m = _Model({"k80": 1.0, "v100": 3.0})
    got = plan_fair_intents(snap, running + waiting, scores, cfg, ctx, policy, speeds=m)
    assert [(i.need, tuple(i.victims)) for i in got] == [(1, (102,))]
    got = plan_fair_intents(snap, running + waiting, scores, cfg, ctx, policy)
    assert [(i.need, tuple(i.victims)) for i in got] == [(1, (101,))]
