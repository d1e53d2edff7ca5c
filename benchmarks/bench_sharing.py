"""GPU sharing on the openb fleet: exclusive allocation, FGD's DotProd and Best-fit baselines
and fragmentation gradient descent (FGD) side by side, in one run, by FGD's inflation
experiment, each placement as FGD's own simulator scores it (see slurm_dl.sim.sharing).

The openb default task list's tasks arrive (seeded: each once in a random order, then drawn at
random) into the empty openb fleet (1213 nodes, 6212 GPUs) and never leave, until the GPUs they
ask reach the fleet's; a task that fits nowhere is dropped. Measured then ("the cluster full"):
the fraction of arrived tasks scheduled and the GPUs held by no task (unallocated). The goal:
FGD >= 30% fewer unallocated GPUs than best fit (FGD's paper: "up to 49%", which is against
DotProd). Each seed is one run; the means and the ratios fgd/bestfit, fgd/dotprod are over the
seeds. ``--exact``: also FGD and Best-fit with float scores (the paper's rule without the
scheduler's integer rounding).

The same as, per placement and seed:
  slurm-dl simulate --format openb --trace ../shared/traces/hetero/openb_pod_list_default.csv \\
    --fleet ../shared/traces/hetero/openb_node_list_gpu_node.csv --placement fgd --seed 0 --json
Part ``colocation``: heavy Philly (2017-10-01..12-01, the quarter VC sizes, 60 s restart cost,
LAS 100k/3M GPU-s) with inference-like jobs (the rule: 1 GPU and a run of at most an hour; Philly
names no job kinds) shared 2 per GPU, against exclusive allocation. Each shared job runs as if it
always had a neighbour: slowed by the mean of Gavel's measured 1-GPU pair throughputs on V100
(its speed beside another model over its speed alone; pairs that do not fit one GPU left out),
or ``--factor``. The replay cuts each GPU into 2 slots (a shared job takes one, any other job
two per GPU, on the same node), so a slot may pair with a slot of another GPU: an optimistic
packing. Figures: average JCT, average queueing and GPU-hours held (a shared job half a GPU).
Part ``ties``: why the integer scores matter. FGD and Best-fit at 100 % arrived with each tie
rule of slurm_dl.sim.sharing.Fleet: integer scores with ties to the fixed random node order
(FGD's simulator), to the float score (the same choices as ``--exact``), to a node drawn afresh
per task, to the fullest node; float scores with every node within 0.5, 1 or 2 points of the
best tied (fixed order or drawn afresh); and how often a tie moved FGD off the float's best.
Part ``range``: fgd/bestfit read at several arrived fills (``--fills``, default 95..105 %).
Part ``departures``: tasks that end. Each arrival is a task drawn from the trace with its own
duration (openb's deletion_time - creation_time, at least 1 s, cut at ``--cap-s``, default 1 h)
by a Poisson process whose rate offers ``--load`` x the fleet's GPUs (GPU-seconds per second);
a task that fits nowhere is dropped (no queue); after ``--warmup-s`` (default the cap),
``--window-s`` (default 3 h) measured: time-averaged unallocated GPUs, the share of tasks and of
asked GPU-seconds dropped, per placement (``--placements``, default bestfit,fgd).
Usage: python benchmarks/bench_sharing.py [--part inflation] [--part colocation] [--part ties]
       [--part range] [--part departures] [--seeds 5] [--traces DIR] [--tasks FILE] [--exact]
       [--factor F] [--max-inference-s 3600] [--fills 95,97.5,100,102.5,105] [--load 1.0]
       [--cap-s 3600] [--warmup-s S] [--window-s 10800] [--placements bestfit,fgd]
With no --part: inflation and colocation. Prints one JSON object and one human line per part.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim_policies import traces_dir  # noqa: E402 - where the traces are

from slurm_dl.sim.sharing import (
    PLACEMENTS,
    colocation_factors,
    inflate,
    inference_like,  # noqa: E402
    read_nodes,
    read_tasks,
    share_jobs,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--part",
        action="append",
        choices=["inflation", "colocation", "ties", "range", "departures"],
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--traces", default=None)
    ap.add_argument(
        "--tasks", default=None, help="task list (default hetero/openb_pod_list_default.csv)"
    )
    ap.add_argument("--exact", action="store_true", help="also FGD and Best-fit scored as floats")
    ap.add_argument(
        "--factor", type=float, default=None, help="co-location speed (default: Gavel's V100 mean)"
    )
    ap.add_argument("--max-inference-s", type=float, default=3600.0)
    ap.add_argument(
        "--fills",
        default="95,97.5,100,102.5,105",
        help="part range: %% of the fleet's GPUs arrived at which to read (default 95..105)",
    )
    ap.add_argument(
        "--load", type=float, action="append", help="part departures: offered load (default 1.0)"
    )
    ap.add_argument(
        "--cap-s",
        type=float,
        default=3600.0,
        help="part departures: longest task duration, s (default 3600; 0: none)",
    )
    ap.add_argument(
        "--window-s",
        type=float,
        default=3 * 3600.0,
        help="part departures: seconds measured after the warm-up (default 3 h)",
    )
    ap.add_argument("--warmup-s", type=float, default=None, help="part departures: default the cap")
    ap.add_argument(
        "--placements",
        default="bestfit,fgd",
        help="part departures: placements, comma-separated (default bestfit,fgd)",
    )
    a = ap.parse_args(argv)
    parts = a.part or ["inflation", "colocation"]
    if "inflation" in parts:
        inflation(a)
    if "colocation" in parts:
        colocation(a)
    if "ties" in parts:
        ties(a)
    if "range" in parts:
        arrival_range(a)
    if "departures" in parts:
        departures(a)
    return 0


def _openb(a):
    hetero = traces_dir(a.traces) / "hetero"
    tasks_path = Path(a.tasks) if a.tasks else hetero / "openb_pod_list_default.csv"
    text = tasks_path.read_text()
    tasks = read_tasks(text, str(tasks_path))
    nodes = read_nodes(
        (hetero / "openb_node_list_gpu_node.csv").read_text(), "openb_node_list_gpu_node.csv"
    )
    return tasks_path, text, tasks, nodes


# part ties: (name, placement, exact, tie, tol)
TIE_VARIANTS = [
    ("bestfit", "bestfit", False, "rank", 0.0),
    ("bestfit_exact", "bestfit", True, "rank", 0.0),
    ("bestfit_int_random", "bestfit", False, "random", 0.0),
    ("fgd", "fgd", False, "rank", 0.0),
    ("fgd_int_tie_float", "fgd", False, "float", 0.0),
    ("fgd_int_random", "fgd", False, "random", 0.0),
    ("fgd_int_pack", "fgd", False, "pack", 0.0),
    ("fgd_exact", "fgd", True, "rank", 0.0),
    ("fgd_exact_tol0.5", "fgd", True, "rank", 0.5),
    ("fgd_exact_tol1", "fgd", True, "rank", 1.0),
    ("fgd_exact_tol2", "fgd", True, "rank", 2.0),
    ("fgd_exact_tol1_random", "fgd", True, "random", 1.0),
]


def ties(a) -> None:
    """What the integer scores' ties do: FGD and Best-fit with each tie rule (see
    slurm_dl.sim.sharing.Fleet), unallocated GPUs at 100 % arrived, and how often a tie moved
    FGD's choice off the float score's best node."""
    tasks_path, _, tasks, nodes = _openb(a)
    runs: dict[str, list] = {v[0]: [] for v in TIE_VARIANTS}
    cpu: dict[str, float] = {v[0]: 0.0 for v in TIE_VARIANTS}
    for seed in range(a.seeds):
        for name, p, exact, tie, tol in TIE_VARIANTS:
            t0 = time.process_time()
            runs[name].append(
                inflate(tasks, nodes, p, seed=seed, exact=exact, tie=tie, tol=tol, stats=True)
            )
            cpu[name] += time.process_time() - t0
    un = {k: [round(r.gpus - r.allocated_gpu, 2) for r in rs] for k, rs in runs.items()}
    mean = {k: round(statistics.fmean(v), 2) for k, v in un.items()}

    def counts(rs):
        tot = Counter()
        for r in rs:
            tot.update(r.tie_stats or {})
        n = tot["placed"] or 1
        return {
            "placed": tot["placed"],
            "tied_pct": round(100 * tot["tied"] / n, 2),
            "mean_tied_nodes": round(tot["tied_nodes"] / n, 1),
            "overridden_pct": round(100 * tot["overridden"] / n, 2),
            "mean_gap_points_when_overridden": round(
                tot["gap_x1000"] / 1000 / max(tot["overridden"], 1), 3
            ),
            "chose_empty_over_used": tot["chose_empty_over_used"],
            "chose_used_over_empty": tot["chose_used_over_empty"],
            "chose_empty_pct": round(100 * tot["chose_empty"] / n, 2),
            "float_choice_empty_pct": round(100 * tot["float_choice_empty"] / n, 2),
        }

    doc = {
        "part": "ties",
        "tasks": tasks_path.name,
        "seeds": a.seeds,
        "variants": {
            v[0]: dict(placement=v[1], exact=v[2], tie=v[3], tol=v[4]) for v in TIE_VARIANTS
        },
        "unallocated_gpus_mean": mean,
        "unallocated_gpus_per_seed": un,
        "over_bestfit": {k: round(v / mean["bestfit"], 4) for k, v in mean.items()},
        "over_bestfit_exact": {k: round(v / mean["bestfit_exact"], 4) for k, v in mean.items()},
        "scheduled_fraction": {
            k: round(statistics.fmean(r.scheduled / r.arrived for r in rs), 4)
            for k, rs in runs.items()
        },
        "tie_counts": {k: counts(rs) for k, rs in runs.items()},
        "cpu_s": {k: round(c, 1) for k, c in cpu.items()},
    }
    print(json.dumps(doc))
    print(
        "ties (%d seeds), unallocated GPUs at 100%% arrived: " % a.seeds
        + ", ".join(f"{k} {v:.1f} ({doc['over_bestfit'][k]:.3f}x bestfit)" for k, v in mean.items())
        + "; fgd int scores: %.1f%% of placements tie states of different float scores, %.1f%% "
        "take a node the float score ranks lower"
        % (doc["tie_counts"]["fgd"]["tied_pct"], doc["tie_counts"]["fgd"]["overridden_pct"])
    )


def arrival_range(a) -> None:
    """fgd/bestfit read at several arrived fills (default 95..105 % of the fleet's GPUs), one
    run per placement and seed, integer scores (and float with --exact)."""
    tasks_path, _, tasks, nodes = _openb(a)
    fills = [float(x) / 100 for x in a.fills.split(",") if x.strip()]
    variants = [("bestfit", False), ("fgd", False)] + (
        [("bestfit", True), ("fgd", True)] if a.exact else []
    )
    name = {v: v[0] + ("_exact" if v[1] else "") for v in variants}
    runs = {name[v]: [] for v in variants}
    for seed in range(a.seeds):
        for v in variants:
            runs[name[v]].append(
                inflate(tasks, nodes, v[0], seed=seed, exact=v[1], fill=max(fills), marks=fills)
            )
    table = {}
    for f in fills:
        row = {}
        for k, rs in runs.items():
            row[k] = round(statistics.fmean(r.marks[f]["unallocated_gpus"] for r in rs), 2)
        row["fgd_over_bestfit"] = round(row["fgd"] / row["bestfit"], 4)
        row["fgd_over_bestfit_per_seed"] = [
            round(x.marks[f]["unallocated_gpus"] / y.marks[f]["unallocated_gpus"], 4)
            for x, y in zip(runs["fgd"], runs["bestfit"])
        ]
        if a.exact:
            row["fgd_exact_over_bestfit_exact"] = round(row["fgd_exact"] / row["bestfit_exact"], 4)
        table[f"{100 * f:g}"] = row
    doc = {"part": "range", "tasks": tasks_path.name, "seeds": a.seeds, "by_arrived_pct": table}
    print(json.dumps(doc))
    print(
        "fgd/bestfit unallocated GPUs by %% arrived (%d seeds): " % a.seeds
        + ", ".join(
            f"{k}% {r['fgd_over_bestfit']:.3f} ({r['fgd']:.0f}/{r['bestfit']:.0f})"
            + (f" exact {r['fgd_exact_over_bestfit_exact']:.3f}" if a.exact else "")
            for k, r in table.items()
        )
    )


def colocation(a) -> None:
    from slurm_dl.sim.ranking.ranker import make_ranker
    from slurm_dl.sim.simulate import SimSetup, simulate
    from slurm_dl.sim.engine.state import PreemptionCost
    from slurm_dl.sim.workloads.traces import parse_time, read_cluster_sizes, read_trace

    T = traces_dir(a.traces)
    gavel = json.loads((T / "gavel" / "simulation_throughputs.json").read_text())
    fs = colocation_factors(gavel, "v100")
    factor = a.factor or statistics.fmean(fs)
    jobs = read_trace(
        T / "philly" / "philly.csv", "philly", parse_time("2017-10-01"), parse_time("2017-12-01")
    )
    sizes = read_cluster_sizes(T / "philly" / "vc_sizes_quarter.csv")
    thr = [100000.0, 3000000.0]
    rule = lambda j: inference_like(j, a.max_inference_s)  # noqa: E731

    def replay(js, per_gpu):
        t0 = time.process_time()
        setup = SimSetup(
            cluster_sizes=sizes,
            gpus_per_node=8 * per_gpu,
            cost=PreemptionCost(60.0),
            fairness=False,
        )
        s, _ = simulate(
            js, lambda: make_ranker("las", las_thresholds=[t * per_gpu for t in thr]), setup
        )
        return s, round(time.process_time() - t0, 1)

    def gpu_hours(js, per_gpu):
        return sum(j.num_gpus / per_gpu * j.duration for j in js) / 3600

    excl, cpu_e = replay(jobs, 1)
    slots, _ = share_jobs(jobs, 2, 1.0, rule=lambda j: False)  # the 2-slot replay, nothing shared
    same, cpu_s0 = replay(slots, 2)
    shared_jobs, n_shared = share_jobs(jobs, 2, factor, rule=rule)
    shared, cpu_s = replay(shared_jobs, 2)
    doc = {
        "part": "colocation",
        "jobs": len(jobs),
        "inference_like": n_shared,
        "rule": f"1 GPU and run <= {a.max_inference_s:g} s",
        "per_gpu": 2,
        "factor": round(factor, 4),
        "factor_source": "--factor"
        if a.factor
        else f"Gavel V100 1-GPU pairs, mean of {len(fs)} (median {statistics.median(fs):.3f})",
        "exclusive": {
            "avg_jct_s": round(excl["avg_jct_s"], 1),
            "avg_queue_s": round(excl["avg_queue_s"], 1),
            "gpu_hours": round(gpu_hours(jobs, 1), 1),
        },
        "two_slot_replay_unshared_avg_jct_s": round(same["avg_jct_s"], 1),
        "shared": {
            "avg_jct_s": round(shared["avg_jct_s"], 1),
            "avg_queue_s": round(shared["avg_queue_s"], 1),
            "gpu_hours": round(gpu_hours(shared_jobs, 2), 1),
        },
        "cpu_s": {"exclusive": cpu_e, "two_slot_unshared": cpu_s0, "shared": cpu_s},
    }
    e, sh = doc["exclusive"], doc["shared"]
    doc["jct_ratio"] = round(sh["avg_jct_s"] / e["avg_jct_s"], 4)
    doc["gpu_hours_saved_pct"] = round(100 * (1 - sh["gpu_hours"] / e["gpu_hours"]), 2)
    print(json.dumps(doc))
    print(
        f"heavy Philly, {n_shared} of {len(jobs)} jobs inference-like, 2 per GPU at speed {factor:.3f}: "
        f"avg JCT {sh['avg_jct_s']:.0f} s vs exclusive {e['avg_jct_s']:.0f} s ({doc['jct_ratio']:.3f}x), "
        f"queueing {sh['avg_queue_s']:.0f} vs {e['avg_queue_s']:.0f} s, GPU-hours {sh['gpu_hours']:.0f} vs "
        f"{e['gpu_hours']:.0f} ({doc['gpu_hours_saved_pct']:.1f}% saved)"
    )


def inflation(a) -> None:
    hetero = traces_dir(a.traces) / "hetero"
    tasks_path = Path(a.tasks) if a.tasks else hetero / "openb_pod_list_default.csv"
    tasks = read_tasks(tasks_path.read_text(), str(tasks_path))
    nodes = read_nodes(
        (hetero / "openb_node_list_gpu_node.csv").read_text(), "openb_node_list_gpu_node.csv"
    )
    variants = [(p, False) for p in PLACEMENTS] + (
        [("bestfit", True), ("fgd", True)] if a.exact else []
    )
    name = {v: v[0] + ("_exact" if v[1] else "") for v in variants}
    runs: dict[str, list[dict]] = {name[v]: [] for v in variants}
    cpu: dict[str, float] = {name[v]: 0.0 for v in variants}
    for seed in range(a.seeds):
        for v in variants:
            t0 = time.process_time()
            runs[name[v]].append(inflate(tasks, nodes, v[0], seed=seed, exact=v[1]).summary())
            cpu[name[v]] += time.process_time() - t0
    mean = {
        p: {
            k: round(statistics.fmean(r[k] for r in rs), 4)
            for k in (
                "scheduled_fraction",
                "unallocated_gpus",
                "idle_gpus",
                "first_failure_arrived_pct",
            )
        }
        for p, rs in runs.items()
    }

    def ratio(x, y):
        return (
            round(mean[x]["unallocated_gpus"] / mean[y]["unallocated_gpus"], 4),
            [
                round(f["unallocated_gpus"] / b["unallocated_gpus"], 4)
                for f, b in zip(runs[x], runs[y])
            ],
        )

    r_bf, per_seed = ratio("fgd", "bestfit")
    r_dp, per_seed_dp = ratio("fgd", "dotprod")
    doc = {
        "bench": "sharing",
        "tasks": str(tasks_path.name),
        "task_count": len(tasks),
        "nodes": len(nodes),
        "gpus": runs["fgd"][0]["gpus"],
        "seeds": a.seeds,
        "mean": mean,
        "unallocated_gpus_per_seed": {
            p: [r["unallocated_gpus"] for r in rs] for p, rs in runs.items()
        },
        "fgd_over_bestfit_unallocated": r_bf,
        "fgd_over_bestfit_per_seed": per_seed,
        "fgd_reduction_vs_bestfit_pct": round(100 * (1 - r_bf), 1),
        "fgd_over_dotprod_unallocated": r_dp,
        "fgd_over_dotprod_per_seed": per_seed_dp,
        "fgd_reduction_vs_dotprod_pct": round(100 * (1 - r_dp), 1),
        "goal_reduction_pct": 30,
        "cpu_s": {p: round(c, 1) for p, c in cpu.items()},
    }
    if a.exact:
        r_ex, per_seed_ex = ratio("fgd_exact", "bestfit_exact")
        doc.update(
            fgd_exact_over_bestfit_exact_unallocated=r_ex,
            fgd_exact_over_bestfit_exact_per_seed=per_seed_ex,
        )
    print(json.dumps(doc))
    m = mean
    print(
        f"openb full ({a.seeds} seeds): scheduled exclusive {100 * m['exclusive']['scheduled_fraction']:.1f}% "
        f"dotprod {100 * m['dotprod']['scheduled_fraction']:.1f}% "
        f"bestfit {100 * m['bestfit']['scheduled_fraction']:.1f}% fgd {100 * m['fgd']['scheduled_fraction']:.1f}%; "
        f"unallocated GPUs dotprod {m['dotprod']['unallocated_gpus']:.1f} "
        f"bestfit {m['bestfit']['unallocated_gpus']:.1f} fgd {m['fgd']['unallocated_gpus']:.1f} "
        f"(fgd/bestfit {r_bf:.3f}, {100 * (1 - r_bf):.1f}% fewer; goal 30%; "
        f"fgd/dotprod {r_dp:.3f}, {100 * (1 - r_dp):.1f}% fewer); "
        f"exclusive idle {m['exclusive']['idle_gpus']:.1f}"
        + (
            f"; exact scores: bestfit {m['bestfit_exact']['unallocated_gpus']:.1f} "
            f"fgd {m['fgd_exact']['unallocated_gpus']:.1f} (fgd/bestfit {doc['fgd_exact_over_bestfit_exact_unallocated']:.3f})"
            if a.exact
            else ""
        )
    )


def departures(a) -> None:
    """Tasks that end: each drawn task runs its own openb duration (deletion - creation time,
    at least 1 s, cut at --cap-s), arriving by a Poisson process at --load x the fleet's GPUs
    (offered GPU-seconds per second), placed or dropped; after the warm-up, --window-s measured:
    time-averaged unallocated GPUs and the share of tasks (and of GPU-seconds asked) dropped."""
    from slurm_dl.sim.sharing import depart, read_durations

    tasks_path, text, tasks, nodes = _openb(a)
    durations = read_durations(text, str(tasks_path))
    placements = [p.strip() for p in a.placements.split(",") if p.strip()]
    loads = a.load or [1.0]
    out = {}
    for load in loads:
        runs = {p: [] for p in placements}
        cpu = {p: 0.0 for p in placements}
        for seed in range(a.seeds):
            for p in placements:
                t0 = time.process_time()
                r = depart(
                    tasks,
                    durations,
                    nodes,
                    p,
                    load=load,
                    seed=seed,
                    cap_s=a.cap_s,
                    warmup_s=a.warmup_s,
                    horizon_s=a.window_s,
                )
                runs[p].append(r.summary())
                cpu[p] += time.process_time() - t0
        keys = ("unallocated_gpus", "idle_gpus", "dropped_fraction", "dropped_gpu_s_fraction")
        mean = {
            p: {k: round(statistics.fmean(r[k] for r in rs), 5) for k in keys}
            for p, rs in runs.items()
        }
        for p, rs in runs.items():
            kinds = sorted({k for r in rs for k in r["dropped_fraction_by_kind"]})
            mean[p]["dropped_fraction_by_kind"] = {
                k: round(statistics.fmean(r["dropped_fraction_by_kind"].get(k, 0) for r in rs), 5)
                for k in kinds
            }
        row = {
            "mean": mean,
            "per_seed": {
                p: {k: [r[k] for r in rs] for k in keys + ("tasks_arrived",)}
                for p, rs in runs.items()
            },
            "rate_per_s": runs[placements[0]][0]["rate_per_s"],
            "window_s": runs[placements[0]][0]["window_s"],
            "cpu_s": {p: round(c, 1) for p, c in cpu.items()},
        }
        if "fgd" in runs and "bestfit" in runs:
            for k in ("unallocated_gpus", "dropped_fraction", "dropped_gpu_s_fraction"):
                b = mean["bestfit"][k]
                row[f"fgd_over_bestfit_{k}"] = round(mean["fgd"][k] / b, 4) if b else None
                row[f"fgd_over_bestfit_{k}_per_seed"] = [
                    round(x[k] / y[k], 4) if y[k] else None
                    for x, y in zip(runs["fgd"], runs["bestfit"])
                ]
        out[f"{load:g}"] = row
    doc = {
        "part": "departures",
        "tasks": tasks_path.name,
        "seeds": a.seeds,
        "cap_s": a.cap_s,
        "durations": "deletion_time - creation_time of each task, at least 1 s, cut at cap_s",
        "queue": "none: a task that fits nowhere is dropped",
        "by_load": out,
    }
    print(json.dumps(doc))
    for load, row in out.items():
        m = row["mean"]
        print(
            f"departures, load {load} (cap {a.cap_s:g} s, window {row['window_s']} s, {a.seeds} seeds): "
            + ", ".join(
                f"{p} unallocated {m[p]['unallocated_gpus']:.1f} GPUs, dropped "
                f"{100 * m[p]['dropped_fraction']:.2f}% of tasks "
                f"({100 * m[p]['dropped_gpu_s_fraction']:.2f}% of GPU-s)"
                for p in placements
            )
            + (
                f"; fgd/bestfit unallocated {row['fgd_over_bestfit_unallocated_gpus']}, "
                f"dropped {row['fgd_over_bestfit_dropped_fraction']}"
                if "fgd_over_bestfit_unallocated_gpus" in row
                else ""
            )
        )


if __name__ == "__main__":
    sys.exit(main())
