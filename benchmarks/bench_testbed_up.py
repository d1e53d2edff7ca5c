"""How long `testbed up` takes: cold starts (fresh state dir each time) and an idempotent re-up.

    python benchmarks/bench_testbed_up.py [--reps 5] [--nodes 4] [--gpus-per-node 8] [--accounting]

Prints one JSON object and one human line. The baseline is the issue's target (cold up <= 10 s);
``ratio_to_target`` = median cold up / 10 s, so <= 1.0 meets it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from slurm_dl.core.errors import SlurmDLError
from slurm_dl.testbed import Testbed

TARGET_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--accounting", action="store_true", help="with slurmdbd + a private MariaDB")
    args = ap.parse_args()

    cold: list[float] = []
    warm: list[float] = []
    down: list[float] = []
    try:
        for _ in range(args.reps):
            with tempfile.TemporaryDirectory(prefix="bench-tb-") as d:
                tb = Testbed(
                    Path(d),
                    nodes=args.nodes,
                    gpus_per_node=args.gpus_per_node,
                    accounting=args.accounting,
                )
                try:
                    t0 = time.perf_counter()
                    tb.up()
                    cold.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    tb.up()
                    warm.append(time.perf_counter() - t0)
                finally:
                    t0 = time.perf_counter()
                    tb.down()
                    down.append(time.perf_counter() - t0)
    except SlurmDLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    median = statistics.median(cold)
    result = {
        "benchmark": "testbed_up",
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "accounting": args.accounting,
        "reps": args.reps,
        "cold_up_s": {
            "median": round(median, 3),
            "min": round(min(cold), 3),
            "max": round(max(cold), 3),
            "runs": [round(x, 3) for x in cold],
        },
        "idempotent_up_s": {"median": round(statistics.median(warm), 4)},
        "down_s": {"median": round(statistics.median(down), 3)},
        "target_s": TARGET_S,
        "ratio_to_target": round(median / TARGET_S, 3),
        "meets_target": median <= TARGET_S,
    }
    print(json.dumps(result))
    print(
        f"testbed up ({args.nodes} nodes x {args.gpus_per_node} GPUs{', accounting' if args.accounting else ''}): cold median {median:.2f} s "
        f"(min {min(cold):.2f}, max {max(cold):.2f}, {args.reps} runs) = {median / TARGET_S:.2f} x the "
        f"{TARGET_S:.0f} s target; re-up {statistics.median(warm) * 1000:.0f} ms; down {statistics.median(down):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
