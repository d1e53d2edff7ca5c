"""CliBackend on a testbed it starts itself: a snapshot with N pending jobs (default ``squeue -O``
reader, and the ``squeue --json`` reader for comparison), and SiteFactor
updates for N jobs over <= 64 values, grouped (set_site_factor) vs one scontrol process per job.

    python benchmarks/bench_backend.py [--jobs 5000] [--values 64] [--reps 3] [--submitters 4]

How the jobs are made: N separate ``sbatch --begin=now+7days`` submissions (a pool of
``--submitters`` threads), so squeue really lists N job records. An ``--array=0-4999`` would be
one record in squeue until its tasks split off, which would flatter the snapshot.
The job_submit shim is left out of this testbed: the submissions measure nothing here.

Prints one JSON object and one human line. Targets: snapshot <= 2 s; grouped SiteFactor
updates >= 8x faster than one scontrol process per job, both measured in this same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurm_dl.core.errors import SlurmDLError
from slurm_dl.slurm import CliBackend
from slurm_dl.testbed import Testbed

SNAPSHOT_TARGET_S = 2.0
RATIO_TARGET = 8.0
SCRIPT = "#!/bin/bash\nsleep 60\n"


def submit_many(backend: CliBackend, n: int, workers: int, eligible: bool = False) -> list[int]:
    args = ["-t", "10", "--gpus=1", "-o", "/dev/null", "-J", "bench"]
    if not eligible:
        args.insert(0, "--begin=now+7days")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sorted(pool.map(lambda _: backend.submit(SCRIPT, args), range(n)))


def per_job_scontrol(env: dict[str, str], factors: dict[int, int]) -> None:
    """The baseline: one ``scontrol update jobid=N SiteFactor=V`` process per job."""
    for job_id, value in factors.items():
        subprocess.run(
            ["scontrol", "update", f"jobid={job_id}", f"SiteFactor={value}"],
            env=env,
            check=True,
            capture_output=True,
        )


def priorities_match(backend: CliBackend, factors: dict[int, int], base: dict[int, int]) -> int:
    """How many jobs' priority is not base + factor (0 means every update landed)."""
    now = {j.job_id: j.priority for j in backend.jobs()}
    return sum(1 for jid, v in factors.items() if now.get(jid) != base[jid] + v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--values", type=int, default=64, help="distinct SiteFactor values (<= 64)")
    ap.add_argument("--reps", type=int, default=3, help="snapshot repetitions")
    ap.add_argument("--submitters", type=int, default=4, help="parallel sbatch threads")
    ap.add_argument(
        "--eligible",
        action="store_true",
        help="fill every GPU first and submit eligible jobs (Reason=Resources/Priority: sprio "
        "lists them and slurmctld schedules over them) instead of --begin=now+7days",
    )
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-backend-") as d:
        tb = Testbed(Path(d), nodes=4, gpus_per_node=8, gpu_type="h100", job_submit_lua=False)
        try:
            tb.up()
            env = tb.env()
            backend = CliBackend(env, timeout=120)

            if args.eligible:
                fillers = [
                    backend.submit(
                        SCRIPT.replace("60", "3600"),
                        ["-N1", "--gpus-per-node=8", "-t", "120", "-o", "/dev/null"],
                    )
                    for _ in range(4)
                ]
                while not all(j.state.active for j in backend.jobs() if j.job_id in fillers):
                    time.sleep(0.2)
            t0 = time.perf_counter()
            ids = submit_many(backend, args.jobs, args.submitters, args.eligible)
            submit_s = time.perf_counter() - t0

            json_backend = CliBackend(env, timeout=120, job_reader="json")
            snaps, snaps_json, squeue_only = [], [], []
            snap = None
            for _ in range(args.reps):
                t0 = time.perf_counter()
                snap = backend.snapshot()
                snaps.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                backend.jobs()
                squeue_only.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                snap_json = json_backend.snapshot()
                snaps_json.append(time.perf_counter() - t0)
            assert len(snap_json.jobs) == len(snap.jobs)
            assert snap is not None
            pending_seen = sum(1 for j in snap.pending if j.job_id in set(ids))

            base = {j.job_id: j.priority for j in backend.jobs()}
            baseline_factors = {jid: 1 + (i % args.values) for i, jid in enumerate(ids)}
            grouped_factors = {jid: 1001 + (i % args.values) for i, jid in enumerate(ids)}

            t0 = time.perf_counter()
            per_job_scontrol(env, baseline_factors)
            baseline_s = time.perf_counter() - t0
            baseline_wrong = priorities_match(backend, baseline_factors, base)

            t0 = time.perf_counter()
            result = backend.set_site_factor(grouped_factors)
            grouped_s = time.perf_counter() - t0
            grouped_wrong = priorities_match(backend, grouped_factors, base)
        except SlurmDLError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        finally:
            tb.down()

    snap_median = statistics.median(snaps)
    ratio = baseline_s / grouped_s if grouped_s > 0 else float("inf")
    out = {
        "benchmark": "backend_cli",
        "jobs": args.jobs,
        "pending_kind": "eligible (GPUs full)" if args.eligible else "BeginTime (+7 days)",
        "pending_in_snapshot": pending_seen,
        "submit_s": round(submit_s, 3),
        "snapshot_s": [round(s, 3) for s in snaps],
        "snapshot_median_s": round(snap_median, 3),
        "jobs_read_median_s": round(statistics.median(squeue_only), 3),
        "snapshot_json_reader_s": [round(s, 3) for s in snaps_json],
        "snapshot_json_reader_median_s": round(statistics.median(snaps_json), 3),
        "snapshot_target_s": SNAPSHOT_TARGET_S,
        "snapshot_meets_target": snap_median <= SNAPSHOT_TARGET_S,
        "site_factor_values": args.values,
        "per_job_scontrol_s": round(baseline_s, 3),
        "per_job_scontrol_jobs_per_s": round(args.jobs / baseline_s, 1),
        "grouped_s": round(grouped_s, 3),
        "grouped_calls": result.calls,
        "grouped_jobs_per_s": round(args.jobs / grouped_s, 1),
        "grouped_speedup": round(ratio, 2),
        "speedup_target": RATIO_TARGET,
        "speedup_meets_target": ratio >= RATIO_TARGET,
        "priorities_wrong_after_baseline": baseline_wrong,
        "priorities_wrong_after_grouped": grouped_wrong,
    }
    print(json.dumps(out))
    print(
        f"snapshot of {pending_seen} pending jobs: {snap_median:.3f} s with squeue -O "
        f"({statistics.median(snaps_json):.3f} s with squeue --json; target <= {SNAPSHOT_TARGET_S} s); "
        f"SiteFactor for {args.jobs} jobs over {args.values} values: {grouped_s:.3f} s in {result.calls} scontrol "
        f"calls vs {baseline_s:.2f} s one process per job = {ratio:.1f}x (target >= {RATIO_TARGET}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
