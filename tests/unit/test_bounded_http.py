"""The daemons' HTTP endpoints are bounded: idle and trickling clients are dropped, oversized heads
and bodies refused, open connections capped (a new one closes the oldest still silent), and a
flood of idle connections does not take the process's file descriptors."""

from __future__ import annotations

import gzip
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import pytest
from prometheus_client import CollectorRegistry, Counter

from slurm_dl.daemon.bounded_http import (
    MAX_CONNECTIONS,
    QUEUE,
    BoundedHTTPServer,
    Request,
    Response,
    _send_all,
    parse_head,
    Refused,
)
from slurm_dl.cli.daemon_opts import OPEN_FILES, raise_open_files_limit
from slurm_dl.daemon.metrics_http import serve_metrics


def ok(request: Request) -> Response:
    return Response(200, f"{request.method} {request.target}".encode())


def held() -> tuple[threading.Event, Callable[[Request], Response]]:
    """A handler that answers only once the event is set."""
    release = threading.Event()

    def slow(request: Request) -> Response:
        release.wait(10)
        return ok(request)

    return release, slow


@pytest.fixture
def server():
    made: list[BoundedHTTPServer] = []

    def make(handler=ok, **kwargs) -> BoundedHTTPServer:
        made.append(BoundedHTTPServer("127.0.0.1", 0, handler, name="test", **kwargs))
        return made[-1]

    yield make
    for s in made:
        s.close()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def exchange(port: int, data: bytes) -> bytes:
    s = connect(port)
    s.sendall(data)
    return exchange_rest(s)


