"""GPU sharing in the simulator, the parts added to explain and extend the inflation figure:
tie rules (where an integer score's tie goes), reading the figures at several fills, and the
departures experiment (tasks that end; a loss system), each on fleets small enough to check by
hand."""

from __future__ import annotations

import random

import pytest

from slurm_dl.sim.sharing import (
    Fleet,
    Node,
    Task,
    depart,
    inflate,
    kind,
    read_durations,
    serve,
)

HALF = Task(cpu=1000, mem=0, gpus=1, milli=500)
ONE = Task(cpu=0, mem=0, gpus=1, milli=1000)

# the integer tie of test_sim_sharing: a CPU-only task raises FGD's expected fragmentation by
# 0.06 x 0.5 GPU on node 0 and 0.06 x 0.3 on node 1; both score 49, the float prefers node 1
WORKLOAD = [HALF] * 94 + [Task(4000, 0, 1, 100)] * 6
TIED = [Node("T4", 4200, 10**6, [500]), Node("T4", 4200, 10**6, [300])]
CPU_TASK = Task(300, 0, 0, 0)


def test_tie_rules_pick_among_nodes_of_equal_integer_score():
    def pick(**kw):
        return Fleet(TIED, "fgd", WORKLOAD, **kw).choose(CPU_TASK)[0]

    assert pick() == 0  # FGD's simulator: the lowest rank
    assert pick(tie="float") == 1 == pick(exact=True)  # the float's best: what exact does
    assert pick(tie="pack") == 1  # the least free GPU share
    assert pick(exact=True, tol=1.0) == 0  # float scores 0.012 apart tie within 1 point
    assert pick(exact=True, tol=0.001) == 1
    drawn = {pick(tie="random", rng=random.Random(s)) for s in range(40)}
    assert drawn == {0, 1}
    with pytest.raises(ValueError, match="tie"):
        Fleet(TIED, "fgd", WORKLOAD, tie="first")
    with pytest.raises(ValueError, match="tol"):
        Fleet(TIED, "fgd", WORKLOAD, tol=1.0)  # a tolerance needs float scores


def test_tie_stats_count_a_tie_that_moved_the_choice_off_the_float_best():
    f = Fleet(TIED, "fgd", WORKLOAD, stats=True)
    f.place(CPU_TASK)
    st = f.tie_stats
    assert st["placed"] == 1 and st["tied"] == 1 and st["overridden"] == 1
    assert st["tied_nodes"] == 2 and 0 < st["gap_x1000"] < 1000
    g = Fleet(TIED, "fgd", WORKLOAD, tie="float", stats=True)
    g.place(CPU_TASK)
    assert g.tie_stats["tied"] == 1 and g.tie_stats["overridden"] == 0


def test_integer_scores_with_float_ties_place_exactly_as_float_scores():
    tasks = [HALF, Task(1000, 0, 1, 1000), Task(500, 0, 1, 250), Task(2000, 0, 2, 1000)]
    nodes = [Node("T4", 16000, 10**6, [1000] * 4) for _ in range(6)]
    a = inflate(tasks, nodes, "fgd", seed=3, tie="float")
    b = inflate(tasks, nodes, "fgd", seed=3, exact=True)
    assert a.summary() == b.summary()


def test_marks_read_the_figures_once_each_fill_is_reached():
    tasks = [HALF, Task(1000, 0, 1, 1000), Task(500, 0, 1, 250)]
    nodes = [Node("T4", 16000, 10**6, [1000] * 4) for _ in range(3)]  # 12 GPUs
    r = inflate(tasks, nodes, "bestfit", seed=1, fill=1.1, marks=(0.5, 1.0, 1.1))
    assert sorted(r.marks) == [0.5, 1.0, 1.1]
    for f, m in r.marks.items():
        assert f * 100 <= m["arrived_pct"] < f * 100 + 100 / 12  # within one task's GPU
    assert r.marks[1.0] == inflate(tasks, nodes, "bestfit", seed=1, marks=(1.0,)).marks[1.0]
    assert r.marks[1.1]["unallocated_gpus"] == r.summary()["unallocated_gpus"]
    assert r.marks[0.5]["unallocated_gpus"] >= r.marks[1.1]["unallocated_gpus"]


def test_release_gives_back_what_assign_took():
    nodes = [Node("T4", 8000, 1000, [1000, 1000]), Node("T4", 8000, 1000, [1000, 1000])]
    f = Fleet(nodes, "bestfit")
    got = f.assign(HALF)
    assert got == (0, [0], 500) and f.nodes[0].free == [500, 1000] and f.nodes[0].cpu == 7000
    assert not f.empty(0) and f.empty(1) and len(f.groups) == 2
    f.release(*got, HALF)
    assert f.nodes[0].free == [1000, 1000] and f.nodes[0].cpu == 8000 and f.empty(0)
    assert list(f.groups.values()) == [[(0, 0), (1, 1)]]  # one state again


