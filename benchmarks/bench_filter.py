"""Benchmark the job_submit filter.

1. sbatch cost: two private testbeds of the same shape, one without any job_submit plugin
   (the baseline) and one with the slurm-dl shim + a running filter service. Submissions alternate
   between them (baseline, filtered, baseline, …) so both see the same machine load. Reports the
   added time per submission (median of filtered minus median of baseline, and the median of the
   paired differences) and the throughput ratio (baseline total time / filtered total time).
   Every filtered job is checked to have been reshaped (the filter really ran).
2. Standalone service rate: the service in its own process pinned to one core, answering
   one-connection-per-request clients (as the shim does) from other threads; plus the pure
   rules' rate in this process.

Prints one JSON object and one human line. Usage (root, Slurm installed):
    python benchmarks/bench_filter.py [--submissions 1000] [--decisions 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_dl.cli.config_file import load_config  # noqa: E402
from slurm_dl.core.rules import FilterContext, decide  # noqa: E402
from slurm_dl.core.rules.request import NO_VAL  # noqa: E402
from slurm_dl.testbed import Testbed, job_fields  # noqa: E402

CONFIG = REPO / "site-configs" / "testbed.toml"
SCRIPT = "#!/bin/sh\ntrue\n"
ARGS = ["--parsable", "--hold", "--gpus=16", "-t", "10", "--output=/dev/null"]
JOB = {
    "user_name": "bench",
    "user_id": 1000,
    "tres_per_job": "gres:gpu:16",
    "time_limit": NO_VAL,
    "min_nodes": NO_VAL,
    "max_nodes": NO_VAL,
    "requeue": 65534,
    "req_switch": NO_VAL,
    "has_script": True,
}


def start_service(sock: Path, log: Path, cpu: int | None) -> subprocess.Popen:
    pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "filter",
            "serve",
            "--config",
            str(CONFIG),
            "--socket",
            str(sock),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        preexec_fn=pre,
    )
    for _ in range(400):
        if sock.exists():
            return proc
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"filter service did not start: {log.read_text()[-500:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def submit_timed(env: dict) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(["sbatch", *ARGS], input=SCRIPT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"sbatch failed: {out.stderr.strip()}")
    return dt, int(out.stdout.strip().split(";")[0])


def bench_sbatch(n: int, work: Path, baseline: str = "none") -> dict:
    # "none": the baseline cluster loads no job_submit plugin; "passthrough": it loads the
    # testbed's accept-everything job_submit.lua (isolates the cost of Slurm's Lua plugin itself).
    base = Testbed(
        work / "plain", nodes=4, gpus_per_node=8, job_submit_lua=(baseline == "passthrough")
    )
    filt = Testbed(work / "filtered", nodes=4, gpus_per_node=8)
    service = None
    try:
        base.up()
        filt.up()
        sock = work / "filter.sock"
        service = start_service(sock, work / "filter.log", None)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "slurm_dl.cli.main",
                "filter",
                "install",
                "--config",
                str(CONFIG),
                "--slurm-conf-dir",
                str(filt.conf_dir),
                "--socket",
                str(sock),
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        benv, fenv = base.env(), filt.env()
        for _ in range(20):  # warm up both (slurmctld loads the new shim on first use)
            submit_timed(benv)
            submit_timed(fenv)
        plain, filtered, ids = [], [], []
        for i in range(n):
            order = (
                [(benv, plain), (fenv, filtered)]
                if i % 2 == 0
                else [(fenv, filtered), (benv, plain)]
            )
            for env, sink in order:
                dt, job_id = submit_timed(env)
                sink.append(dt)
                if env is fenv:
                    ids.append(job_id)
        reshaped = sum(
            1
            for j in ids[:: max(1, n // 20)]
            if job_fields(j, fenv).get("TresPerNode") == "gres:gpu:8"
        )
        checked = len(ids[:: max(1, n // 20)])
    finally:
        if service is not None:
            stop(service)
        filt.down()
        base.down()
    paired = [f - p for f, p in zip(filtered, plain)]
    return {
        "baseline": baseline,
        "submissions_each": n,
        "median_ms_without_filter": statistics.median(plain) * 1000,
        "median_ms_with_filter": statistics.median(filtered) * 1000,
        "added_ms_median": (statistics.median(filtered) - statistics.median(plain)) * 1000,
        "added_ms_paired_median": statistics.median(paired) * 1000,
        "throughput_ratio": sum(plain) / sum(filtered),
        "reshaped_checked": f"{reshaped}/{checked}",
    }


def ask(path: str, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(payload)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("service closed the connection")
            buf += chunk
        return buf


def bench_service(n: int, work: Path, clients: int = 4) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    service_cpu = cpus[0]
    sock = work / "rate.sock"
    proc = start_service(sock, work / "rate.log", service_cpu)
    client_cpus = set(cpus[1:]) or {service_cpu}
    os.sched_setaffinity(0, client_cpus)
    payload = json.dumps({"v": 1, "submit_uid": 1000, "job": JOB}).encode() + b"\n"
    errors: list[str] = []
    try:
        for _ in range(200):
            ask(str(sock), payload)
        per = n // clients

        def worker() -> None:
            for _ in range(per):
                a = ask(str(sock), payload)
                if b'"accept"' not in a:
                    errors.append(a.decode()[:100])

        threads = [threading.Thread(target=worker) for _ in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
    finally:
        stop(proc)
        os.sched_setaffinity(0, set(cpus))
    cfg = load_config(CONFIG)
    t0 = time.perf_counter()
    for _ in range(n):
        decide(JOB, cfg, FilterContext(now=1.8e9))
    pure = time.perf_counter() - t0
    return {
        "service_decisions_per_s": per * clients / elapsed,
        "service_cpu": service_cpu,
        "client_threads": clients,
        "service_errors": len(errors),
        "pure_decisions_per_s": n / pure,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=1000, help="sbatch submissions per cluster")
    ap.add_argument("--decisions", type=int, default=20000, help="service requests")
    ap.add_argument("--skip-sbatch", action="store_true", help="only the standalone service rate")
    ap.add_argument(
        "--baseline",
        choices=["none", "passthrough"],
        default="none",
        help="baseline cluster: no job_submit plugin, or an accept-everything job_submit.lua",
    )
    a = ap.parse_args()
    result: dict = {
        "targets": {
            "added_ms_median_max": 1.0,
            "throughput_ratio_min": 0.85,
            "service_decisions_per_s_min": 2000,
        }
    }
    with tempfile.TemporaryDirectory(prefix="bench-filter-") as tmp:
        work = Path(tmp)
        result.update(bench_service(a.decisions, work))
        if not a.skip_sbatch:
            result.update(bench_sbatch(a.submissions, work, a.baseline))
    result["service_rate_vs_target"] = result["service_decisions_per_s"] / 2000
    print(json.dumps(result, indent=1))
    line = f"filter: service {result['service_decisions_per_s']:.0f} decisions/s on one core (target 2000)"
    if "added_ms_median" in result:
        line += (
            f"; sbatch {result['median_ms_without_filter']:.2f} -> {result['median_ms_with_filter']:.2f} ms, "
            f"added {result['added_ms_median']:.2f} ms median (paired {result['added_ms_paired_median']:.2f}; "
            f"target <= 1), throughput ratio {result['throughput_ratio']:.3f} (target >= 0.85) over "
            f"{result['submissions_each']} submissions each (baseline: {result['baseline']} job_submit), "
            f"reshaped {result['reshaped_checked']}"
        )
    print(line)


if __name__ == "__main__":
    main()
