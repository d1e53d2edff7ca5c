"""Every site-relevant policy on the whole Philly trace (82k jobs) as one 88-node cluster, with
the fairness runs (each account alone on its share), each timed against a plain FIFO replay in
the same run.

Prints one JSON object and one human line. Goal: fifo, las, gittins, fairshare, combined and
deadline-las together <= 60 s on one core and <= 1 GB peak RSS. Times are CPU seconds
(time.process_time) and wall seconds; on a shared machine trust the CPU figures.
Usage: python benchmarks/bench_sim_policies.py [--traces DIR] [--nodes 88]
       [--policy NAME ...] [--no-fairness]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

from slurm_dl.sim.ranking.ranker import load_prior, make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.workloads.traces import read_trace

POLICIES = ("fifo", "las", "gittins", "fairshare", "combined", "deadline-las")


def traces_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = os.environ.get("SLURM_DL_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces")
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--policy", action="append")
    ap.add_argument("--no-fairness", action="store_true")
    a = ap.parse_args()
    tdir = traces_dir(a.traces)
    trace = tdir / "philly" / "philly.csv"
    if not trace.is_file():
        print(json.dumps({"skipped": f"no trace at {trace}"}))
        return 0
    t0, w0 = time.process_time(), time.perf_counter()
    jobs = read_trace(trace, "philly")
    read_cpu, read_wall = time.process_time() - t0, time.perf_counter() - w0
    prior_path = tdir / "tiresias" / "yarn-gput1000.csv"
    prior = load_prior(prior_path) if prior_path.is_file() else []
    setup = SimSetup(gpus_per_node=8, nodes=a.nodes, fairness=not a.no_fairness)
    rows: dict[str, dict] = {}
    for name in a.policy or POLICIES:
        c0, w0 = time.process_time(), time.perf_counter()
        summary, _ = simulate(
            jobs, lambda name=name: make_ranker(name, prior=prior, total_gpus=8 * a.nodes), setup
        )
        rows[name] = {
            "cpu_s": round(time.process_time() - c0, 2),
            "wall_s": round(time.perf_counter() - w0, 2),
            "avg_jct_h": round(summary["avg_jct_s"] / 3600, 3),
            "preemptions": summary["preemptions"],
            "max_rho": None if summary.get("max_rho") is None else round(summary["max_rho"], 3),
        }
        print(f"  {name}: {rows[name]['cpu_s']} s CPU", file=sys.stderr, flush=True)
    base = rows.get("fifo", {}).get("cpu_s")
    for r in rows.values():
        r["x_fifo"] = round(r["cpu_s"] / base, 2) if base else None
    total_cpu = round(read_cpu + sum(r["cpu_s"] for r in rows.values()), 2)
    total_wall = round(read_wall + sum(r["wall_s"] for r in rows.values()), 2)
    out = {
        "trace": str(trace),
        "jobs": len(jobs),
        "nodes": a.nodes,
        "fairness": not a.no_fairness,
        "read_cpu_s": round(read_cpu, 2),
        "policies": rows,
        "total_cpu_s": total_cpu,
        "total_wall_s": total_wall,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "goal": {"total_cpu_s": 60, "peak_rss_mb": 1024},
        "note": "CPU time on one core; wall time on a shared machine",
    }
    print(json.dumps(out))
    parts = ", ".join(f"{k} {v['cpu_s']:.1f} s ({v['x_fifo']}x fifo)" for k, v in rows.items())
    print(
        f"{len(jobs)} jobs on {a.nodes} nodes{' with fairness runs' if out['fairness'] else ''}: {parts}; "
        f"total {total_cpu:.1f} s CPU / {total_wall:.1f} s wall (goal 60 s), peak RSS {out['peak_rss_mb']:.0f} MB "
        f"(goal 1024)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
