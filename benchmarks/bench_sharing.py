"""GPU sharing on the openb fleet: exclusive allocation, best fit and fragmentation gradient
descent (FGD) side by side, in one run, by FGD's inflation experiment.

Tasks drawn at random (seeded, with replacement) from the openb default task list arrive into
the empty openb fleet (1213 nodes, 6212 GPUs) and never leave, until the GPUs they ask reach the
fleet's; a task that fits nowhere is dropped. Measured then ("the cluster full"): the fraction
of arrived tasks scheduled and the GPUs held by no task (unallocated). The goal: FGD ≥ 30%
fewer unallocated GPUs than best fit (FGD's paper reports up to 49%). Each seed is one draw;
the means and the ratio fgd/bestfit are over the seeds.

The same as, per placement and seed:
  slurm-dl simulate --format openb --trace ../shared/traces/hetero/openb_pod_list_default.csv \\
    --fleet ../shared/traces/hetero/openb_node_list_gpu_node.csv --placement fgd --seed 0 --json
Usage: python benchmarks/bench_sharing.py [--seeds 5] [--traces DIR] [--tasks FILE]
Prints one JSON object and one human line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim_policies import traces_dir  # noqa: E402 - where the traces are

from slurm_dl.sim.sharing import PLACEMENTS, inflate, read_nodes, read_tasks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--traces", default=None)
    ap.add_argument("--tasks", default=None, help="task list (default hetero/openb_pod_list_default.csv)")
    a = ap.parse_args(argv)
    hetero = traces_dir(a.traces) / "hetero"
    tasks_path = Path(a.tasks) if a.tasks else hetero / "openb_pod_list_default.csv"
    tasks = read_tasks(tasks_path.read_text(), str(tasks_path))
    nodes = read_nodes((hetero / "openb_node_list_gpu_node.csv").read_text(), "openb_node_list_gpu_node.csv")
    runs: dict[str, list[dict]] = {p: [] for p in PLACEMENTS}
    cpu: dict[str, float] = {p: 0.0 for p in PLACEMENTS}
    for seed in range(a.seeds):
        for p in PLACEMENTS:
            t0 = time.process_time()
            runs[p].append(inflate(tasks, nodes, p, seed=seed).summary())
            cpu[p] += time.process_time() - t0
    mean = {p: {k: round(statistics.fmean(r[k] for r in rs), 4)
                for k in ("scheduled_fraction", "unallocated_gpus", "idle_gpus", "first_failure_arrived_pct")}
            for p, rs in runs.items()}
    per_seed = [round(f["unallocated_gpus"] / b["unallocated_gpus"], 4)
                for f, b in zip(runs["fgd"], runs["bestfit"])]
    ratio = round(mean["fgd"]["unallocated_gpus"] / mean["bestfit"]["unallocated_gpus"], 4)
    doc = {"bench": "sharing", "tasks": str(tasks_path.name), "task_count": len(tasks), "nodes": len(nodes),
           "gpus": runs["fgd"][0]["gpus"], "seeds": a.seeds, "mean": mean,
           "unallocated_gpus_per_seed": {p: [r["unallocated_gpus"] for r in rs] for p, rs in runs.items()},
           "fgd_over_bestfit_unallocated": ratio, "fgd_over_bestfit_per_seed": per_seed,
           "fgd_reduction_vs_bestfit_pct": round(100 * (1 - ratio), 1),
           "goal_reduction_pct": 30, "cpu_s": {p: round(c, 1) for p, c in cpu.items()}}
    print(json.dumps(doc))
    m = mean
    print(f"openb full ({a.seeds} seeds): scheduled exclusive {100 * m['exclusive']['scheduled_fraction']:.1f}% "
          f"bestfit {100 * m['bestfit']['scheduled_fraction']:.1f}% fgd {100 * m['fgd']['scheduled_fraction']:.1f}%; "
          f"unallocated GPUs bestfit {m['bestfit']['unallocated_gpus']:.1f} fgd {m['fgd']['unallocated_gpus']:.1f} "
          f"(fgd/bestfit {ratio:.3f}, {100 * (1 - ratio):.1f}% fewer; goal 30%); "
          f"exclusive idle {m['exclusive']['idle_gpus']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
