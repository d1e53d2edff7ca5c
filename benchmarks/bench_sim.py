"""Simulator speed on the heavy setup (philly Oct–Nov 2017, vc_sizes_quarter.csv, 60 s preemption
cost) with preemptive LAS, against strict FIFO in the same run (ratio), plus the full 82k-job trace.

Prints one JSON object and one human line. Target: heavy-setup LAS ≤ 10 s on one core.
Usage: python benchmarks/bench_sim.py [--traces DIR] [--skip-full]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import parse_time, read_cluster_sizes, read_trace


def traces_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = os.environ.get("SLURM_DL_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


def timed(jobs, policy, setup) -> tuple[float, dict]:
    t0 = time.process_time()
    summary, _ = simulate(jobs, lambda: make_ranker(policy), setup)
    return time.process_time() - t0, summary


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces")
    ap.add_argument("--skip-full", action="store_true")
    a = ap.parse_args()
    tdir = traces_dir(a.traces) / "philly"
    if not (tdir / "philly.csv").is_file():
        print(json.dumps({"skipped": f"no trace at {tdir}"}))
        return 0
    t0 = time.process_time()
    jobs = read_trace(
        tdir / "philly.csv", "philly", parse_time("2017-10-01"), parse_time("2017-12-01")
    )
    read_s = time.process_time() - t0
    setup = SimSetup(
        cluster_sizes=read_cluster_sizes(tdir / "vc_sizes_quarter.csv"), cost=PreemptionCost(60.0)
    )
    fifo_s, _ = timed(jobs, "fifo", setup)
    las_s, las = timed(jobs, "las", setup)
    out = {
        "setup": "philly 2017-10-01..2017-12-01, vc_sizes_quarter.csv, preempt 60 s",
        "jobs": len(jobs),
        "read_trace_cpu_s": round(read_s, 3),
        "fifo_cpu_s": round(fifo_s, 3),
        "las_cpu_s": round(las_s, 3),
        "las_jobs_per_s": round(len(jobs) / las_s, 1),
        "las_over_fifo": round(las_s / fifo_s, 2),
        "las_avg_jct_s": round(las["avg_jct_s"], 1),
        "target_s": 10.0,
    }
    if not a.skip_full:
        full = read_trace(tdir / "philly.csv", "philly")
        fs, _ = timed(full, "fifo", setup)
        ls, _ = timed(full, "las", setup)
        out.update(
            {
                "full_jobs": len(full),
                "full_fifo_cpu_s": round(fs, 3),
                "full_las_cpu_s": round(ls, 3),
                "full_las_jobs_per_s": round(len(full) / ls, 1),
            }
        )
    print(json.dumps(out))
    print(
        f"heavy setup: LAS {out['las_cpu_s']} s CPU for {len(jobs)} jobs ({out['las_jobs_per_s']} jobs/s), "
        f"{out['las_over_fifo']}x strict FIFO; target ≤ 10 s"
        + (
            f"; full trace {out['full_jobs']} jobs: LAS {out['full_las_cpu_s']} s"
            if "full_jobs" in out
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
