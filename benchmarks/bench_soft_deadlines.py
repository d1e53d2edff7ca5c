"""Soft deadlines under overload: a Chronus-format trace built from MIX1's jobs with stepped soft
deadlines (about 60 % soft, 30 % strict, 10 % best effort, seeded; see
:mod:`slurm_dl.sim.workloads.soft_trace`) replayed at three loads, ``las`` against ``deadline-las``.

Prints one JSON line per load (each policy's strict deadlines met, utility earned as a share of
the maximum, best-effort average JCT, and the ratios against LAS in the same run) and a human
line. ``python benchmarks/bench_soft_deadlines.py [--nodes 160,80,40] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.workloads.soft_trace import write_soft_deadline_trace
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import read_trace

T = Path(os.environ.get("SLURM_DL_TRACES", "/work/shared/traces"))
LAS = [100000.0, 3000000.0]


def figures(jobs, name: str, nodes: int, **kw) -> dict:
    t0 = time.process_time()
    setup = SimSetup(nodes=nodes, gpus_per_node=8, cost=PreemptionCost(60.0), fairness=False)
    s, _ = simulate(jobs, lambda: make_ranker(name, las_thresholds=LAS, **kw), setup)
    return {
        "strict_met": round(s.get("deadline_hit_rate", 0.0), 4),
        "strict_misses": round(s.get("deadline_miss_rate", 0.0), 4),
        "utility": round(s.get("utility_fraction", 0.0), 4),
        "best_effort_avg_jct_s": round(s.get("best_effort_avg_jct_s", 0.0), 1),
        "avg_jct_s": round(s["avg_jct_s"], 1),
        "cpu_s": round(time.process_time() - t0, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--nodes", default="160,80,40", help="cluster sizes (× 8 GPUs), comma-separated"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--source", default=str(T / "chronus" / "trace_job_Philly_MIX1.csv"))
    ap.add_argument("--policies", default="las,deadline-las")
    ap.add_argument(
        "--soft-boost",
        default=None,
        choices=("utility", "strict-first", "value-rate"),
        help="policy.deadline.soft_boost for deadline-las (default: the config's)",
    )
    ap.add_argument(
        "--admission-share",
        type=float,
        default=None,
        help="policy.deadline.admission_share for deadline-las (default: the config's)",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = write_soft_deadline_trace(a.source, Path(d) / "soft.csv", seed=a.seed)
        jobs = read_trace(path, "chronus")
    for nodes in (int(n) for n in a.nodes.split(",")):
        out = {"nodes": nodes, "gpus_per_node": 8, "jobs": len(jobs), "seed": a.seed}
        for p in a.policies.split(","):
            kw = (
                {}
                if p == "las"
                else {
                    k: v
                    for k, v in (
                        ("soft_boost", a.soft_boost),
                        ("admission_share", a.admission_share),
                    )
                    if v is not None
                }
            )
            out[p] = figures(jobs, p, nodes, **kw)
        out["options"] = {"soft_boost": a.soft_boost, "admission_share": a.admission_share}
        las = out["las"]
        for p in a.policies.split(","):
            if p == "las":
                continue
            f = out[p]
            f["misses_x_fewer_than_las"] = (
                round(las["strict_misses"] / f["strict_misses"], 2) if f["strict_misses"] else None
            )
            f["utility_minus_las_points"] = round(100 * (f["utility"] - las["utility"]), 2)
            f["best_effort_x_las"] = (
                round(f["best_effort_avg_jct_s"] / las["best_effort_avg_jct_s"], 3)
                if las["best_effort_avg_jct_s"]
                else None
            )
            print(
                f"{nodes} x 8 GPUs: {p}: strict met {100 * f['strict_met']:.1f} % (LAS "
                f"{100 * las['strict_met']:.1f} %, misses {f['misses_x_fewer_than_las']}x fewer), utility "
                f"{100 * f['utility']:.1f} % (LAS {100 * las['utility']:.1f} %), best effort "
                f"{f['best_effort_x_las']}x LAS",
                file=sys.stderr,
            )
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
