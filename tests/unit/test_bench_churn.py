"""The churn benchmark's queue turns over as it says: jobs end, start and arrive each cycle,
and the ledger closes every job that ended (the memory figures are for the benchmark to print)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_queue_turns_over_and_every_ended_job_reaches_the_history(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_prioritizer_churn.py"),
            "--pending",
            "300",
            "--running",
            "60",
            "--churn",
            "10",
            "--cycles",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.splitlines()[0])
    assert r["failed_cycles"] == 0 and r["jobs_ended"] == 200
    first, last = r["samples"][0], r["samples"][-1]
    assert last["cycle"] == 20 and last["history"] - first["history"] == 10 * (20 - first["cycle"])
    assert last["rss_mib"] > 0 and r["rss_growth_ratio"] > 0
    assert "20 cycles, 10 jobs turning over each, 0 failed" in out.stdout.splitlines()[1]
