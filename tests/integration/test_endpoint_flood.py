"""1,000 idle TCP connections to each HTTP endpoint of the live daemons stall nothing.

A red-team finding: an ordinary user on a login node opened 1,000 idle connections to the
explain endpoint and every prioritizer cycle failed ("Too many open files"); the same flood on
the filter's metrics port exhausted the filter's descriptors and the shim let jobs through
unchecked. Here, on a private 4 x 8 testbed, the filter service (shim installed, metrics port on)
and ``prioritizer run`` (explain endpoint and metrics port on) run under a 1,024 open-files
limit, soft and hard (systemd's default soft limit; hard too, so the daemons cannot raise it and
the bound must hold by itself). Then 1,000 idle connections go to each of the three endpoints and
stay open while the test checks that (a) cycles keep completing at their interval, (b) the filter
tags and reshapes a job as usual, (c) every endpoint answers a normal request, and that each
daemon holds few descriptors. The cycle time (the daemon's own histogram) is printed for the
window before the flood and the window during it.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurm_dl.core.tags import parse_tag
from slurm_dl.slurm.munge import encode
from slurm_dl.testbed import job_fields
from polling import wait_until
from test_explain_endpoint import _config, free_port, munged  # noqa: F401 - munged is a fixture
from test_metrics_live import Proc, install_shim, scrape, total

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "slurm_dl.cli.main"]
NOFILE = 1024  # the daemons' open-files limit, soft and hard
FLOOD = 1000  # idle connections per endpoint
WINDOW_S = 9.0  # each measuring window: three cycles at the testbed's 3 s interval
CYCLES = "slurm_dl_prioritizer_cycles_total"
DURATION = "slurm_dl_prioritizer_cycle_duration_seconds"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def _room_for(n: int) -> None:
    """Let this process hold ``n`` more sockets (root may raise its hard limit, as CI runs)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 1024
    if soft >= want:
        return
    if hard != resource.RLIM_INFINITY and hard < want and os.geteuid() == 0:
        hard = want
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard)
    )


def _connect(port: int) -> socket.socket | None:
    s = socket.socket()
    s.settimeout(
        3.0
    )  # past the kernel's first SYN retry (1 s); a server that stops accepting times out
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.setblocking(False)  # so that looking for the server's close never waits
    return s


class Flood:
    """Keeps ``n`` idle connections open to each port, as a user's script would: opened one after
    another, a millisecond apart (faster, a server with a short listen backlog sees SYNs dropped
    and the flood would test the kernel's retries instead of the server), and every second each
    one the server closed is opened again."""

    def __init__(self, ports: list[int], n: int) -> None:
        self.ports, self.n = ports, n
        self.held: dict[int, list[socket.socket]] = {p: [] for p in ports}
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def fill(self, within_s: float = 10.0) -> None:
        """Open connections until each port has ``n``, giving each port at most ``within_s``."""
        for port, socks in self.held.items():
            end = time.monotonic() + within_s
            socks[:] = [s for s in socks if not _closed_by_peer(s)]
            while len(socks) < self.n and time.monotonic() < end:
                s = _connect(port)
                if s is not None:
                    socks.append(s)
                    self.opened += 1
                time.sleep(0.001)

    def start(self) -> "Flood":
        self.fill()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.fill(within_s=1.0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(15)
        for socks in self.held.values():
            for s in socks:
                s.close()
            socks.clear()


def _closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), time.monotonic() - started
    finally:
        conn.close()


def _window(port: int, procs: dict[str, Proc]) -> dict:
    """Cycles completed and their mean duration over WINDOW_S, from the daemon's own metrics, and
    the most descriptors each daemon held (sampled every half second)."""
    fds = {name: 0 for name in procs}
    before = scrape(port)
    end = time.monotonic() + WINDOW_S
    while time.monotonic() < end:
        for name, proc in procs.items():
            fds[name] = max(fds[name], _fds(proc))
        time.sleep(0.5)
    after = scrape(port)
    assert before and after, "the prioritizer's metrics endpoint did not answer"
    n = total(after, CYCLES, outcome="ok") - total(before, CYCLES, outcome="ok")
    spent = total(after, DURATION + "_sum") - total(before, DURATION + "_sum")
    return {
        "cycles": n,
        "mean_s": spent / n if n else float("nan"),
        "failed": total(after, CYCLES) - total(before, CYCLES) - n,
        "max_fds": fds,
    }


def _fds(proc: Proc) -> int:
    return len(os.listdir(f"/proc/{proc.proc.pid}/fd"))


def _optional_munged(request: pytest.FixtureRequest) -> str | None:
    try:
        return request.getfixturevalue("munged")
    except pytest.skip.Exception:
        return None


def _sbatch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sbatch", "--parsable", "--hold", *args],
        input="#!/bin/sh\nsleep 0\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _check_filter_decides(env: dict[str, str], jobs: list[int]) -> None:
    """(b): a job is tagged and reshaped as without the flood; an over-long one is refused."""
    out = _sbatch(env, "--gpus=16", "--time=60")
    assert out.returncode == 0, out.stderr
    jobs.append(int(out.stdout.strip().split(";")[0]))
    fields = job_fields(jobs[-1], env)
    assert fields.get("AdminComment", "").startswith("sdl1:"), fields
    assert fields["NumNodes"] in ("2", "2-2") and fields["TresPerNode"].endswith("gpu:8"), fields
    assert parse_tag(fields["AdminComment"]).shape == "2x8"
    refused = _sbatch(env, "--time=5000", "--gpus=16")
    assert refused.returncode != 0 and "--time=5000" in refused.stderr, refused.stderr


