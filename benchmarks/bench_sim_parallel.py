"""A what-if's replays as tasks: six policies on the whole Philly trace (82k jobs) as one
88-node x 8-GPU cluster with the fairness runs, run one after the other in this process and
then in a pool of local worker processes, side by side in one run.

Prints one JSON object and one human line: the per-job results of both runs hashed (they
must be identical), the wall time of each and their ratio (goal: 2 workers <= 0.55x serial on
2 cores), the longest single task as a share of the serial total (goal <= 15%), and the peak
memory of the parent and its workers together (goal <= 1.5 GB; as the sum of their RSS, which
counts pages the forked workers share with the parent once per process, and as the sum of
their PSS, which splits shared pages between them). The load average is printed with the
figures: on a shared machine the wall times depend on what else runs.
Usage: python benchmarks/bench_sim_parallel.py [--traces DIR] [--nodes 88] [--workers 2]
       [--policy NAME ...] [--start DATE --end DATE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

from slurm_dl.sim.engine.loop import ClusterResult
from slurm_dl.sim.ranking.ranker import load_prior, make_ranker
from slurm_dl.sim.runner import Task, run_tasks
from slurm_dl.sim.reports.metrics import summarize
from slurm_dl.sim.simulate import SimSetup, Summarized, merge, replays, run_replay
from slurm_dl.sim.workloads.traces import parse_time, read_trace

from bench_sim_policies import POLICIES, traces_dir  # noqa: E402 - the same policies and traces


def _kb(pid: int, field: str, name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class MemoryWatch:
    """Samples this process and its children every ``every_s``: the peak of their summed RSS
    and of their summed PSS (MB)."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s, self.peak_rss, self.peak_pss = every_s, 0.0, 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> list[int]:
        me = os.getpid()
        kids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if int(d.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1]) == me:
                        kids.append(int(d.name))
                except (OSError, IndexError, ValueError):
                    pass
        return [me] + kids

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = self._pids()
            self.peak_rss = max(self.peak_rss, sum(_kb(p, "VmRSS", "status") for p in pids) / 1024)
            self.peak_pss = max(
                self.peak_pss, sum(_kb(p, "Pss", "smaps_rollup") for p in pids) / 1024
            )
            self._stop.wait(self.every_s)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def jobs_hash(r: ClusterResult) -> str:
    """A hash of every job's start, end, queueing and preemptions in one cluster run."""
    h = hashlib.sha256()
    for sj in r.jobs:
        h.update(repr((sj.seq, sj.first_start, sj.end_time, sj.queue_s, sj.preemptions)).encode())
    return h.hexdigest()


def run(jobs, setup, names, prior, total_gpus, workers: int):
    per_run = [replays(jobs, setup) for _ in names]
    tasks = [Task(k, t) for k, ts in enumerate(per_run) for t in ts]
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].run, -tasks[i].jobs))
    outputs: dict[int, object] = {}
    took: dict[int, float] = {}
    factories = [lambda n=n: make_ranker(n, prior=prior, total_gpus=total_gpus) for n in names]

    hashes: dict[int, str] = {}

    def execute(task, on_finish):
        """As the CLI's without plots or report: a cluster run's summary is made where it ran
        (with, here, a hash of its per-job figures)."""
        t0 = time.perf_counter()
        out = run_replay(jobs, factories[task.run], setup, task.replay, on_finish=on_finish)
        h = ""
        if isinstance(out, ClusterResult):
            h, out = jobs_hash(out), Summarized(summarize([out]))
        return out, h, time.perf_counter() - t0

    def on_done(i, out):
        outputs[i], hashes[i], took[i] = out

    w0 = time.perf_counter()
    run_tasks(tasks, execute, on_done, workers=workers, order=order)
    h = hashlib.sha256()
    for k in range(len(names)):
        summary, _ = merge(setup, [outputs[i] for i in range(len(tasks)) if tasks[i].run == k])
        h.update(json.dumps(summary, sort_keys=True).encode())
        h.update("".join(hashes[i] for i in range(len(tasks)) if tasks[i].run == k).encode())
    wall = time.perf_counter() - w0
    longest = max(took, key=took.get)
    return {
        "wall_s": round(wall, 2),
        "tasks": len(tasks),
        "longest_task_s": round(took[longest], 2),
        "longest_task": f"{names[tasks[longest].run]}: {tasks[longest].replay.kind} {tasks[longest].replay.name}",
        "sum_task_s": round(sum(took.values()), 2),
        "hash": h.hexdigest(),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces")
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--policy", action="append")
    ap.add_argument("--start")
    ap.add_argument("--end")
    a = ap.parse_args()
    tdir = traces_dir(a.traces)
    trace = tdir / "philly" / "philly.csv"
    if not trace.is_file():
        print(json.dumps({"skipped": f"no trace at {trace}"}))
        return 0
    jobs = read_trace(
        trace,
        "philly",
        parse_time(a.start) if a.start else None,
        parse_time(a.end) if a.end else None,
    )
    prior_path = tdir / "tiresias" / "yarn-gput1000.csv"
    prior = load_prior(prior_path) if prior_path.is_file() else []
    setup = SimSetup(gpus_per_node=8, nodes=a.nodes, fairness=True)
    names = a.policy or list(POLICIES)
    load0 = os.getloadavg()
    with MemoryWatch() as serial_mem:
        serial = run(jobs, setup, names, prior, 8 * a.nodes, workers=1)
    print(f"  serial: {serial['wall_s']} s", file=sys.stderr, flush=True)
    with MemoryWatch() as pool_mem:
        pooled = run(jobs, setup, names, prior, 8 * a.nodes, workers=a.workers)
    load1 = os.getloadavg()
    serial["peak_rss_mb"], serial["peak_pss_mb"] = (
        round(serial_mem.peak_rss),
        round(serial_mem.peak_pss),
    )
    pooled["peak_rss_mb"], pooled["peak_pss_mb"] = (
        round(pool_mem.peak_rss),
        round(pool_mem.peak_pss),
    )
    ratio = round(pooled["wall_s"] / serial["wall_s"], 3)
    share = round(serial["longest_task_s"] / serial["sum_task_s"], 3)
    out = {
        "trace": str(trace),
        "jobs": len(jobs),
        "nodes": a.nodes,
        "policies": names,
        "workers": a.workers,
        "cores": os.cpu_count(),
        "serial": serial,
        "pool": pooled,
        "identical": serial["hash"] == pooled["hash"],
        "wall_ratio": ratio,
        "longest_task_share": share,
        "load_average_before": [round(x, 2) for x in load0],
        "load_average_after": [round(x, 2) for x in load1],
        "goal": {"wall_ratio": 0.55, "longest_task_share": 0.15, "peak_mb": 1536},
        "note": "wall times on a shared machine: see the load averages",
    }
    print(json.dumps(out))
    print(
        f"{len(jobs)} jobs, {len(names)} policies, {serial['tasks']} replays: serial {serial['wall_s']:.1f} s, "
        f"{a.workers} workers {pooled['wall_s']:.1f} s ({ratio}x, goal 0.55); results "
        f"{'identical' if out['identical'] else 'DIFFER'}; longest task {serial['longest_task']} "
        f"{share:.0%} of serial (goal 15%); peak memory, all processes: {pooled['peak_rss_mb']} MB RSS / "
        f"{pooled['peak_pss_mb']} MB PSS (goal 1536); load average {load0[0]:.2f} -> {load1[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
