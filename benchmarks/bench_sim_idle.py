"""Cost of the simulator's idle-policy what-if on the heavy setup (philly Oct–Nov 2017,
vc_sizes_quarter.csv, 60 s preemption cost) with SYNTHETIC utilisation (--synthetic-idle 0.2:1,
idle_action cancel), against the plain replay of the same policy in the same run (ratio).

The what-if costs the per-job verdicts (slurm_dl.core.idle.decide on synthesized samples) plus one
more replay of the trace; the ratio says how much longer `--idle-policy` makes a run.
Prints one JSON object and one human line (the figures are SYNTHETIC, not measured utilisation).
Usage: python benchmarks/bench_sim_idle.py [--traces DIR] [--policy las] [--synthetic 0.2:1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from slurm_dl.core.config import TelemetryConfig
from slurm_dl.sim.idle_replay import judge_all, what_if
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import parse_time, read_cluster_sizes, read_trace
from slurm_dl.sim.workloads.utilisation import parse_synthetic, synthetic_profiles


def traces_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = os.environ.get("SLURM_DL_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces")
    ap.add_argument("--policy", default="las")
    ap.add_argument("--synthetic", default="0.2:1")
    a = ap.parse_args()
    tdir = traces_dir(a.traces) / "philly"
    if not (tdir / "philly.csv").is_file():
        print(json.dumps({"skipped": f"no trace at {tdir}"}))
        return 0
    jobs = read_trace(
        tdir / "philly.csv", "philly", parse_time("2017-10-01"), parse_time("2017-12-01")
    )
    setup = SimSetup(
        cluster_sizes=read_cluster_sizes(tdir / "vc_sizes_quarter.csv"), cost=PreemptionCost(60.0)
    )
    cfg = TelemetryConfig(idle_action="cancel")
    factory = lambda: make_ranker(a.policy)  # noqa: E731

    t0 = time.process_time()
    _, base = simulate(jobs, factory, setup)
    plain_s = time.process_time() - t0
    t0 = time.process_time()
    outcomes = judge_all(jobs, synthetic_profiles(jobs, *parse_synthetic(a.synthetic)), cfg)
    judge_s = time.process_time() - t0
    t0 = time.process_time()
    block = what_if(jobs, outcomes, cfg, factory, setup, base)
    replay_s = time.process_time() - t0
    other = block["other_jobs"]
    out = {
        "setup": f"philly 2017-10-01..2017-12-01, vc_sizes_quarter.csv, preempt 60 s, {a.policy}",
        "utilisation": f"SYNTHETIC --synthetic-idle {a.synthetic}",
        "idle_action": "cancel",
        "jobs": len(jobs),
        "jobs_with_utilisation": block["jobs_with_utilisation"],
        "plain_cpu_s": round(plain_s, 3),
        "judge_cpu_s": round(judge_s, 3),
        "whatif_replay_cpu_s": round(replay_s, 3),
        "idle_over_plain": round((judge_s + replay_s) / plain_s, 2),
        "idle_gpu_hours": round(block["idle_gpu_hours"], 1),
        "reclaimed_gpu_hours": round(block["reclaimed_gpu_hours"], 1),
        "jobs_cancelled": block["jobs_cancelled"],
        "other_avg_jct_change": other.get("avg_jct_change"),
    }
    print(json.dumps(out))
    print(
        f"{a.policy}, heavy setup, SYNTHETIC utilisation: the idle what-if costs {out['idle_over_plain']}x a plain "
        f"replay ({out['judge_cpu_s']} s verdicts + {out['whatif_replay_cpu_s']} s replay vs {out['plain_cpu_s']} s); "
        f"reclaims {out['reclaimed_gpu_hours']} of {out['idle_gpu_hours']} idle GPU-h"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