def _check_endpoints_answer(
    ports: dict[str, int], job: int, munge_socket: str | None
) -> dict[str, float]:
    """(c): every endpoint answers a normal request; returns how long each took."""
    took = {}
    for name in ("filter metrics", "prioritizer metrics"):
        status, body, took[name] = _get(ports[name], "/metrics")
        assert status == 200 and b"# TYPE" in body, (name, status)
    if munge_socket is not None:
        status, body, took["explain"] = _get(
            ports["explain"],
            f"/explain/{job}?live=0",
            {"Authorization": f"MUNGE {encode(munge_socket)}"},
        )
        assert status == 200 and json.loads(body)["job_id"] == job, body[:300]
    else:  # no munged here: the endpoint still answers, refusing the missing credential
        status, body, took["explain"] = _get(ports["explain"], f"/explain/{job}?live=0")
        assert status == 401 and "MUNGE" in json.loads(body)["error"]
    return took


def test_a_thousand_idle_connections_per_endpoint_stall_nothing(
    make_testbed, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    munge_socket = _optional_munged(request)
    tb = make_testbed(nodes=4, gpus_per_node=8, gpu_type="h100")
    tb.up()
    env = {**os.environ, **tb.env()}
    ports = {
        "explain": free_port(),
        "filter metrics": free_port(),
        "prioritizer metrics": free_port(),
    }
    cfg = _config(tmp_path, ports["explain"], munge_socket or "/nonexistent/munge.socket")
    sock = tmp_path / "filter.sock"
    filt = Proc(
        [
            *CLI,
            "filter",
            "serve",
            "--config",
            str(cfg),
            "--socket",
            str(sock),
            "--metrics-port",
            str(ports["filter metrics"]),
        ],
        env,
        tmp_path / "filter.log",
    )
    prio = Proc(
        [
            *CLI,
            "prioritizer",
            "run",
            "--init",
            "--config",
            str(cfg),
            "--db",
            f"sqlite:///{tmp_path / 'p.db'}",
            "--metrics-port",
            str(ports["prioritizer metrics"]),
            "--verbose",
        ],
        env,
        tmp_path / "prio.log",
    )
    jobs: list[int] = []
    flood: Flood | None = None
    try:
        for p in (filt, prio):
            p.proc = subprocess.Popen(
                p.argv,
                env=p.env,
                stdout=open(p.log, "a"),
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                preexec_fn=_limited,
            )
        install_shim(cfg, tb, sock, env)
        _check_filter_decides(env, jobs)
        wait_until(
            "a cycle that saw the job",
            lambda: (
                total(
                    scrape(ports["prioritizer metrics"]),
                    "slurm_dl_prioritizer_jobs",
                    state="pending",
                )
                >= 1
            ),
            60,
        )
        procs = {"filter": filt, "prioritizer": prio}
        quiet = _window(ports["prioritizer metrics"], procs)

        _room_for(len(ports) * FLOOD)
        started = time.monotonic()
        flood = Flood(list(ports.values()), FLOOD).start()
        opened_s = time.monotonic() - started
        fds = {name: _fds(proc) for name, proc in procs.items()}
        during = _check_endpoints_answer(ports, jobs[0], munge_socket)
        _check_filter_decides(env, jobs)
        flooded = _window(ports["prioritizer metrics"], procs)
        flood.stop()
        after = _check_endpoints_answer(ports, jobs[0], munge_socket)

        print(
            f"\nflood: {len(ports)} x {FLOOD} idle connections opened in {opened_s:.2f} s, kept open "
            f"({flood.opened} connections made in all); daemons' open files: before {quiet['max_fds']}, "
            f"right after {fds}, at most {flooded['max_fds']} during the window (limit {NOFILE})\n"
            f"cycles in {WINDOW_S:.0f} s: {quiet['cycles']:.0f} before, {flooded['cycles']:.0f} during; "
            f"mean cycle {quiet['mean_s'] * 1000:.1f} ms before, {flooded['mean_s'] * 1000:.1f} ms during\n"
            f"answer times during the flood (s): {during}; after: {after}; explain "
            f"{'with' if munge_socket else 'without'} a MUNGE credential"
        )
        interval = 3.0
        assert flooded["cycles"] >= WINDOW_S / interval - 1 and flooded["failed"] == 0, flooded
        assert max(fds.values()) < 200 and max(flooded["max_fds"].values()) < 200, (fds, flooded)
        for p in (filt, prio):
            assert p.proc.poll() is None, p.log.read_text()[-2000:]
            assert "Too many open files" not in p.log.read_text()
    finally:
        if flood is not None:
            flood.stop()
        prio.stop()
        filt.stop()
        for j in jobs:
            subprocess.run(["scancel", str(j)], env=env, capture_output=True)
