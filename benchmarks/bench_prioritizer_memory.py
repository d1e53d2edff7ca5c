"""Memory of the prioritizer over 1,000 cycles against a live testbed (no growth expected).

    python benchmarks/bench_prioritizer_memory.py [--cycles 1000] [--pending 50] [--config site-configs/testbed.toml]

Starts a private 2 x 8 testbed, fills it with one non-preemptible job, keeps ``--pending`` jobs
waiting and churns them (every 50 cycles one is cancelled and a new one submitted, so the ledger
closes and forgets jobs), and runs the cycle back to back with the real CLI backend and a temp
SQLite store. Measures the process's RSS and Python-heap (tracemalloc) after cycle 100 (the
baseline, once caches are warm) and after the last cycle: ``ratio`` = end / baseline (≈ 1.0 = no
growth); as the heap saws with the GC, the peak of the second half of a series taken every 100
cycles over the peak of the first half tells growth from warm-up. Prints one JSON object and one
human line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.slurm import CliBackend
from slurm_dl.store import Store
from slurm_dl.testbed import Testbed

ROOT = Path(__file__).resolve().parents[1]
BASELINE_CYCLE = 100


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def peak_ratio(series: list[tuple[int, int, int]]) -> float | None:
    half = len(series) // 2
    first, second = [h for _, _, h in series[:half]], [h for _, _, h in series[half:]]
    if not first or not second:
        return None
    return round(max(second) / max(first), 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=50)
    ap.add_argument("--config", default=str(ROOT / "site-configs" / "testbed.toml"))
    args = ap.parse_args()
    if args.cycles <= BASELINE_CYCLE:
        ap.error(f"--cycles must be more than {BASELINE_CYCLE}")
    cfg = load_config(args.config)
    with tempfile.TemporaryDirectory(prefix="bench-prio-mem-") as d:
        tb = Testbed(Path(d) / "tb", nodes=2, gpus_per_node=8, gpu_type="h100")
        try:
            tb.up()
            env = {**os.environ, **tb.env()}

            def sbatch(*a: str) -> str:
                out = subprocess.run(
                    ["sbatch", "--parsable", "-o", "/dev/null", *a],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                return out.strip().split(";")[0]

            blocker = sbatch("-N2", "--gres=gpu:8", "--time=60", "--wrap", "sleep 3600")
            subprocess.run(
                [
                    "scontrol",
                    "update",
                    f"jobid={blocker}",
                    "AdminComment=sdl1:class=serve;ckpt=0;gpus=16;shape=2x8",
                ],
                env=env,
                check=True,
            )
            waiting = [
                sbatch("--gres=gpu:1", "--time=10", f"--account=acct{i % 5}", "--wrap", "true")
                for i in range(args.pending)
            ]
            prio = Prioritizer(cfg, CliBackend(tb.env()), Store(f"sqlite:///{Path(d) / 'prio.db'}"))
            tracemalloc.start()
            base = None
            series: list[tuple[int, int, int]] = []
            t0 = time.perf_counter()
            for c in range(1, args.cycles + 1):
                prio.run_cycle()
                if c % 50 == 0:
                    subprocess.run(["scancel", waiting.pop(0)], env=env, check=True)
                    waiting.append(
                        sbatch(
                            "--gres=gpu:1", "--time=10", f"--account=acct{c % 5}", "--wrap", "true"
                        )
                    )
                if c == BASELINE_CYCLE:
                    base = (rss_kib(), tracemalloc.get_traced_memory()[0])
                if c % 100 == 0:
                    series.append((c, rss_kib(), tracemalloc.get_traced_memory()[0]))
            wall = time.perf_counter() - t0
            end = (rss_kib(), tracemalloc.get_traced_memory()[0])
            ledger_jobs = len(prio.ledger.jobs)
            tracemalloc.stop()
        finally:
            tb.down()
    assert base is not None
    result = {
        "benchmark": "prioritizer_memory",
        "cycles": args.cycles,
        "pending": args.pending,
        "baseline_cycle": BASELINE_CYCLE,
        "rss_kib_baseline": base[0],
        "rss_kib_end": end[0],
        "rss_ratio": round(end[0] / base[0], 3),
        "heap_bytes_baseline": base[1],
        "heap_bytes_end": end[1],
        "heap_ratio": round(end[1] / base[1], 3) if base[1] else None,
        # The heap saws up and down with the GC and SQLAlchemy's caches; growth shows as the
        # second half's peak above the first half's.
        "heap_peak_ratio_second_to_first_half": peak_ratio(series),
        "series_cycle_rss_kib_heap_bytes": series,
        "ledger_jobs_end": ledger_jobs,
        "seconds_per_cycle": round(wall / args.cycles, 4),
    }
    print(json.dumps(result))
    print(
        f"{args.cycles} cycles with {args.pending} pending jobs: RSS {base[0] / 1024:.1f} MiB at cycle {BASELINE_CYCLE} "
        f"-> {end[0] / 1024:.1f} MiB (ratio {result['rss_ratio']}), Python heap {base[1] / 1024:.0f} KiB -> "
        f"{end[1] / 1024:.0f} KiB (ratio {result['heap_ratio']}; peak of the 2nd half / 1st half "
        f"{result['heap_peak_ratio_second_to_first_half']}); {wall / args.cycles * 1000:.0f} ms per cycle"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
