"""Both Prometheus endpoints scraped live (urllib) on a real Slurm while jobs run.

A private one-node testbed with the filter (shim installed) and the prioritizer, each started as
its own process with ``--metrics-port``: sbatch moves the filter's decision counters and its
latency histogram; a full node and a waiting job move the prioritizer's job gauges, SiteFactor
pushes and preemption counters; with the filter service stopped a submission fails open in the
shim, which reports it to the restarted service.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from slurm_dl.testbed import submit
from slurm_dl.testbed.client import job_fields
from polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "site-configs" / "testbed.toml"

VICTIM = """#!/bin/bash
trap 'echo USR2' USR2
while true; do sleep 1 & wait $!; done
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


class Proc:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv, self.env, self.log = argv, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Proc":
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=open(self.log, "a"), stderr=subprocess.STDOUT, cwd=ROOT
        )
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, as systemd stops a daemon; killed if it has not exited 20 s later."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def install_shim(config: Path, tb, sock: Path, env: dict[str, str]) -> None:
    """Once the filter service listens on ``sock``, install its shim on testbed ``tb``."""
    wait_until("the filter socket", sock.exists, 30, 0.1)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "filter",
            "install",
            "--config",
            str(config),
            "--slurm-conf-dir",
            str(tb.conf_dir),
            "--socket",
            str(sock),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    time.sleep(1.1)  # slurmctld re-reads job_submit.lua when its mtime changes


def sbatch(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sbatch", "--parsable", *args],
        input="#!/bin/bash\nsleep 2\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_both_endpoints_move_while_jobs_run(make_testbed, tmp_path: Path) -> None:
    tb = make_testbed(nodes=1, gpus_per_node=8)
    tb.up()
    env = {**os.environ, **tb.env()}
    sock = tmp_path / "filter.sock"
    fport, pport = free_port(), free_port()
    cli = [sys.executable, "-m", "slurm_dl.cli.main"]
    filt = Proc(
        [
            *cli,
            "filter",
            "serve",
            "--config",
            str(CONFIG),
            "--socket",
            str(sock),
            "--metrics-port",
            str(fport),
            "--log-format",
            "json",
        ],
        env,
        tmp_path / "filter.log",
    ).start()
    prio = Proc(
        [
            *cli,
            "prioritizer",
            "run",
            "--init",
            "--config",
            str(CONFIG),
            "--db",
            f"sqlite:///{tmp_path / 'p.db'}",
            "--metrics-port",
            str(pport),
            "--verbose",
        ],
        env,
        tmp_path / "prio.log",
    )
    jobs: list[int] = []
    try:
        install_shim(CONFIG, tb, sock, env)
        before = scrape(fport)
        assert total(before, "slurm_dl_filter_decisions_total") == 0
        refused = sbatch(env, "--gres=gpu:nosuchgpu:1", "-t", "5")
        assert refused.returncode != 0 and "nosuchgpu" in refused.stderr
        victim = submit(
            VICTIM,
            env,
            [
                "--requeue",
                "--comment=dl:ckpt=1",
                "--gres=gpu:8",
                "--time=20",
                f"--output={tmp_path / 'victim.out'}",
            ],
        )
        jobs.append(victim)
        after = scrape(fport)
        assert total(after, "slurm_dl_filter_decisions_total", outcome="reject") == 1
        assert total(after, "slurm_dl_filter_decisions_total", outcome="accept") == 1
        assert total(after, "slurm_dl_filter_decision_seconds_count") == 2
        assert total(after, "slurm_dl_filter_rejections_total") == 1

        wait_until(
            "the full-node job to run",
            lambda: job_fields(victim, env).get("JobState") == "RUNNING",
            60,
        )
        prio.start()
        first = wait_until(
            "the prioritizer's first cycle",
            lambda: (
                (s := scrape(pport))
                and total(s, "slurm_dl_prioritizer_cycles_total", outcome="ok") >= 1
                and s
            ),
            60,
        )
        assert total(first, "slurm_dl_prioritizer_jobs", state="running") == 1
        assert total(first, "slurm_dl_prioritizer_last_success_timestamp_seconds") > 0
        time.sleep(16)  # past the testbed config's 15 s minimum runtime
        short = submit(
            "#!/bin/bash\nsleep 2\n",
            env,
            ["--gres=gpu:1", "--time=5", f"--output={tmp_path / 'short.out'}"],
        )
        jobs.append(short)
        moved = wait_until(
            "a preemption in the prioritizer's metrics",
            lambda: (
                (s := scrape(pport))
                and total(s, "slurm_dl_prioritizer_preemptions_total", outcome="requeued") >= 1
                and s
            ),
            120,
        )
        assert total(moved, "slurm_dl_prioritizer_preemptions_total", outcome="signalled") >= 1
        assert total(moved, "slurm_dl_prioritizer_site_factor_pushes_total") >= 1
        assert total(moved, "slurm_dl_prioritizer_cycles_total", outcome="ok") > total(
            first, "slurm_dl_prioritizer_cycles_total", outcome="ok"
        )
        assert total(moved, "slurm_dl_prioritizer_last_success_timestamp_seconds") > total(
            first, "slurm_dl_prioritizer_last_success_timestamp_seconds"
        )
        assert total(moved, "slurm_dl_prioritizer_cycle_duration_seconds_count") >= 2
        assert total(moved, "slurm_dl_prioritizer_account_usage_gpu_seconds") > 0

        filt.stop()  # the shim fails open while the service is down ...
        assert not sock.exists()
        open_job = sbatch(env, "--gres=gpu:1", "-t", "5", "--hold")
        assert open_job.returncode == 0, open_job.stderr
        jobs.append(int(open_job.stdout.strip().split(";")[0]))
        filt.start()  # ... and reports it with the first request the restarted service answers
        wait_until("the filter socket again", sock.exists, 30, 0.1)
        again = sbatch(env, "--gres=gpu:1", "-t", "5", "--hold")
        assert again.returncode == 0, again.stderr
        jobs.append(int(again.stdout.strip().split(";")[0]))
        restarted = scrape(fport)
        assert total(restarted, "slurm_dl_filter_shim_failures_total", failure_mode="accept") == 1
        assert total(restarted, "slurm_dl_filter_decisions_total", outcome="accept") == 1
    finally:
        prio.stop()
        filt.stop()
        for j in jobs:
            subprocess.run(["scancel", str(j)], env=env, capture_output=True)
    assert '"daemon": "slurm-dl-filter"' in (tmp_path / "filter.log").read_text()
