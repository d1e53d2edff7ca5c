"""Heterogeneity-aware placement on a cluster of several GPU types: LAS and fair share under
each type choice (blind, fastest, aware) on Philly with Gavel's throughputs, in one run.

Prints one JSON object and one human line per load. The goals: aware LAS average JCT ≤ 0.67 ×
the same LAS blind to type, and below "fastest free type first"; fair share (normalised by type
speed) worst finish-time fairness ρ ≤ 1.2. Each job is given a model drawn from Gavel's 26 (seed
``--model-seed``); its trace duration is its run time on its fastest type. CPU seconds per run.

The same as, for one policy and choice:
  slurm-dl simulate --trace ../shared/traces/philly/philly.csv --start 2017-10-01 \\
    --end 2017-12-01 --node-types v100:15,p100:15,k80:15 --gpus-per-node 8 \\
    --throughputs ../shared/traces/gavel/simulation_throughputs.json --model-seed 0 \\
    --preempt-cost 60 --policy las --type-choice aware
Usage: python benchmarks/bench_sim_hetero.py [--load v100:15,p100:15,k80:15@2017-10-01..2017-12-01]
       [--policy las --policy fairshare] [--choice blind ...] [--no-fairness] [--no-moves]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from slurm_dl.sim.engine.fleet import parse_node_types
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.whatif.speeds import draw_models, load_throughputs, throughput_model
from slurm_dl.core.throughput import kinds_of
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import parse_time, read_trace
from slurm_dl.sim.engine.typed import CHOICES, TypeSetup

from bench_sim_policies import traces_dir  # noqa: E402 - where the traces are

DEFAULT_LOAD = "v100:15,p100:15,k80:15@2017-10-01..2017-12-01"
RHO_FLOOR_S = 600.0  # the fair-share decision's run-time floor (LeaseSettings.rho_floor_s)
KEYS = (
    "avg_jct_s",
    "median_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "makespan_s",
    "utilization",
    "preemptions_per_job",
    "max_rho",
    "jain_rho",
)


def brief(s: dict, cpu: float) -> dict:
    out = {k: (round(s[k], 4) if isinstance(s.get(k), float) else s.get(k)) for k in KEYS}
    out["per_type_utilization"] = {
        t: round(r["utilization"], 4) for t, r in s.get("per_type", {}).items()
    }
    rhos = {a: r for a, r in s["per_account"].items() if r.get("rho") is not None}
    if rhos:
        a, r = max(rhos.items(), key=lambda x: x[1]["rho"])
        out["worst_rho_account"] = {
            "account": a,
            "jobs": r["jobs"],
            "avg_jct_s": round(r["avg_jct_s"], 1),
            "isolated_avg_jct_s": round(r["isolated_avg_jct_s"], 1),
        }
        # the accounts whose isolated average JCT is at least the policy's run-time floor
        # (rho_floor_s, 600 s): the fair-share decision takes a shorter run as that long, so
        # an account of a few seconds-long jobs is set by seconds of placement
        floored = {a: r for a, r in rhos.items() if r["isolated_avg_jct_s"] >= RHO_FLOOR_S}
        if floored:
            a, r = max(floored.items(), key=lambda x: x[1]["rho"])
            out["worst_rho_isolated_600s"] = {
                "account": a,
                "rho": round(r["rho"], 4),
                "jobs": r["jobs"],
            }
    if "type_moves" in s:
        out["type_moves"] = s["type_moves"]
    out["cpu_s"] = round(cpu, 2)
    return out


def run_load(load: str, tdir: Path, a) -> dict:
    types, _, window = load.partition("@")
    start, _, end = (window or "2017-10-01..2017-12-01").partition("..")
    jobs = read_trace(tdir / "philly" / "philly.csv", "philly", parse_time(start), parse_time(end))
    matrix = load_throughputs(tdir / "gavel" / "simulation_throughputs.json")
    draw_models(jobs, kinds_of(matrix), a.model_seed)
    groups = parse_node_types(types, a.gpus_per_node)
    model = throughput_model([g.gpu_type for g in groups], matrix)
    rows: dict[str, dict] = {}
    for policy in a.policy:
        for choice in a.choice:
            setup = SimSetup(
                gpus_per_node=a.gpus_per_node,
                nodes=sum(g.nodes for g in groups),
                cost=PreemptionCost(a.preempt_cost),
                fairness=not a.no_fairness,
                groups=tuple(groups),
                types=TypeSetup(choice, model),
            )
            c0 = time.process_time()
            s, _ = simulate(jobs, lambda: make_ranker(policy), setup)
            rows.setdefault(policy, {})[choice] = brief(s, time.process_time() - c0)
            print(f"  {load} {policy} {choice}: {rows[policy][choice]}", file=sys.stderr)
    ratios = {}
    for policy, by in rows.items():
        if "aware" in by:
            for base in ("blind", "fastest"):
                if base in by:
                    ratios[f"{policy}_aware_vs_{base}"] = round(
                        by["aware"]["avg_jct_s"] / by[base]["avg_jct_s"], 4
                    )
    return {
        "load": load,
        "jobs": len(jobs),
        "node_types": types,
        "window": [start, end],
        "type_speeds": {t: round(model.type_speed(t), 4) for t in model.types},
        "policies": rows,
        "ratios": ratios,
    }


def human(r: dict) -> str:
    parts = [f"{r['load']} ({r['jobs']} jobs)"]
    for k, v in r["ratios"].items():
        parts.append(f"{k} {v:.3f}")
    for policy, by in r["policies"].items():
        rhos = ", ".join(
            f"{c} {x['max_rho']:.2f}"
            + (
                f" ({x['worst_rho_isolated_600s']['rho']:.2f} from 600 s)"
                if "worst_rho_isolated_600s" in x
                else ""
            )
            for c, x in by.items()
            if x.get("max_rho") is not None
        )
        if rhos:
            parts.append(f"{policy} worst rho {rhos}")
    return "; ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces")
    ap.add_argument("--load", action="append", help=f"TYPES@START..END (default {DEFAULT_LOAD})")
    ap.add_argument("--policy", action="append")
    ap.add_argument("--choice", action="append", choices=CHOICES)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--model-seed", type=int, default=0)
    ap.add_argument("--preempt-cost", type=float, default=60.0)
    ap.add_argument("--no-fairness", action="store_true")
    ap.add_argument(
        "--no-moves",
        action="store_true",
        help="aware fair share without moving running jobs to faster types (the rule before them)",
    )
    a = ap.parse_args()
    if a.no_moves:
        import slurm_dl.sim.engine.cluster_state as engine_state

        engine_state.MOVE_GAIN = 0.0
    a.policy = a.policy or ["las", "fairshare"]
    a.choice = a.choice or list(CHOICES)
    tdir = traces_dir(a.traces)
    if (
        not (tdir / "philly" / "philly.csv").is_file()
        or not (tdir / "gavel" / "simulation_throughputs.json").is_file()
    ):
        print(json.dumps({"skipped": f"no Philly trace or Gavel throughputs under {tdir}"}))
        return 0
    results = [run_load(load, tdir, a) for load in (a.load or [DEFAULT_LOAD])]
    print(
        json.dumps(
            {
                "model_seed": a.model_seed,
                "preempt_cost_s": a.preempt_cost,
                "moves": not a.no_moves,
                "loads": results,
            }
        )
    )
    for r in results:
        print(human(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
