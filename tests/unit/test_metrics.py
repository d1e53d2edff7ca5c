"""Prometheus metrics of the prioritizer and the filter service, read back over real HTTP."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobsubmit.install import SHIM_TEMPLATE, render_shim
from jobsubmit.metrics import FilterMetrics
from jobsubmit.service import FilterService, open_server
from prioritizer import Prioritizer
from prioritizer.loop import Loop
from prioritizer.metrics import PrioritizerMetrics
from slurm_dl.cli.daemon_opts import JsonFormatter, setup_logging
from slurm_dl.cli.config_file import load_config
from slurm_dl.daemon.metrics_http import MetricsError, serve_metrics
from slurm_dl.store import Store

from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "site-configs" / "testbed.toml"


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def prio_metrics(tmp_path):
    config = load_config(CONFIG)
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01", account="vision")
    p = Prioritizer(config, c, Store(f"sqlite:///{tmp_path / 'p.db'}"))
    m = PrioritizerMetrics()
    server = serve_metrics(m.registry, 0, "127.0.0.1")
    yield c, p, m, server.port
    server.close()


def test_prioritizer_series_move_with_the_cycles(prio_metrics) -> None:
    c, p, m, port = prio_metrics
    loop = Loop(p, metrics=m)
    loop.tick()
    first = scrape(port)
    assert value(first, "slurm_dl_prioritizer_cycles_total", outcome="ok") == 1
    assert value(first, "slurm_dl_prioritizer_jobs", state="running", **{"class": "train"}) == 1
    assert value(first, "slurm_dl_prioritizer_last_success_timestamp_seconds") > 0
    assert value(first, "slurm_dl_prioritizer_cycle_duration_seconds_count") == 1
    assert ("slurm_dl_prioritizer_cycle_phase_seconds", (("phase", "explain"),)) in first
    assert value(first, "slurm_dl_prioritizer_ledger_save_seconds_count") == 1
    c.now += 30  # job 1 has run past the minimum runtime; a waiting job makes it a victim
    c.add(2, 1, account="nlp")
    loop.tick()
    second = scrape(port)
    assert value(second, "slurm_dl_prioritizer_cycles_total", outcome="ok") == 2
    assert value(second, "slurm_dl_prioritizer_jobs", state="pending", **{"class": "train"}) == 1
    assert value(second, "slurm_dl_prioritizer_site_factor_pushes_total") >= 1
    assert (
        value(
            second, "slurm_dl_prioritizer_preemptions_total", outcome="signalled", reason="priority"
        )
        == 1
    )
    assert value(
        second, "slurm_dl_prioritizer_account_usage_gpu_seconds", account="vision"
    ) == pytest.approx(240.0, rel=0.01)
    assert value(
        second, "slurm_dl_prioritizer_account_usage_fraction", account="vision"
    ) == pytest.approx(1.0)
    assert value(
        second, "slurm_dl_prioritizer_account_share_fraction", account="vision"
    ) == pytest.approx(1.0)
    c.now += 20  # grace over: requeued
    loop.tick()
    third = scrape(port)
    assert (
        value(
            third, "slurm_dl_prioritizer_preemptions_total", outcome="requeued", reason="priority"
        )
        == 1
    )
    c.down = True
    loop.backoff.resume_at = 0.0
    loop.tick()
    assert (
        value(scrape(port), "slurm_dl_prioritizer_cycles_total", outcome="slurm_unreachable") == 1
    )


def test_prioritizer_memory_series_follow_what_the_process_holds(prio_metrics) -> None:
    c, p, m, port = prio_metrics
    Loop(p, metrics=m).tick()  # the store is open: SQLite holds its cache
    before = scrape(port)
    blocks = value(before, "slurm_dl_prioritizer_python_allocated_blocks")
    assert blocks > 10_000
    kept = [object() for _ in range(50_000)]  # 50,000 live objects more
    grown = value(scrape(port), "slurm_dl_prioritizer_python_allocated_blocks") - blocks
    assert 45_000 < grown < 60_000
    del kept
    if ("slurm_dl_prioritizer_malloc_used_bytes", ()) in before:  # glibc 2.33+
        assert value(before, "slurm_dl_prioritizer_malloc_used_bytes") > 0
        assert value(before, "slurm_dl_prioritizer_malloc_free_bytes") >= 0
    if ("slurm_dl_prioritizer_sqlite_memory_bytes", ()) in before:  # the shared SQLite library
        assert value(before, "slurm_dl_prioritizer_sqlite_memory_bytes") > 0


def test_victims_planned_and_never_signalled_are_not_remembered_for_ever(monkeypatch) -> None:
    import prioritizer.metrics as pm
    from prioritizer.cycle import CycleReport

    monkeypatch.setattr(pm, "VICTIMS_KEPT", 5)
    m = PrioritizerMetrics()
    for cycle in range(1, 9):  # a new victim planned each cycle, none signalled
        m.observe(
            CycleReport(
                cycle=cycle,
                now=float(cycle),
                dry_run=False,
                planned=[{"need": 100, "victims": [cycle, 1], "reason": "waits"}],
            )
        )
    assert list(m._victim_reason) == [
        5,
        6,
        7,
        8,
        1,
    ]  # the oldest plans gone; 1, planned each cycle, kept
    m.observe(CycleReport(cycle=9, now=9.0, dry_run=False, signalled=[1]))
    assert (
        value(
            _samples(m),
            "slurm_dl_prioritizer_preemptions_total",
            outcome="signalled",
            reason="priority",
        )
        == 1
    )


def _samples(m: PrioritizerMetrics) -> dict:
    from prometheus_client import generate_latest

    out = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_filter_decisions_latency_busy_and_shim_reports(tmp_path) -> None:
    service = FilterService(CONFIG, metrics=FilterMetrics())
    server = serve_metrics(service.metrics.registry, 0, "127.0.0.1")
    try:
        ok = {"v": 1, "job": {"tres_per_node": "gres:gpu:1", "time_limit": 30, "user_name": "a"}}
        bad = {
            "v": 1,
            "job": {"tres_per_node": "gres:gpu:nosuch:1", "user_name": "a"},
            "shim_failures": 3,
            "failure_mode": "accept",
        }
        service.handle_line(json.dumps(ok).encode())
        service.handle_line(json.dumps(bad).encode())
        service.handle_line(b"not json")
        s = scrape(server.port)
    finally:
        server.close()
    assert value(s, "slurm_dl_filter_decisions_total", outcome="accept", **{"class": "train"}) == 1
    assert (
        sum(
            v
            for (n, lab), v in s.items()
            if n == "slurm_dl_filter_decisions_total" and ("outcome", "reject") in lab
        )
        == 1
    )
    assert value(s, "slurm_dl_filter_decisions_total", outcome="error", **{"class": "-"}) == 1
    assert value(s, "slurm_dl_filter_decision_seconds_count") == 2
    assert value(s, "slurm_dl_filter_shim_failures_total", failure_mode="accept") == 3
    assert any(n == "slurm_dl_filter_rejections_total" and v == 1 for (n, _), v in s.items())


HARNESS = r"""
local shim_path, hidden, sock = arg[1], arg[2], arg[3]
slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end }
dofile(shim_path)
local job = { user_name = "alice", user_id = 1000, tres_per_node = "gres:gpu:1", time_limit = 30 }
local a = slurm_job_submit(job, {}, 1000)       -- no service yet: fails open
local b = slurm_job_submit(job, {}, 1000)       -- again
assert(os.rename(hidden, sock))                 -- the service appears
local c = slurm_job_submit(job, {}, 1000)       -- answered; reports the two failures
local d = slurm_job_submit(job, {}, 1000)       -- answered; nothing left to report
print(a, b, c, d)
"""


@pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 is not installed")
def test_the_shim_reports_its_failures_with_its_next_request(tmp_path) -> None:
    probe = subprocess.run(
        ["lua5.1", "-e", 'require "socket.unix"; require "cjson"'], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("lua-socket or lua-cjson is missing for lua5.1")
    hidden, sock = tmp_path / "hidden.sock", tmp_path / "f.sock"
    service = FilterService(CONFIG, metrics=FilterMetrics())
    server = open_server(service, hidden)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        shim = tmp_path / "job_submit.lua"
        shim.write_text(render_shim(SHIM_TEMPLATE.read_text(), str(sock), 200, "accept"))
        harness = tmp_path / "h.lua"
        harness.write_text(HARNESS)
        out = subprocess.run(
            ["lua5.1", str(harness), str(shim), str(hidden), str(sock)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["0", "0", "0", "0"]
    finally:
        server.shutdown()
        server.server_close()
    fails = service.metrics.shim_failures.labels("accept")._value.get()
    assert fails == 2
    assert service.decisions == 2


def test_metrics_port_in_use_is_one_error(prio_metrics) -> None:
    *_, port = prio_metrics
    with pytest.raises(MetricsError, match=f"127.0.0.1:{port}: cannot listen"):
        serve_metrics(PrioritizerMetrics().registry, port, "127.0.0.1")


def test_json_log_lines(capsys) -> None:
    setup_logging("slurm-dl-test", "debug", "json")
    try:
        logging.getLogger("slurm_dl.x").debug("hello %s", "there")
        line = capsys.readouterr().err.strip().splitlines()[-1]
        rec = json.loads(line)
        assert (
            rec["msg"] == "hello there"
            and rec["level"] == "debug"
            and rec["daemon"] == "slurm-dl-test"
        )
        assert rec["logger"] == "slurm_dl.x" and rec["ts"].endswith("+00:00")
        assert isinstance(JsonFormatter("d").format(logging.makeLogRecord({"msg": "x"})), str)
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if getattr(h, "_slurm_dl", False)]:
            root.removeHandler(h)
        root.setLevel(logging.WARNING)


def test_active_while_cycles_reach_slurm() -> None:
    t = [1000.0]
    m = PrioritizerMetrics(clock=lambda: t[0], interval_s=5.0)  # bound: max(20, 4 x 5) s
    active = lambda: m.registry.get_sample_value("slurm_dl_prioritizer_active")  # noqa: E731
    assert active() == 0, "no cycle yet"
    m.failed("slurm_unreachable")
    assert active() == 0, "it changed nothing in Slurm"
    m.failed("failed")  # e.g. the store failed after the SiteFactor updates
    assert active() == 1
    t[0] += 20
    assert active() == 1
    t[0] += 1
    assert active() == 0, "stopped cycling: no longer counted"
    assert PrioritizerMetrics(interval_s=60.0).active_for_s == 240.0


def test_a_running_daemon_scrapes_as_active(prio_metrics) -> None:
    c, p, m, port = prio_metrics
    assert value(scrape(port), "slurm_dl_prioritizer_active") == 0
    Loop(p, metrics=m).tick()
    assert value(scrape(port), "slurm_dl_prioritizer_active") == 1