def exchange_rest(s: socket.socket) -> bytes:
    """What the server sends until it closes; closes ``s``."""
    with s:
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def closed_within(s: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``s`` (None: still open after ``seconds``)."""
    started = time.monotonic()
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - started


def wait_for(check, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_normal_request_is_answered_once_and_closed(server) -> None:
    s = server()
    out = exchange(s.port, b"GET /x?y=1 HTTP/1.1\r\nHost: a\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in out
    assert out.endswith(b"\r\n\r\nGET /x?y=1")
    head = exchange(s.port, b"HEAD / HTTP/1.0\n\n")  # bare newlines, HEAD: no body
    assert (
        head.startswith(b"HTTP/1.1 200")
        and head.endswith(b"\r\n\r\n")
        and b"Content-Length: 6" in head
    )


def test_a_silent_or_trickling_client_is_dropped_at_the_head_deadline(server) -> None:
    s = server(head_timeout_s=0.4)
    silent = connect(s.port)
    took = closed_within(silent, 3.0)
    assert took is not None and 0.3 < took < 1.5
    trickler = connect(s.port)
    started, sent = time.monotonic(), 0
    try:  # a byte every 50 ms, each in time: the deadline is still 0.4 s after connecting
        for b in b"GET / HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            trickler.send(bytes([b]))
            sent += 1
            time.sleep(0.05)
    except OSError:
        pass
    assert time.monotonic() - started < 2.0 and sent < 40
    silent.close(), trickler.close()
    assert s.closed_early["idle"] == 2 and s.open_connections() == 0


@pytest.mark.parametrize(
    "data, status",
    [
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", b"431"),  # head over 8 KiB
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 9000, b"431"),  # ... and never ending
        (b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"405"),
        (b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", b"413"),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"413"),
        (b"GET /\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\n folded\r\n\r\n", b"400"),
    ],
)
def test_oversized_heads_bodies_and_bad_requests_are_refused(server, data, status) -> None:
    s = server()
    try:
        out = exchange(s.port, data)
    except (
        ConnectionResetError
    ):  # the server closed with the client's bytes unread: refused all the same
        out = b"HTTP/1.1 " + status
    assert out.startswith(b"HTTP/1.1 " + status)
    assert s.closed_early["refused"] == 1


def test_parse_head_names_in_lower_case_and_last_wins() -> None:
    r = parse_head(b"GET /a HTTP/1.1\r\nAuthorization: MUNGE x\r\nX-A: 1\r\nx-a: 2")
    assert (r.method, r.target, r.headers["authorization"], r.headers["x-a"]) == (
        "GET",
        "/a",
        "MUNGE x",
        "2",
    )
    with pytest.raises(Refused):
        parse_head(b"")


def test_connections_are_capped_and_a_real_request_still_gets_in(server) -> None:
    s = server(max_connections=4)
    idle = [connect(s.port) for _ in range(10)]
    wait_for(lambda: s.closed_early["cap"] == 6)
    assert s.open_connections() == 4
    assert [closed_within(c, 0.5) is not None for c in idle] == [True] * 6 + [
        False
    ] * 4  # the oldest went
    assert exchange(s.port, b"GET /real HTTP/1.1\r\n\r\n").endswith(b"GET /real")
    for c in idle:
        c.close()


def test_when_every_slot_is_answering_a_new_connection_is_closed_at_once(server) -> None:
    release, slow = held()
    s = server(slow, max_connections=2, workers=2)
    asking = [connect(s.port) for _ in range(2)]
    for c in asking:
        c.sendall(b"GET / HTTP/1.1\r\n\r\n")
    wait_for(lambda: not s._waiting and s.open_connections() == 2)
    late = connect(s.port)
    assert closed_within(late, 2.0) is not None and s.closed_early["busy"] == 1
    release.set()
    for c in asking:
        assert exchange_rest(c).startswith(b"HTTP/1.1 200")
    late.close()


def test_requests_beyond_the_workers_and_their_queue_get_503(server) -> None:
    release, slow = held()
    s = server(slow, workers=1)
    asking = []
    for queued in [0, *range(1, QUEUE + 1)]:  # one being answered, then the queue filling up
        asking.append(connect(s.port))
        asking[-1].sendall(b"GET / HTTP/1.1\r\n\r\n")
        wait_for(lambda: s._jobs.qsize() == queued and s.open_connections() == len(asking))
    asking.append(connect(s.port))
    asking[-1].sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert exchange_rest(asking[-1]).startswith(b"HTTP/1.1 503")
    release.set()
    assert all(exchange_rest(c).startswith(b"HTTP/1.1 200") for c in asking[:-1])


def test_a_client_that_does_not_read_its_answer_loses_it_in_time() -> None:
    a, b = socket.socketpair()
    try:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            _send_all(a, b"x" * 10_000_000, 0.3)
        assert time.monotonic() - started < 2.0
    finally:
        a.close(), b.close()


def test_a_handler_that_raises_answers_500_and_the_endpoint_serves_on(server) -> None:
    def broken(request: Request) -> Response:
        if request.target == "/boom":
            raise RuntimeError("boom")
        return ok(request)

    s = server(broken)
    assert exchange(s.port, b"GET /boom HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500")
    assert exchange(s.port, b"GET /fine HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200")


def test_idle_connections_do_not_take_the_metrics_endpoints_descriptors() -> None:
    registry = CollectorRegistry()
    Counter("slurm_dl_test_things", "things", registry=registry).inc()
    m = serve_metrics(registry, 0, "127.0.0.1")
    idle: list[socket.socket] = []
    try:
        before = open_fds()
        idle = [connect(m.port) for _ in range(300)]
        wait_for(lambda: m._server.closed_early["cap"] == 300 - MAX_CONNECTIONS)
        assert open_fds() <= before + len(idle) + MAX_CONNECTIONS
        text = urllib.request.urlopen(f"http://127.0.0.1:{m.port}/metrics", timeout=5).read()
        assert b"slurm_dl_test_things_total 1.0" in text
        req = urllib.request.Request(
            f"http://127.0.0.1:{m.port}/metrics", headers={"Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.headers[
                "Content-Encoding"
            ] == "gzip" and b"slurm_dl_test_things" in gzip.decompress(r.read())
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{m.port}/elsewhere", timeout=5)
        assert e.value.code == 404
    finally:
        for c in idle:
            c.close()
        m.close()


def test_the_explain_endpoint_is_bounded_too() -> None:
    from prioritizer.explain_server import ExplainServer

    e = ExplainServer(lambda: None, "127.0.0.1", 0, "/nonexistent/munge.socket")
    idle: list[socket.socket] = []
    try:
        idle = [connect(e.port) for _ in range(100)]
        wait_for(lambda: e._http.closed_early["cap"] == 100 - MAX_CONNECTIONS)
        out = exchange(e.port, b"GET /explain/1 HTTP/1.1\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 401") and b"application/json" in out and b"MUNGE" in out
    finally:
        for c in idle:
            c.close()
        e.close()


def test_the_soft_open_files_limit_is_raised_toward_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    if top <= 256:
        pytest.skip("the hard limit leaves no room to raise into")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert raise_open_files_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0] == top
        assert raise_open_files_limit(300) == top  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


OUT_OF_FDS = r"""
import logging, os, resource, sys
logging.basicConfig(level=logging.WARNING)
from slurm_dl.daemon.bounded_http import BoundedHTTPServer, Response
server = BoundedHTTPServer("127.0.0.1", 0, lambda r: Response(200, b"ok"), name="starved")
hog = []
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    while True:
        hog.append(open("/dev/null"))
except OSError:
    pass
print(server.port, flush=True)
sys.stdin.readline()
for f in hog:
    f.close()
sys.stdin.readline()
"""


def test_out_of_descriptors_the_endpoint_pauses_accepting_and_recovers(tmp_path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", OUT_OF_FDS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        port = int(child.stdout.readline())
        c = connect(port)  # the kernel completes it; the server cannot take it yet
        c.sendall(b"GET / HTTP/1.1\r\n\r\n")
        c.settimeout(1.0)
        with pytest.raises(TimeoutError):
            c.recv(1)
        child.stdin.write("\n")
        child.stdin.flush()
        assert exchange_rest(c).startswith(b"HTTP/1.1 200")
        child.stdin.write("\n")
        child.stdin.flush()
        _, err = child.communicate(timeout=10)
        assert err.count("starved endpoint: cannot accept (Too many open files)") == 1
    finally:
        child.kill()
        child.wait()
