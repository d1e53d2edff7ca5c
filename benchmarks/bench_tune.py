"""`slurm-dl tune` on heavy Philly: LAS thresholds x starvation guard (24 candidates), tuned on
the first half of the window and judged on the second, which the search never saw.

Prints one JSON object and one human line. The goals: the proposal at least as good as the
current (default) settings on the unseen half (ratio <= 1), and within 3 % of the best
candidate there (ratio <= 1.03). Wall and CPU seconds of the whole tune beside them.

Usage: python benchmarks/bench_tune.py [--traces DIR] [--start 2017-10-01 --end 2017-12-01] [-j N]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

from bench_sim_policies import traces_dir  # noqa: E402 - where the traces are

THRESHOLDS = (
    "30000,300000,3000000",
    "3600,36000",
    "100000,3000000",
    "10000,100000,1000000",
    "36000,360000",
    "300000,3000000",
)
STARVATION = ("none", "2", "4", "8")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces")
    ap.add_argument("--start", default="2017-10-01")
    ap.add_argument("--end", default="2017-12-01")
    ap.add_argument("-j", "--jobs", type=int)
    a = ap.parse_args()
    t = traces_dir(a.traces)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "tune",
            "--trace",
            str(t / "philly" / "philly.csv"),
            "--start",
            a.start,
            "--end",
            a.end,
            "--cluster-per-vc",
            str(t / "philly" / "vc_sizes_quarter.csv"),
            "--preempt-cost",
            "60",
            "--policy",
            "las",
            "--param",
            "policy.las.thresholds_gpu_s=" + ":".join(THRESHOLDS),
            "--param",
            "policy.las.starvation_factor=" + ":".join(STARVATION),
            "--output",
            f"{tmp}/proposed.toml",
            "--report",
            f"{tmp}/report",
            "--json",
        ]
        if a.jobs:
            cmd += ["--jobs", str(a.jobs)]
        w0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - w0
    if p.returncode not in (0,):
        print(p.stderr, file=sys.stderr)
        return p.returncode
    doc = json.loads(p.stdout)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {
        "window": [a.start, a.end],
        "jobs": doc["jobs"],
        "tuned_on": doc["n_in"],
        "judged_on": doc["n_out"],
        "candidates": len(doc["candidates"]),
        "proposal": doc["proposal"]["label"],
        "current_out_s": doc["current"]["out_of_sample"],
        "proposal_out_s": doc["proposal"]["out_of_sample"],
        "best_out": doc["best_out_of_sample"]["label"],
        "best_out_s": doc["best_out_of_sample"]["out_of_sample"],
        "proposal_vs_current_out": round(doc["proposal_vs_current_out"], 4),
        "proposal_vs_best_out": round(doc["proposal_vs_best_out"], 4),
        "wall_s": round(wall, 1),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
    }
    print(json.dumps(out))
    print(
        f"tune on heavy Philly ({out['candidates']} candidates, {out['tuned_on']} jobs tuned on, "
        f"{out['judged_on']} judged on): proposal {out['proposal']}; on the unseen half "
        f"{out['proposal_vs_current_out']:.3f}x the defaults, {out['proposal_vs_best_out']:.3f}x the best "
        f"candidate ({out['best_out']}); {out['wall_s']} s wall"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
