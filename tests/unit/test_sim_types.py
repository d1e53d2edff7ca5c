"""The simulator on several GPU types: node groups, per-job speeds, blind / fastest / aware type
choice on small traces whose right answer is worked out by hand, service charged at type
speed, accepted types, recorded types of a history, fairness shares of node groups."""

from __future__ import annotations

import random

import pytest

from slurm_dl.core.model import Job
from slurm_dl.core.throughput import ThroughputModel
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.engine.fleet import NodeGroupSpec, parse_node_types, read_fleet, several_types
from slurm_dl.sim.reports.metrics import summarize
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import share_of_groups
from slurm_dl.sim.whatif.speeds import typed_cluster
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.engine.typed import TypeSetup

# kind "a" runs 10x faster on "fast"; "b" 1.2x; the site speeds: fast 1.0, slow 0.5
MODEL = ThroughputModel(
    {"fast": 1.0, "slow": 0.5}, {"a": {"fast": 10, "slow": 1}, "b": {"fast": 1.2, "slow": 1}}
)
FAST_FIRST = (NodeGroupSpec("fast", 1, 1), NodeGroupSpec("slow", 1, 1))


def job(
    i: int, submit: float, duration: float, kind: str, gpus: int = 1, account: str = "x", **kw
) -> Job:
    return Job(
        i,
        account=account,
        user=account,
        num_gpus=gpus,
        submit_time=submit,
        duration=duration,
        model=kind,
        **kw,
    )


def run(jobs, choice, policy="las", groups=FAST_FIRST, model=MODEL, recorded=False):
    r = run_cluster(
        jobs,
        ClusterSpec.of_groups("c", groups),
        make_ranker(policy),
        PreemptionCost(0.0),
        types=TypeSetup(choice, model, recorded),
    )
    return {sj.job.job_id: sj for sj in r.jobs}, r


def ends(res) -> dict:
    return {i: round(sj.end_time, 6) for i, sj in res.items()}


# --- node groups -------------------------------------------------------------------------------
def test_node_types_option():
    g = parse_node_types("v100:15,p100:15,k80:15", 8)
    assert [(x.gpu_type, x.nodes, x.gpus_per_node) for x in g] == [
        ("v100", 15, 8),
        ("p100", 15, 8),
        ("k80", 15, 8),
    ]
    assert parse_node_types("a100:2", None)[0].gpus_per_node == 8
    assert several_types(g) and not several_types(parse_node_types("a100:2", 4))


@pytest.mark.parametrize(
    "text,msg",
    [
        ("v100", "'v100' is not TYPE:NODES"),
        ("v100:0", "'v100:0' is not TYPE:NODES"),
        ("v100:x", "is not TYPE:NODES"),
        ("v 100:2", "is not TYPE:NODES"),
        ("v100:1,v100:2", "v100 is named twice"),
    ],
)
def test_node_types_errors(text, msg):
    with pytest.raises(ValueError, match=f"--node-types: got .*{msg}.*allowed: TYPE:NODES"):
        parse_node_types(text, 8)


def test_fleet_file_groups_by_type_and_size():
    text = "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,2,P100\nn1,1,1,0,CPU\nn2,1,1,8,G2\nn3,1,1,2,P100\nn4,1,1,4,P100\n"
    g = read_fleet(text, "f.csv")
    assert [(x.gpu_type, x.nodes, x.gpus_per_node) for x in g] == [
        ("P100", 2, 2),
        ("G2", 1, 8),
        ("P100", 1, 4),
    ]


@pytest.mark.parametrize(
    "text,msg",
    [
        ("sn,gpu,model\nn0,0,P100\n", r"f.csv: no node has a GPU"),
        ("sn,model\nn0,P100\n", r"f.csv:1: not a fleet file: no column\(s\) gpu"),
        ("sn,gpu,model\nn0,two,P100\n", r"f.csv:2: column 'gpu': 'two' is not a whole number"),
        ("sn,gpu,model\nn0,2,\n", r"f.csv:2: column 'model': '' is not a GPU type name"),
    ],
)
def test_fleet_file_errors(text, msg):
    with pytest.raises(ValueError, match=msg):
        read_fleet(text, "f.csv")