def test_serve_drops_what_fits_nowhere_and_averages_unallocated_gpus_over_the_window():
    f = Fleet([Node("T4", 8000, 10**6, [1000])], "bestfit")
    stream = [(0, ONE, 10), (5, ONE, 10), (10, ONE, 5), (12, HALF, 1)]
    # 0-10 the first task, 5 dropped, 10 the third (the first left at 10), 12 dropped (full)
    r = serve(f, iter(stream), 0, 20)
    s = r.summary()
    assert (r.arrived, r.dropped) == (4, 2)
    assert r.unallocated_gpu_s == pytest.approx(5) and s["unallocated_gpus"] == 0.25
    assert s["dropped_gpu_fraction"] == pytest.approx(1.5 / 3.5, abs=1e-5)
    assert s["dropped_gpu_s_fraction"] == pytest.approx(10.5 / 25.5, abs=1e-5)
    assert s["dropped_fraction_by_kind"] == {"1gpu": round(1 / 3, 5), "frac": 1.0}
    w = serve(Fleet([Node("T4", 8000, 10**6, [1000])], "bestfit"), iter(stream), 8, 20)
    assert (w.arrived, w.dropped) == (2, 1)  # only what arrives after the warm-up counts
    assert w.unallocated_gpu_s == pytest.approx(5)  # over 8..20: free 15..20 only
    assert f.empty(0)  # every task has ended by the window's end


def test_serve_under_exclusive_holds_a_whole_gpu_for_a_fraction():
    f = Fleet([Node("T4", 8000, 10**6, [1000])], "exclusive")
    s = serve(f, iter([(0, HALF, 10), (1, HALF, 10)]), 0, 10).summary()
    assert s["unallocated_gpus"] == 0 and s["idle_gpus"] == pytest.approx(0.5)
    assert s["tasks_dropped"] == 1


def test_kind_names_a_tasks_class():
    assert [kind(t) for t in (Task(1, 0, 0, 0), HALF, ONE, Task(0, 0, 8, 1000))] == [
        "cpu",
        "frac",
        "1gpu",
        "8gpu",
    ]


def test_depart_rate_makes_the_offered_load_and_the_cap_cuts_durations():
    nodes = [Node("T4", 8000, 10**6, [1000, 1000])]
    r = depart([ONE], [100.0], nodes, "bestfit", horizon_s=10, cap_s=0, warmup_s=0)
    assert r.rate_per_s == pytest.approx(2 / 100)  # 2 GPUs / (1 GPU x 100 s)
    r = depart([ONE, ONE], [100.0, 10**6], nodes, "bestfit", horizon_s=10, cap_s=100)
    assert r.rate_per_s == pytest.approx(2 / 100) and r.warmup_s == 100
    with pytest.raises(ValueError, match="durations"):
        depart([ONE], [1.0, 2.0], nodes, "bestfit")


def test_depart_drops_as_erlangs_loss_formula_says():
    # one node of 2 GPUs, 1-GPU tasks, offered 2 erlangs: Erlang B(2, 2) = 2 / 5 dropped
    nodes = [Node("T4", 8000, 10**6, [1000, 1000])]
    r = depart([ONE], [100.0], nodes, "fgd", load=1.0, seed=1, horizon_s=2e6, cap_s=0)
    assert r.arrived > 30000
    assert r.summary()["dropped_fraction"] == pytest.approx(0.4, abs=0.02)
    assert r.summary()["unallocated_gpus"] == pytest.approx(2 - 2 * 0.6, abs=0.05)


def test_depart_at_half_load_on_a_roomy_fleet_drops_nothing_and_idles_half():
    nodes = [Node("T4", 64000, 10**6, [1000] * 8) for _ in range(10)]  # 80 GPUs, 40 busy
    r = depart([ONE, HALF], [100.0, 200.0], nodes, "bestfit", load=0.5, seed=2, horizon_s=2e4)
    s = r.summary()
    assert s["tasks_dropped"] == 0
    assert s["idle_gpus"] == pytest.approx(40, abs=3)


def test_read_durations_are_deletion_minus_creation_and_errors_name_the_line():
    text = "name,creation_time,deletion_time\na,10,25\nb,0,0\n"
    assert read_durations(text, "p.csv") == [15.0, 0.0]
    with pytest.raises(ValueError, match=r"p.csv:3: column 'deletion_time': 4 is before 9"):
        read_durations("name,creation_time,deletion_time\na,1,2\nb,9,4\n", "p.csv")
    with pytest.raises(ValueError, match=r"p.csv:1: .*no column\(s\) deletion_time"):
        read_durations("name,creation_time\na,1\n", "p.csv")
