"""slurm-dl's services beside a live testbed: `testbed up` on a half-dead cluster (slurmctld
killed) restarts Slurm, leaves the filter service and the prioritizer running and says so;
`testbed status` reports them; `testbed down` stops them and says so."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from slurm_dl.testbed import process

TEST_SLURM = os.environ.get("SLURM_DL_TEST_SLURM") or None  # as conftest.py reads it
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "slurm_dl.cli.main"]


def ask_filter(sock: Path) -> dict:
    """One request to the filter service over its socket, as the Lua shim sends it."""
    job = {"tres_per_job": "gres:gpu:1", "time_limit": 30, "user_name": "tester"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock))
        s.sendall(json.dumps({"v": 1, "submit_uid": 0, "job": job}).encode() + b"\n")
        return json.loads(s.makefile("rb").readline())


def wait_for(what: str, check, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"{what} did not happen within {timeout:.0f} s"
        time.sleep(0.1)


def run_testbed_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "testbed", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_up_on_a_half_dead_cluster_keeps_the_filter_and_the_prioritizer(make_testbed) -> None:
    tb = make_testbed()
    tb.up()
    site = tb.write_site_config(ROOT / "site-configs" / "testbed.toml")
    sock = tb.state_dir / "filter.sock"
    env = {**tb.env(), process.MARKER: str(tb.state_dir)}  # as scripts/quickstart.sh starts them
    logs = {n: open(tb.state_dir / f"{n}.log", "wb") for n in ("filter", "prioritizer")}
    filt = subprocess.Popen(
        [*CLI, "filter", "serve", "--config", str(site), "--socket", str(sock)],
        env=env,
        stdout=logs["filter"],
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    prio = subprocess.Popen(
        [*CLI, "prioritizer", "run", "--init", "--config", str(site)],
        env=env,
        stdout=logs["prioritizer"],
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for("the filter socket", sock.exists)
        assert ask_filter(sock)["action"] == "accept"
        status = json.loads(run_testbed_cli("status", "--dir", str(tb.state_dir), "--json").stdout)
        assert status["up"] and status["services"] == {"filter": filt.pid, "prioritizer": prio.pid}
        text = run_testbed_cli("status", "--dir", str(tb.state_dir)).stdout
        assert f"filter service   running pid {filt.pid}" in text
        assert f"prioritizer      running pid {prio.pid}" in text

        ctld = tb.status().daemons["slurmctld"]
        assert ctld
        os.kill(ctld, signal.SIGKILL)
        wait_for("slurmctld to die", lambda: not process.alive(ctld))

        shape = [
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            *(["--slurm", TEST_SLURM] if TEST_SLURM else []),
        ]
        up = run_testbed_cli("up", "--dir", str(tb.state_dir), *shape)
        assert up.returncode == 0, up.stderr
        assert "slurmctld had stopped: restarted the Slurm daemons" in up.stdout
        assert (
            f"left running: filter service pid {filt.pid}, prioritizer pid {prio.pid}" in up.stdout
        )

        assert filt.poll() is None and prio.poll() is None
        assert ask_filter(sock)["action"] == "accept"  # the same service answers after the restart
        after = tb.status()
        assert after.up and after.daemons["slurmctld"] != ctld
        assert after.services == {"filter": filt.pid, "prioritizer": prio.pid}

        down = run_testbed_cli("down", "--dir", str(tb.state_dir))
        assert down.returncode == 0, down.stderr
        assert (
            f"among them filter service pid {filt.pid}, prioritizer pid {prio.pid}" in down.stdout
        )
        wait_for(
            "the services to stop", lambda: filt.poll() is not None and prio.poll() is not None, 30
        )
        assert process.marked_processes(tb.state_dir) == []
        gone = json.loads(run_testbed_cli("status", "--dir", str(tb.state_dir), "--json").stdout)
        assert gone["services"] == {"filter": None, "prioritizer": None}
    finally:
        for p in (filt, prio):
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs.values():
            f.close()