def test_one_type_and_size_is_the_plain_replay():
    assert typed_cluster(parse_node_types("v100:4", 8), None, None) is None
    t = typed_cluster(parse_node_types("v100:1,k80:1", 8), None, None)
    assert t.types.choice == "aware" and t.types.model is None and "type speeds all 1" in t.line


# --- type choice ---------------------------------------------------------------------------
def test_blind_takes_node_order_fastest_and_aware_the_fast_type():
    jobs = [job(1, 0, 100, "a"), job(2, 0, 100, "b")]
    slow_first = (NodeGroupSpec("slow", 1, 1), NodeGroupSpec("fast", 1, 1))
    blind, r = run(jobs, "blind", "fifo", slow_first)
    assert ends(blind) == {1: pytest.approx(1000.0), 2: 100}  # a on slow: 10x longer; b on fast
    assert r.type_busy["slow"][1] == pytest.approx(1000.0)
    for choice in ("fastest", "aware"):
        res, _ = run(jobs, choice, "fifo", slow_first)
        assert res[1].end_time == pytest.approx(100.0)  # a on fast
        assert res[2].end_time == pytest.approx(100 * 1.2)  # b on slow (1.2x slower than on fast)


def test_aware_gives_the_fast_type_to_the_job_that_gains_most():
    # b (1.2x on fast), a (10x), c (like b), one GPU of each type: blind and fastest give the
    # fast GPU to the first in line (b) and a crawls on slow; aware sends b to slow
    jobs = [job(1, 0, 100, "b"), job(2, 0, 100, "a"), job(3, 0, 100, "b")]
    fastest, _ = run(jobs, "fastest")
    assert ends(fastest) == {1: 100, 2: pytest.approx(1000), 3: 200}
    blind, _ = run(jobs, "blind")
    assert ends(blind) == ends(fastest)  # the fast node comes first
    aware, _ = run(jobs, "aware")
    assert ends(aware) == {1: pytest.approx(120), 2: 100, 3: 200}
    mean = {k: sum(v.values()) / 3 for k, v in (("aware", ends(aware)), ("fastest", ends(fastest)))}
    assert mean["aware"] < 0.4 * mean["fastest"]


def test_aware_waits_for_the_fast_type_while_a_job_below_uses_the_slow_one():
    # SRTF: x (9 s left) holds the fast GPU; a (100 s, 10x on fast) ranks above b (200 s, 1.2x):
    # a would run 1000 s on the free slow GPU, so it waits 9 s for the fast one and b takes slow
    jobs = [job(1, 0, 10, "b"), job(2, 1, 100, "a"), job(3, 1, 200, "b")]
    aware, _ = run(jobs, "aware", "srtf")
    assert ends(aware) == {1: 10, 2: 110, 3: pytest.approx(241)}
    assert aware[2].first_start == 10 and aware[3].first_start == 1
    fastest, _ = run(jobs, "fastest", "srtf")
    assert fastest[2].end_time == pytest.approx(1001)  # took the slow GPU at once


def test_aware_alone_takes_its_fastest_free_type():
    # nobody else waits: a job tolerant of slow GPUs still runs on the free fast one
    slow_first = (NodeGroupSpec("slow", 1, 1), NodeGroupSpec("fast", 1, 1))
    res, _ = run([job(1, 0, 120, "b")], "aware", groups=slow_first)
    assert res[1].end_time == pytest.approx(120.0)  # on fast; on slow it would take 144 s


def test_never_outside_the_accepted_types():
    jobs = [job(1, 0, 50, "a"), job(2, 0, 100, "a", accepted_types=("fast",))]
    for choice in ("blind", "fastest", "aware"):
        res, _ = run(jobs, choice, "fifo")
        assert res[2].end_time == pytest.approx(150)  # waits for the fast GPU, never takes slow
    with pytest.raises(ValueError, match="job 3 accepts only h100; the cluster has fast, slow"):
        run([job(3, 0, 10, "a", accepted_types=("h100",))], "aware")
    with pytest.raises(
        ValueError, match="job 4 needs 2 GPUs of one type \\(any type\\); no node group"
    ):
        run([job(4, 0, 10, "a", gpus=2)], "aware")


