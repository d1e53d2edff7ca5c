"""The Lua shim under lua5.1 against a real filter service socket.

Only the ``slurm`` table is a stand-in (the functions slurmctld gives the shim); the socket, the
service and the JSON are real. Skips when lua5.1 with lua-socket and lua-cjson is not installed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from jobsubmit.install import SHIM_TEMPLATE, render_shim
from jobsubmit.service import FilterService, open_server
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"

HARNESS = r"""
local shim_path, job_path = arg[1], arg[2]
local cjson = require "cjson"
local user, info = {}, {}
slurm = {
    SUCCESS = 0, ERROR = -1, ESLURM_INVALID_TIME_LIMIT = 2051, ESLURM_ACCOUNTING_POLICY = 2050,
    ESLURM_MISSING_TIME_LIMIT = 2054, ESLURM_INVALID_NODE_COUNT = 2006, ESLURM_ACCESS_DENIED = 2002,
    log_user = function(fmt, ...) table.insert(user, string.format(fmt, ...)) end,
    log_info = function(fmt, ...) table.insert(info, string.format(fmt, ...)) end,
}
dofile(shim_path)
local f = assert(io.open(job_path)); local job_desc = cjson.decode(f:read("*a")); f:close()
local rc = slurm_job_submit(job_desc, {}, 1000)
print(cjson.encode({ rc = rc, job = job_desc, user = user, info = info }))
"""


def lua_ready() -> str | None:
    if shutil.which("lua5.1") is None:
        return "lua5.1 is not installed"
    probe = subprocess.run(
        ["lua5.1", "-e", 'require "socket.unix"; require "cjson"'], capture_output=True
    )
    return None if probe.returncode == 0 else "lua-socket or lua-cjson is missing for lua5.1"


pytestmark = pytest.mark.skipif(lua_ready() is not None, reason=str(lua_ready()))


@pytest.fixture
def service_socket(tmp_path):
    sock = tmp_path / "f.sock"
    service = FilterService(CONFIG)
    service.leaf_nodes = (
        ("gpu01", "gpu02"),
        ("gpu03", "gpu04"),
    )  # as read from the testbed's Slurm
    server = open_server(service, sock)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield sock
    server.shutdown()
    server.server_close()


def run_shim(
    tmp_path: Path, sock: Path, job: dict, failure_mode: str = "accept", timeout_ms: int = 200
) -> dict:
    shim = tmp_path / "job_submit.lua"
    shim.write_text(render_shim(SHIM_TEMPLATE.read_text(), str(sock), timeout_ms, failure_mode))
    harness = tmp_path / "harness.lua"
    harness.write_text(HARNESS)
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    out = subprocess.run(
        ["lua5.1", str(harness), str(shim), str(job_file)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def desc(**fields) -> dict:
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": NO_VAL,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "req_switch": NO_VAL,
        "wait4switch": NO_VAL,
        "script": "#!/bin/sh\ntrue\n",
    }
    base.update(fields)
    return base


def test_rejection_reaches_the_user_with_the_code(tmp_path, service_socket) -> None:
    r = run_shim(tmp_path, service_socket, desc(tres_per_node="gres:gpu:nosuchgpu:1"))
    assert r["rc"] == 2072
    assert len(r["user"]) == 1 and "nosuchgpu" in r["user"][0] and "h100" in r["user"][0]


def test_named_code_is_looked_up_in_the_slurm_table(tmp_path, service_socket) -> None:
    r = run_shim(tmp_path, service_socket, desc(tres_per_node="gres:gpu:1", time_limit=5000))
    assert r["rc"] == 2051 and "--time=5000" in r["user"][0]


def test_accepted_changes_are_written_into_job_desc(tmp_path, service_socket) -> None:
    r = run_shim(
        tmp_path, service_socket, desc(tres_per_job="gres:gpu:16", admin_comment="sdl1:forged")
    )
    job = r["job"]
    assert r["rc"] == 0
    assert job["min_nodes"] == 2 and job["max_nodes"] == 2 and job["tres_per_node"] == "gres:gpu:8"
    assert job["tres_per_job"] == "" and job["req_switch"] == 1 and job["time_limit"] == 60
    assert parse_tag(job["admin_comment"]).shape == "2x8"


def test_notices_reach_the_user_and_percent_signs_are_safe(tmp_path, service_socket) -> None:
    r = run_shim(
        tmp_path, service_socket, desc(tres_per_node="gres:gpu:1", comment="dl:class=100%s")
    )
    assert r["rc"] == 0 and any("ignored dl:class=100%s" in u for u in r["user"])


def test_service_down_accepts_unchanged_and_logs_one_line(tmp_path) -> None:
    job = desc(tres_per_job="gres:gpu:16", admin_comment="x")
    r = run_shim(tmp_path, tmp_path / "nobody-listens.sock", job)
    assert r["rc"] == 0 and r["job"] == job and not r["user"]  # cjson writes an empty table as {}
    assert (
        len(r["info"]) == 1
        and "cannot connect" in r["info"][0]
        and "failure mode accept" in r["info"][0]
    )


def test_service_down_with_failure_mode_reject(tmp_path) -> None:
    r = run_shim(tmp_path, tmp_path / "nobody-listens.sock", desc(), failure_mode="reject")
    assert r["rc"] == -1 and "filter is unavailable" in r["user"][0]


@pytest.fixture
def fake_peer(tmp_path):
    """A real socket that accepts and then answers with ``reply`` (None: never answers)."""
    sock_path = tmp_path / "peer.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(sock_path))
    srv.listen(4)
    state = {"reply": None, "conns": []}

    def loop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            state["conns"].append(conn)
            conn.recv(65536)
            if state["reply"] is not None:
                conn.sendall(state["reply"])

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield sock_path, state
    # close() alone does not wake a thread blocked in accept() or recv(): shut the sockets
    # down first, so the loop returns and no thread outlives the test.
    for s in [srv, *state["conns"]]:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    thread.join(5)
    srv.close()
    for c in state["conns"]:
        c.close()


def test_hung_service_hits_the_timeout_and_accepts(tmp_path, fake_peer) -> None:
    sock, _ = fake_peer
    job = desc(tres_per_job="gres:gpu:16")
    r = run_shim(tmp_path, sock, job, timeout_ms=50)
    assert r["rc"] == 0 and r["job"] == job
    assert "no answer within 0.05 s" in r["info"][0]


@pytest.mark.parametrize(
    "reply, why",
    [
        (b"garbage\n", "unreadable answer"),
        (b'{"v":1,"action":"launch"}\n', "without a known action"),
        (b'"just a string"\n', "unreadable answer"),
        (b'{"v":1,"action":"error","message":"bad request"}\n', "known action"),
        (b'{"v":1,"action":"error","message":"busy"}\n', "the service is busy"),
    ],
)
def test_garbage_answers_follow_the_failure_mode(tmp_path, fake_peer, reply, why) -> None:
    sock, state = fake_peer
    state["reply"] = reply
    job = desc(tres_per_job="gres:gpu:16")
    r = run_shim(tmp_path, sock, job)
    assert r["rc"] == 0 and r["job"] == job and why in r["info"][0]


def test_only_writable_fields_of_the_right_type_are_applied(tmp_path, fake_peer) -> None:
    sock, state = fake_peer
    state["reply"] = (
        b'{"v":1,"action":"accept","set":{"user_name":"root","priority":1,"min_nodes":"9","time_limit":30}}\n'
    )
    r = run_shim(tmp_path, sock, desc())
    assert r["job"]["user_name"] == "alice" and "priority" not in r["job"]
    assert r["job"]["min_nodes"] == NO_VAL and r["job"]["time_limit"] == 30
