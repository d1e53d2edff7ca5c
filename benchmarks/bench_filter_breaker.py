"""Benchmark the shim's circuit breaker with the filter service hung (SIGSTOP).

On a private testbed with the slurm-dl shim installed and the filter service running, the
service is stopped with SIGSTOP (its socket still accepts connections, nobody answers: every ask
waits for the shim's timeout under slurmctld's job write lock). Then N sbatch run at once while
another thread keeps running `scontrol update` on a held job. Reported: each sbatch's latency
in three bursts: a reference with the service answering, then (service stopped) one that starts
with the breaker closed (its first asks time out and open it), and one issued while it is open; per burst the median and longest latency, the longest
`scontrol update` during it, wall and CPU time.
With --no-breaker the shim is installed with a breaker that never opens (asks after a failure
still use the shim's shortened timeout; the shim before the breaker waited the full timeout every
time: 30 x 200 ms, about 6 s, measured with this script at commit e5a09e1).

Prints one JSON object. Usage (root, Slurm installed; the machine may be shared: figures are
under whatever load it has):
    python benchmarks/bench_filter_breaker.py [--jobs 30] [--no-breaker]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobsubmit.install import SHIM_TEMPLATE, render_shim, slurm_user_uids  # noqa: E402
from slurm_dl.cli.config_file import load_config  # noqa: E402
from slurm_dl.testbed import Testbed  # noqa: E402

CONFIG = REPO / "site-configs" / "testbed.toml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--no-breaker", action="store_true")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    cfg = load_config(CONFIG)
    root = Path(a.dir or tempfile.mkdtemp(prefix="sdl-breaker-"))
    tb = Testbed(root / "tb", nodes=2, gpus_per_node=8, gpu_type="h100")
    sock = root / "filter.sock"
    svc = None
    try:
        tb.up()
        env = {**os.environ, **tb.env()}
        svc = subprocess.Popen(
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
            stderr=(root / "filter.log").open("w"),
        )
        for _ in range(400):
            if sock.exists():
                break
            time.sleep(0.05)
        f = cfg.filter
        shim = render_shim(
            SHIM_TEMPLATE.read_text(),
            str(sock),
            f.timeout_ms,
            f.failure_mode,
            slurm_user_uids((tb.conf_dir / "slurm.conf").read_text()),
            class_max_minutes={c.value: cc.max_time_minutes for c, cc in cfg.classes.items()},
            breaker_failures=1000 if a.no_breaker else f.breaker_failures,
            breaker_cooldown_s=f.breaker_cooldown_seconds,
        )
        (tb.conf_dir / "job_submit.lua").write_text(shim)
        time.sleep(1.1)  # a new mtime: slurmctld reloads the script on the next call
        sb = [
            "sbatch",
            "--parsable",
            "--hold",
            "-o",
            "/dev/null",
            "--gres=gpu:1",
            "-t",
            "5",
            "--wrap",
            "true",
        ]
        warm = subprocess.run(
            sb, env=env, capture_output=True, text=True, check=True
        )  # loads the new shim
        target = warm.stdout.strip().split(";")[0]
        stalls: list[float] = []
        stop = threading.Event()

        def updater() -> None:
            i = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                subprocess.run(
                    ["scontrol", "update", f"JobId={target}", f"Comment=bench{i}"],
                    env=env,
                    capture_output=True,
                )
                stalls.append(time.perf_counter() - t0)
                i += 1

        lock = threading.Lock()

        def burst() -> tuple[list[float], float, float]:
            lat: list[float] = []

            def one() -> None:
                t0 = time.perf_counter()
                out = subprocess.run(sb, env=env, capture_output=True, text=True)
                t1 = time.perf_counter()
                assert out.returncode == 0, out.stderr
                with lock:
                    lat.append(t1 - t0)

            cpu0, w0 = time.process_time(), time.perf_counter()
            threads = [threading.Thread(target=one) for _ in range(a.jobs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sorted(lat), time.perf_counter() - w0, time.process_time() - cpu0

        up = threading.Thread(target=updater)
        up.start()
        time.sleep(0.3)
        healthy, wall0, _ = burst()  # reference: the same burst with the service answering
        longest0 = max(stalls)
        os.kill(svc.pid, signal.SIGSTOP)
        time.sleep(0.3)
        n_stop = len(stalls)
        first, wall1, cpu1 = (
            burst()
        )  # the breaker is closed when it starts; the first asks time out
        n1 = len(stalls)
        longest1 = max(stalls[n_stop:])
        second, wall2, cpu2 = burst()  # issued while the breaker is open (cool-down not over)
        longest2 = max(stalls[n1:]) if len(stalls) > n1 else None
        time.sleep(0.3)
        stop.set()
        up.join()
        os.kill(svc.pid, signal.SIGCONT)
        log = (tb.state_dir / "log" / "slurmctld.log").read_text()
        ms = lambda v: round(v * 1000, 1)  # noqa: E731
        print(
            json.dumps(
                {
                    "jobs_per_burst": a.jobs,
                    "breaker": not a.no_breaker,
                    "timeout_ms": f.timeout_ms,
                    "breaker_failures": f.breaker_failures,
                    "cooldown_s": f.breaker_cooldown_seconds,
                    "healthy_median_ms": ms(statistics.median(healthy)),
                    "healthy_max_ms": ms(max(healthy)),
                    "healthy_scontrol_longest_ms": ms(longest0),
                    "burst1_median_ms": ms(statistics.median(first)),
                    "burst1_max_ms": ms(max(first)),
                    "burst1_wall_s": round(wall1, 3),
                    "burst1_bench_cpu_s": round(cpu1, 3),
                    "burst1_scontrol_longest_ms": ms(longest1),
                    "burst2_median_ms": ms(statistics.median(second)),
                    "burst2_max_ms": ms(max(second)),
                    "burst2_wall_s": round(wall2, 3),
                    "burst2_bench_cpu_s": round(cpu2, 3),
                    "burst2_scontrol_longest_ms": ms(longest2) if longest2 is not None else None,
                    "scontrol_updates": len(stalls),
                    "scontrol_median_ms": ms(statistics.median(stalls)),
                    "breaker_opened": "not asking the service" in log,
                }
            )
        )
    finally:
        if svc is not None:
            try:
                os.kill(svc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            svc.terminate()
            svc.wait(10)
        tb.down()


if __name__ == "__main__":
    main()