def test_service_is_charged_at_type_speed():
    # one job on slow (site speed 0.5) for 200 s: 100 s of service, 200 s of run time
    res, r = run(
        [job(1, 0, 20, "b")],
        "blind",
        "fairshare",
        (NodeGroupSpec("slow", 1, 1), NodeGroupSpec("fast", 1, 1)),
    )
    j = res[1]
    assert j.end_time == pytest.approx(24.0)  # 20 s on fast is 24 s on slow for kind b
    assert j.job.executed_s == pytest.approx(24.0)
    assert j.job.norm_executed_s == pytest.approx(12.0) and j.job.attained_gpu_s == pytest.approx(
        12.0
    )
    s = summarize([r])
    assert s["per_type"]["slow"] == {
        "gpus": 1,
        "gpu_hours": pytest.approx(24 / 3600),
        "utilization": pytest.approx(1.0),
    }
    assert s["per_type"]["fast"]["utilization"] == 0.0


def test_las_wakes_at_the_threshold_of_charged_service():
    # LAS thresholds in GPU-seconds: a job on slow (0.5) reaches 50 GPU-s after 100 s, not 50 s;
    # a newcomer then preempts it (one GPU) only after that
    jobs = [
        job(1, 0, 1000, "b", accepted_types=("slow",)),
        job(2, 60, 10, "b", accepted_types=("slow",)),
    ]
    r = run_cluster(
        jobs,
        ClusterSpec.of_groups("c", FAST_FIRST),
        make_ranker("las", las_thresholds=[50.0]),
        PreemptionCost(0.0),
        types=TypeSetup("aware", MODEL),
    )
    res = {sj.job.job_id: sj for sj in r.jobs}
    assert res[2].first_start == pytest.approx(100.0)  # job 1 left queue 0 at 100 s of run
    assert res[1].preemptions == 1


def test_history_jobs_replay_on_their_recorded_type():
    # recorded on slow, accepting both: replayed on slow at its recorded run time, fast left idle
    jobs = [
        job(1, 0, 100, "a", gpu_type="slow", accepted_types=("fast", "slow")),
        job(2, 0, 100, "a", gpu_type="fast"),
    ]
    res, r = run(jobs, "aware", "fifo", recorded=True)
    assert ends(res) == {1: 100, 2: 100}
    assert r.type_busy["slow"][1] == pytest.approx(100)
    moved, _ = run(jobs[:1], "aware", "fifo")  # not a history: it takes the fast GPU
    assert moved[1].end_time == pytest.approx(100) and moved[1].speed == 1.0


def test_fair_share_of_groups():
    groups = parse_node_types("v100:15,p100:15,k80:15", 8)
    small = share_of_groups(groups, 1 / 14, [job(1, 0, 1, "a", gpus=8)])
    assert [(g.gpu_type, g.nodes) for g in small] == [("v100", 1), ("p100", 1), ("k80", 1)]
    big = share_of_groups(
        groups, 1 / 14, [job(1, 0, 1, "a", gpus=32)], {"v100": 0.93, "p100": 0.68, "k80": 0.21}
    )
    assert [(g.gpu_type, g.nodes) for g in big] == [("p100", 4)]  # the type nearest the mean speed


@pytest.mark.parametrize("choice", ["blind", "aware"])
def test_lease_book_and_reference_path_agree_on_types(choice):
    rng = random.Random(5)
    jobs, t = [], 0.0
    for i in range(150):
        t += rng.choice((0, 5, 30, 120))
        jobs.append(
            job(
                i,
                t,
                float(rng.choice((10, 60, 600, 3000))),
                rng.choice("ab"),
                gpus=rng.choice((1, 1, 2, 4, 8)),
                account=f"a{rng.randint(0, 3)}",
            )
        )
    groups = (NodeGroupSpec("slow", 2, 8), NodeGroupSpec("fast", 2, 8))
    got = []
    for fast in (True, False):
        r = run_cluster(
            jobs,
            ClusterSpec.of_groups("c", groups),
            make_ranker("fairshare"),
            PreemptionCost(30),
            types=TypeSetup(choice, MODEL),
            fast=fast,
        )
        got.append([(sj.first_start, sj.end_time, sj.preemptions) for sj in r.jobs])
    assert got[0] == got[1]
    assert any(p for _, _, p in got[0])


