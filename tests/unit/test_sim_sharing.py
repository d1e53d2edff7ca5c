"""GPU sharing in the simulator: FGD's fragmentation measure, the three placements, the
inflation experiment and ``slurm-dl simulate --placement`` (its errors one line each)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.sim.sharing import (
    PLACEMENTS,
    Fleet,
    Node,
    Shapes,
    Task,
    arrivals,
    inflate,
    read_nodes,
    read_tasks,
)

HALF = Task(cpu=1000, mem=0, gpus=1, milli=500)
TWO = Task(cpu=0, mem=0, gpus=2, milli=1000)


def test_fraction_shape_counts_gpus_with_less_free_than_it_asks():
    s = Shapes([HALF])
    assert s.frag("T4", 8000, (300, 1000)) == pytest.approx(0.3)
    assert s.frag("T4", 8000, (500, 1000)) == 0  # both GPUs can take a half
    assert s.frag("T4", 0, (300, 1000)) == pytest.approx(1.3)  # no CPU: every free share


def test_whole_gpu_shape_counts_partly_taken_gpus_and_all_when_it_cannot_fit():
    s = Shapes([TWO])
    assert s.frag("T4", 0, (600, 1000, 1000)) == pytest.approx(0.6)
    assert s.frag("T4", 0, (600, 1000)) == pytest.approx(1.6)


def test_weights_are_the_shapes_share_and_a_gpu_type_it_refuses_fragments_all():
    s = Shapes([HALF, Task(0, 0, 1, 1000, ("V100",))])
    assert s.frag("V100", 8000, (300, 1000)) == pytest.approx(0.5 * 0.3 + 0.5 * 0.3)
    assert s.frag("T4", 8000, (300, 1000)) == pytest.approx(0.5 * 0.3 + 0.5 * 1.3)


def test_typical_shapes_are_the_most_frequent_that_make_95_percent_of_the_tasks():
    cpu_only = Task(500, 0, 0, 0)
    s = Shapes([HALF] * 96 + [TWO] * 3 + [cpu_only])  # HALF alone is 96 %: the rest left out
    assert s.frag("T4", 8000, (600, 1000)) == 0
    s = Shapes([HALF] * 90 + [TWO] * 9 + [cpu_only])  # 90 % + 9 %: the CPU-only task left out
    assert s.frag("T4", 8000, (600, 1000)) == pytest.approx(9 / 99 * 1.6)  # TWO cannot run
    assert s.frag("T4", 8000, (600, 1000, 1000)) == pytest.approx(9 / 99 * 0.6)


def test_equal_scores_go_to_the_node_of_the_lowest_rank():
    nodes = [Node("T4", 8000, 10**6, [1000, 1000]) for _ in range(3)]
    f = Fleet(nodes, "bestfit", rank=[2, 0, 1])
    assert f.choose(HALF) == (1, [0])
    f.place(HALF)
    assert f.choose(HALF) == (1, [0])  # now the fullest node, onto the half-taken GPU
    with pytest.raises(ValueError, match="rank"):
        Fleet(nodes, "bestfit", rank=[0, 0, 1])


def test_fgd_scores_are_integers_so_near_equal_rises_tie_and_exact_tells_them_apart():
    # typical: 94 % HALF and 6 % a 4-CPU task of 0.1 GPU; a CPU-only task leaves either node
    # too little CPU for the latter: +0.06 x 0.5 GPU on A, +0.06 x 0.3 on B, both score 49
    workload = [HALF] * 94 + [Task(4000, 0, 1, 100)] * 6
    nodes = [Node("T4", 4200, 10**6, [500]), Node("T4", 4200, 10**6, [300])]
    cpu_task = Task(300, 0, 0, 0)
    assert Fleet(nodes, "fgd", workload).choose(cpu_task) == (0, [])  # the lowest rank
    assert Fleet(nodes, "fgd", workload, rank=[1, 0]).choose(cpu_task) == (1, [])
    assert Fleet(nodes, "fgd", workload, exact=True).choose(cpu_task) == (1, [])  # the smaller rise


def test_fgd_gives_a_fraction_the_first_gpu_with_the_best_score_not_the_fullest():
    f = Fleet([Node("T4", 8000, 10**6, [1000, 600, 1000])], "fgd", [HALF])
    f.place(Task(0, 0, 1, 100))  # every GPU keeps room for a half: all score the same
    assert f.nodes[0].free == [900, 600, 1000]
    b = Fleet([Node("T4", 8000, 10**6, [1000, 600, 1000])], "bestfit")
    b.place(Task(0, 0, 1, 100))
    assert b.nodes[0].free == [1000, 500, 1000]


def test_dotprod_takes_the_node_whose_free_resources_dot_the_ask_least():
    nodes = [Node("T4", 8000, 10**6, [1000, 1000]), Node("T4", 8000, 10**6, [1000])]
    f = Fleet(nodes, "dotprod")
    assert f.choose(HALF) == (1, [0])  # 0.125 + 0.5 x 0.25 against 0.125 + 1 x 0.25
    assert f.choose(Task(9000, 0, 1, 500)) is None


def test_arrivals_are_the_trace_once_each_in_a_random_order_then_draws():
    import random

    tasks = [Task(c, 0, 1, 500) for c in range(10)]
    stream = arrivals(tasks, random.Random(1))
    first = [next(stream) for _ in range(10)]
    assert sorted(first, key=lambda t: t.cpu) == tasks and first != tasks
    assert all(next(stream) in tasks for _ in range(20))


def test_bestfit_packs_a_fraction_onto_the_least_free_gpu_that_fits():
    f = Fleet([Node("T4", 8000, 1000, [1000, 1000])], "bestfit")
    assert f.place(Task(0, 0, 1, 300)) == pytest.approx(0.3)
    assert f.place(Task(0, 0, 1, 600)) == pytest.approx(0.6)
    assert sorted(f.nodes[0].free) == [100, 1000]  # onto the taken GPU, not the whole one


def test_exclusive_gives_a_fraction_a_whole_gpu():
    f = Fleet([Node("T4", 8000, 1000, [1000, 1000])], "exclusive")
    assert f.place(Task(0, 0, 1, 300)) == 1.0
    assert f.place(Task(0, 0, 1, 300)) == 1.0
    assert f.place(Task(0, 0, 1, 300)) is None


def test_fgd_keeps_whole_gpus_for_the_shapes_that_need_them_where_bestfit_does_not():
    nodes = [Node("T4", 64000, 10**6, [1000, 1000]), Node("T4", 64000, 10**6, [1000, 1000, 1000])]
    workload = [TWO] * 9 + [HALF]
    fgd, bestfit = Fleet(nodes, "fgd", workload), Fleet(nodes, "bestfit")
    fgd.place(HALF)
    bestfit.place(HALF)
    assert bestfit.nodes[0].free == [500, 1000]  # the fuller node: no room for two GPUs left
    assert fgd.nodes[0].free == [1000, 1000] and sorted(fgd.nodes[1].free) == [500, 1000, 1000]
    assert fgd.place(TWO) is not None and fgd.place(TWO) is not None
    assert bestfit.place(TWO) is not None and bestfit.place(TWO) is None


def test_cpu_memory_and_gpu_type_limit_where_a_task_goes():
    f = Fleet([Node("T4", 1000, 100, [1000]), Node("V100", 8000, 8000, [1000])], "bestfit")
    assert f.choose(Task(2000, 0, 1, 500))[0] == 1
    assert f.choose(Task(0, 200, 1, 500))[0] == 1
    assert f.choose(Task(0, 0, 1, 500, ("T4",)))[0] == 0
    assert f.choose(Task(0, 0, 1, 500, ("A100",))) is None


def test_inflation_fills_to_the_fleets_gpus_and_accounts_for_every_task():
    tasks = [HALF, Task(1000, 0, 1, 1000), Task(500, 0, 1, 250), Task(2000, 0, 0, 0)]
    nodes = [Node("T4", 16000, 10**6, [1000] * 4) for _ in range(3)]
    for placement in PLACEMENTS:
        r = inflate(tasks, nodes, placement, seed=4)
        s = r.summary()
        assert r.arrived_gpu >= 12 and r.arrived_gpu - 1 < 12
        assert 0 < r.scheduled <= r.arrived and 0 <= s["unallocated_gpus"] <= 12
        assert s["idle_gpus"] >= s["unallocated_gpus"] - 1e-9
        assert inflate(tasks, nodes, placement, seed=4).summary() == s  # the seed decides
    whole = inflate(tasks, nodes, "exclusive", seed=4).allocated_gpu
    assert whole == int(whole)  # exclusive: whole GPUs only


def test_readers_name_the_file_line_and_column():
    with pytest.raises(ValueError, match=r"t.csv:3: column 'gpu_milli': 1500 is out of range"):
        read_tasks("cpu_milli,memory_mib,num_gpu,gpu_milli\n0,0,1,500\n0,0,1,1500\n", "t.csv")
    with pytest.raises(ValueError, match=r"t.csv:2: column 'gpu_milli': 500 with num_gpu 2"):
        read_tasks("cpu_milli,memory_mib,num_gpu,gpu_milli\n0,0,2,500\n", "t.csv")
    with pytest.raises(ValueError, match=r"f.csv:1: not a fleet file .*no column\(s\) cpu_milli"):
        read_nodes("sn,memory_mib,gpu,model\nn,1,1,T4\n", "f.csv")
    with pytest.raises(ValueError, match=r"f.csv:2: column 'gpu': 'x' is not a number"):
        read_nodes("cpu_milli,memory_mib,gpu,model\n1,1,x,T4\n", "f.csv")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "pods.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        + "".join(
            f"p{i},1000,1024,1,{(250, 500, 1000)[i % 3]},,LS,Running,{i},{i + 9},{i}\n"
            for i in range(30)
        )
        + "q,0,0,2,1000,,LS,Running,0,9,0\n"
    )
    (tmp_path / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,65536,{(2, 4)[i % 2]},T4\n" for i in range(6))
    )
    return tmp_path


def run(files, *extra):
    return CliRunner().invoke(
        app, ["simulate", "--format", "openb", "--trace", str(files / "pods.csv"), *extra]
    )


def test_cli_json_has_each_placements_figures_side_by_side(files):
    res = run(
        files,
        "--fleet",
        str(files / "nodes.csv"),
        "--placement",
        "exclusive",
        "--placement",
        "bestfit",
        "--placement",
        "fgd",
        "--json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["gpus"] == 18 and list(doc["placements"]) == ["exclusive", "bestfit", "fgd"]
    for r in doc["placements"].values():
        assert 0 < r["scheduled_fraction"] <= 1 and 0 <= r["unallocated_gpus"] <= 18


def test_cli_one_placement_puts_its_figures_at_the_top_and_prints_a_table(files):
    res = run(
        files, "--fleet", str(files / "nodes.csv"), "--placement", "fgd", "--json", "--seed", "2"
    )
    doc = json.loads(res.stdout)
    assert (
        doc["seed"] == 2 and doc["unallocated_gpus"] == doc["placements"]["fgd"]["unallocated_gpus"]
    )
    res = run(files, "--fleet", str(files / "nodes.csv"), "--placement", "bestfit")
    assert res.exit_code == 0 and "bestfit" in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 80


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            ("--placement", "pack"),
            "--placement: got 'pack'; allowed: exclusive, dotprod, bestfit, fgd",
        ),
        (("--placement", "fgd"), "--placement: needs --fleet FILE"),
        (("--placement", "fgd", "--fleet", "NODES", "--format", "philly"), "needs --format openb"),
        (("--placement", "fgd", "--fleet", "PODS"), "not a fleet file"),
    ],
)
def test_cli_bad_input_is_one_clear_line(files, extra, says):
    extra = [
        str(files / "nodes.csv") if a == "NODES" else str(files / "pods.csv") if a == "PODS" else a
        for a in extra
    ]
    res = run(files, *extra)
    assert res.exit_code != 0 and says in res.output and "Traceback" not in res.output


def test_colocation_factors_are_pair_speed_over_alone_and_leave_out_pairs_that_do_not_fit():
    d = {
        "v100": {
            "('A', 1)": {
                "null": 10.0,
                "('A', 1)": [6.0, 6.0],
                "('B', 1)": [4.0, 1.0],
                "('C', 1)": [0.0, 0.0],
            },
            "('B', 1)": {"null": 2.0, "('A', 1)": [1.0, 4.0]},
            "('A', 2)": {"null": 20.0, "('A', 2)": [1.0, 1.0]},
        }
    }
    from slurm_dl.sim.sharing import colocation_factors

    assert sorted(colocation_factors(d, "v100")) == pytest.approx([0.4, 0.5, 0.6])
    with pytest.raises(ValueError, match="no GPU type 'k80'"):
        colocation_factors(d, "k80")


def test_share_jobs_gives_a_shared_job_one_slot_and_a_longer_run_and_others_whole_gpus():
    from slurm_dl.core.model import Job
    from slurm_dl.sim.sharing import share_jobs

    jobs = [
        Job(1, num_gpus=1, duration=600.0),
        Job(2, num_gpus=1, duration=7200.0),
        Job(3, num_gpus=4, gpus_per_node=4, duration=60.0),
    ]
    out, n = share_jobs(jobs, 2, 0.5)
    assert n == 1
    assert (out[0].num_gpus, out[0].duration) == (1, 1200.0)
    assert (out[1].num_gpus, out[1].duration) == (2, 7200.0)
    assert (out[2].num_gpus, out[2].gpus_per_node) == (8, 8)
    assert jobs[0].num_gpus == 1 and jobs[0].duration == 600.0  # the trace's jobs untouched
    with pytest.raises(ValueError, match="factor"):
        share_jobs(jobs, 2, 1.5)