def test_work_is_the_same_on_a_share_without_the_fastest_type():
    # an account's share may lack the fast type (fairness runs): its jobs still do the work of
    # their trace duration on their fastest type, so they take longer there, not the same
    res, _ = run([job(1, 0, 100, "a")], "aware", "fifo", (NodeGroupSpec("slow", 1, 1),))
    assert res[1].end_time == pytest.approx(1000)


def test_fair_share_moves_a_job_of_an_account_below_its_share_to_a_faster_type():
    # fast: one node of 2 GPUs, slow: one of 1. Account "big" holds both fast GPUs (jobs 1 and
    # 2); "small"'s only job (3, kind a: 10x faster on fast) starts on slow at 1 s. When job 1
    # ends at 100 s, job 3 moves to the fast GPU (it is below its share; 99 s on slow did 9.9 s
    # of its work) and big's waiting job 4 gets the slow GPU it left: job 3 ends at 100 + 490.1
    groups = (NodeGroupSpec("fast", 1, 2), NodeGroupSpec("slow", 1, 1))
    jobs = [
        job(1, 0, 100, "a", account="big"),
        job(2, 0, 1000, "a", account="big"),
        job(3, 1, 500, "a", account="small"),
        job(4, 50, 100, "a", account="big"),
    ]
    res, r = run(jobs, "aware", "fairshare", groups)
    assert res[3].preemptions == 1 and res[3].end_time == pytest.approx(590.1)
    assert res[4].first_start == pytest.approx(100.0) and res[4].preemptions == 0
    assert r.moves == 1
    # it never takes a whole free node (a wide job waits for those): without job 2, the fast
    # node is free at 100 s and job 3 stays on slow
    res, r = run([j for j in jobs if j.job_id != 2], "aware", "fairshare", groups)
    assert res[3].preemptions == 0 and r.moves == 0


def test_a_result_sent_from_a_worker_keeps_its_jobs_types_and_moves():
    # the pool sends results as plain tuples (ClusterResult.packed): what comes back is the same
    from slurm_dl.sim.engine.loop import ClusterResult

    groups = (NodeGroupSpec("fast", 1, 2), NodeGroupSpec("slow", 1, 1))
    jobs = [
        job(1, 0, 100, "a", account="big"),
        job(2, 0, 1000, "a", account="big"),
        job(3, 1, 500, "a", account="small"),
        job(4, 50, 100, "a", account="big"),
    ]
    _, r = run(jobs, "aware", "fairshare", groups)
    back = ClusterResult.unpacked(r.packed(), jobs)
    assert (
        (back.moves, back.preemptions, back.type_busy)
        == (r.moves, r.preemptions, r.type_busy)
        == (1, 1, r.type_busy)
    )
    assert [(s.job.job_id, s.first_start, s.end_time) for s in back.jobs] == [
        (s.job.job_id, s.first_start, s.end_time) for s in r.jobs
    ]


def test_constrained_asks_only_types_at_least_half_the_best_speed():
    # slow first in node order. Kind "a" runs at 0.1 of its best on slow: a careful user names
    # only fast, so it waits for fast rather than take slow; kind "b" (1/1.2 = 0.83 on slow)
    # accepts both and takes the first free GPU in node order, as blind does.
    slow_first = (NodeGroupSpec("slow", 1, 1), NodeGroupSpec("fast", 1, 1))
    jobs = [job(1, 0, 100, "a"), job(2, 0, 100, "b"), job(3, 1, 100, "a")]
    res, _ = run(jobs, "constrained", "fifo", slow_first)
    assert res[1].end_time == pytest.approx(100.0)  # a on fast
    assert res[2].end_time == pytest.approx(120.0)  # b on slow, the first free
    assert res[3].first_start == pytest.approx(100.0)  # a waits for fast (slow is free at 120)
    assert res[3].end_time == pytest.approx(200.0)
    blind, _ = run(jobs, "blind", "fifo", slow_first)
    assert blind[1].end_time == pytest.approx(1000.0)  # a on slow: 10x longer
