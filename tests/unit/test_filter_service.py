"""The filter service over a real Unix socket: answers, malformed input, bounded slots, reload, 0600."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsubmit.protocol import answer_line, parse_request, BadRequest
from slurm_dl.core.model import Job, JobState
from jobsubmit.service import FilterService, LiveView, FilterServiceError, open_server
from slurm_dl.core.rules.request import NO_VAL

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"


def ask(path: Path, payload: bytes, timeout: float = 5.0) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(payload)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def request(job: dict) -> bytes:
    return json.dumps({"v": 1, "submit_uid": 1000, "job": job}).encode() + b"\n"


@pytest.fixture
def running(tmp_path):
    service = FilterService(CONFIG, clock=lambda: 1_800_000_000.0)
    sock = tmp_path / "f.sock"
    server = open_server(service, sock)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield service, sock
    server.shutdown()
    server.server_close()


def test_socket_is_private(running) -> None:
    _, sock = running
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600 and stat.S_ISSOCK(sock.stat().st_mode)


def test_accept_with_changes(running) -> None:
    _, sock = running
    a = ask(sock, request({"user_name": "u", "tres_per_job": "gres:gpu:16", "time_limit": NO_VAL}))
    assert (
        a["action"] == "accept"
        and a["set"]["min_nodes"] == 2
        and a["set"]["tres_per_node"] == "gres:gpu:8"
    )


def test_reject_with_message_and_code(running) -> None:
    _, sock = running
    a = ask(sock, request({"tres_per_node": "gres:gpu:nosuchgpu:1"}))
    assert a["action"] == "reject" and a["code"] == 2072 and "nosuchgpu" in a["message"]


@pytest.mark.parametrize(
    "payload",
    [
        b"not json\n",
        b"[1,2,3]\n",
        b'{"v": 1, "job": "x"}\n',
        b"\xff\xfe\n",
        b"\n",
        b"[" * 5000 + b"\n",
        b'{"v": 1, "job": {"min_nodes": ' + b"9" * 4400 + b"}}\n",
    ],
)
def test_malformed_request_is_refused_and_the_service_stays_up(running, payload) -> None:
    """A request that is no readable job is refused with a message: an ``error`` answer would
    let the job through unchecked under failure mode accept."""
    _, sock = running
    a = ask(sock, payload)
    assert a["action"] == "reject" and "could not check this job" in a["message"]
    assert ask(sock, request({"tres_per_node": "gres:gpu:1"}))["action"] == "accept"


def test_a_shim_of_another_protocol_version_gets_an_error(running) -> None:
    _, sock = running
    a = ask(sock, b'{"v": 2, "job": {}}\n')
    assert a["action"] == "error" and "protocol version" in a["message"]


def test_client_that_hangs_up_midway_does_not_hurt(running) -> None:
    _, sock = running
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(sock))
        s.sendall(b'{"v": 1, "job"')
    assert ask(sock, request({}))["action"] == "accept"


def test_several_requests_on_one_connection(running) -> None:
    _, sock = running
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(sock))
        f = s.makefile("rwb")
        for _ in range(3):
            f.write(request({"tres_per_node": "gres:gpu:1"}))
            f.flush()
            assert json.loads(f.readline())["action"] == "accept"


def test_concurrent_clients_all_answered(running) -> None:
    _, sock = running
    results: list[str] = []

    def one() -> None:
        results.append(ask(sock, request({"tres_per_job": "gres:gpu:16"}))["action"])

    threads = [threading.Thread(target=one) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("accept") + results.count("error") == 40 and "accept" in results


def test_busy_service_answers_error_instead_of_waiting(running) -> None:
    service, _ = running
    for _ in range(service.config.filter.max_concurrent):
        service.slots.acquire()
    try:
        assert json.loads(service.handle_line(request({})))["message"] == "busy"
    finally:
        for _ in range(service.config.filter.max_concurrent):
            service.slots.release()


def test_rule_that_raises_refuses_that_job_only() -> None:
    def broken(job, uid):
        raise RuntimeError("boom")

    line, decision, error = answer_line(request({}), broken)
    assert "boom" in error and json.loads(line)["action"] == "reject" and not decision.accepted


def test_deadline_quota_counts_accepted_deadline_jobs(running) -> None:
    service, sock = running
    job = {
        "user_name": "dora",
        "tres_per_node": "gres:gpu:1",
        "time_limit": 60,
        "comment": "dl:deadline=1800036000",
    }
    limit = service.config.policy.deadline.max_deadline_jobs_per_user
    actions = [ask(sock, request(job))["action"] for _ in range(limit + 1)]
    assert actions == ["accept"] * limit + ["reject"]
    assert ask(sock, request({**job, "user_name": "eve"}))["action"] == "accept"


def _live_job(
    job_id: int, user: str, tag: str, state: JobState = JobState.PENDING, gpus: int = 1
) -> Job:
    return Job(job_id, user=user, num_gpus=gpus, state=state, admin_comment=tag)


DL = "sdl1:class=train;ckpt=0;gpus=1;shape=1x1;deadline=1800036000"


def test_live_view_counts_only_live_jobs_and_recent_accepts_until_the_next_read() -> None:
    clock = [1000.0]
    jobs = [
        _live_job(1, "u", DL),
        _live_job(2, "u", DL, JobState.RUNNING),
        _live_job(3, "u", DL, JobState.CANCELLED),
        _live_job(4, "u", "not a tag"),
        _live_job(5, "u", "sdl1:class=serve;ckpt=0;gpus=2;shape=1x2", JobState.RUNNING, gpus=2),
    ]
    view = LiveView(lambda: list(jobs), clock=lambda: clock[0])
    view.refresh()
    held = view.of("u", 1000.0)
    assert held.deadline_jobs == 2 and held.class_gpus == {"train": 2, "serve": 2}
    view.add("u", "serve", 4, None)  # accepted after the read: counted on top
    assert view.of("u", 1000.0).class_gpus["serve"] == 6
    jobs[:2] = []  # the user cancelled both deadline jobs; the accepted serve job never showed up
    clock[0] = 1001.0
    view.refresh()
    held = view.of("u", 1001.0)
    assert held.deadline_jobs == 0 and held.class_gpus == {"serve": 2}
    assert view.of("nobody", 1001.0).deadline_jobs == 0


def test_live_view_keeps_the_last_counts_when_slurm_cannot_be_read() -> None:
    calls = {"n": 0}

    def fetch():
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError("slurmctld down")
        return [_live_job(1, "u", DL)]

    view = LiveView(fetch)
    view.refresh()
    with pytest.raises(OSError):
        view.refresh()
    assert view.of("u", 0.0).deadline_jobs == 1


def test_cancelled_deadline_jobs_free_the_quota(tmp_path) -> None:
    jobs: list[Job] = []
    service = FilterService(CONFIG, clock=lambda: 1_800_000_000.0, fetch=lambda: list(jobs))
    job = {
        "user_name": "dora",
        "tres_per_node": "gres:gpu:1",
        "time_limit": 60,
        "comment": "dl:deadline=1800036000",
    }
    limit = service.config.policy.deadline.max_deadline_jobs_per_user
    accepted = []
    for i in range(limit):
        d = service.decide_job(job, None)
        assert d.accepted
        accepted.append(_live_job(i + 1, "dora", d.changes["admin_comment"]))
    assert not service.decide_job(job, None).accepted
    jobs.extend(accepted)
    service.live.refresh()
    assert not service.decide_job(job, None).accepted  # still live: still counted
    jobs.clear()  # all cancelled
    service.live.refresh()
    assert service.decide_job(job, None).accepted


def test_reload_keeps_the_old_config_when_the_new_one_is_bad(tmp_path) -> None:
    path = tmp_path / "site.toml"
    path.write_text(CONFIG.read_text())
    service = FilterService(path)
    path.write_text(CONFIG.read_text().replace("max_cpus_per_gpu = 4", "max_cpus_per_gpu = 8"))
    assert service.reload() and service.config.caps.max_cpus_per_gpu == 8
    path.write_text("this is not toml = = =")
    assert not service.reload() and service.config.caps.max_cpus_per_gpu == 8


def test_refuses_to_replace_a_regular_file(tmp_path) -> None:
    target = tmp_path / "not-a-socket"
    target.write_text("keep me")
    with pytest.raises(FilterServiceError, match="not a socket"):
        open_server(FilterService(CONFIG), target)
    assert target.read_text() == "keep me"


def test_parse_request_reads_uid() -> None:
    job, uid = parse_request(b'{"v":1,"submit_uid":5,"job":{"a":1}}')
    assert job == {"a": 1} and uid == 5
    with pytest.raises(BadRequest):
        parse_request(b'{"v":1}')


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.text(max_size=200).map(str.encode),
        st.dictionaries(
            st.text(max_size=10),
            st.one_of(st.none(), st.integers(), st.text(max_size=20), st.floats(allow_nan=False)),
            max_size=8,
        ).map(lambda j: json.dumps({"v": 1, "job": j}).encode()),
    )
)
def test_wire_format_any_bytes_get_one_answer_and_service_stays_up(running, payload) -> None:
    _, sock = running
    payload = payload.replace(b"\n", b" ") + b"\n"
    assert ask(sock, payload)["action"] in ("accept", "reject", "error")


def test_sighup_reloads_a_running_service_process(tmp_path) -> None:
    """The real `slurm-dl filter serve` process: SIGHUP reloads, SIGTERM stops and removes the socket."""
    cfg = tmp_path / "site.toml"
    cfg.write_text(CONFIG.read_text())
    sock = tmp_path / "s.sock"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "filter",
            "serve",
            "--config",
            str(cfg),
            "--socket",
            str(sock),
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        for _ in range(
            1200
        ):  # start-up is slow on a loaded machine; wait for the socket, not a time
            if sock.exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert sock.exists(), (
            f"filter serve did not start: rc={proc.poll()}: {proc.stderr.read() if proc.poll() is not None else ''}"
        )
        job = {"tres_per_node": "gres:gpu:1", "cpus_per_tres": "gres:gpu:8", "time_limit": 10}
        assert ask(sock, request(job))["action"] == "reject"
        cfg.write_text(CONFIG.read_text().replace("max_cpus_per_gpu = 4", "max_cpus_per_gpu = 8"))
        proc.send_signal(signal.SIGHUP)
        for _ in range(100):
            if ask(sock, request(job))["action"] == "accept":
                break
            time.sleep(0.05)
        assert ask(sock, request(job))["action"] == "accept"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and not sock.exists()
    assert "config reloaded" in err and err.count("decision ") >= 2


def test_the_service_tells_systemd_it_is_ready_once_its_socket_listens(tmp_path) -> None:
    """Type=notify: READY=1 arrives on $NOTIFY_SOCKET (a real datagram socket, as systemd's)
    only when the filter socket answers, so Before=slurmctld.service means it is ready."""
    sock, notify_path = tmp_path / "s.sock", tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(notify_path))
        listener.settimeout(60)
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
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "NOTIFY_SOCKET": str(notify_path)},
        )
        try:
            first = listener.recv(4096).decode()
            answered = ask(sock, request({}))["action"]  # at that moment, before anything else
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=20)
        last = listener.recv(4096).decode()
    assert first.splitlines()[0] == "READY=1" and f"STATUS=listening on {sock}" in first
    assert answered == "accept" and last == "STOPPING=1" and proc.returncode == 0


def test_line_sent_in_pieces_is_answered(running) -> None:
    """A client that sends slowly is served by a worker thread, without holding up others."""
    _, sock = running
    payload = request({"tres_per_node": "gres:gpu:1"})
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as slow:
        slow.settimeout(5)
        slow.connect(str(sock))
        slow.sendall(payload[:10])
        time.sleep(0.05)
        assert ask(sock, request({}))["action"] == "accept"  # others are answered meanwhile
        slow.sendall(payload[10:])
        assert json.loads(slow.makefile("rb").readline())["action"] == "accept"


def test_all_workers_taken_means_busy(tmp_path, monkeypatch) -> None:
    import jobsubmit.service as service_module

    # Workers must not give up on the stalled clients while the test runs, however slow the machine.
    monkeypatch.setattr(service_module._Handler, "timeout", 120.0)
    service = FilterService(CONFIG)
    sock = tmp_path / "b.sock"
    server = open_server(service, sock)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    slow = []
    try:
        pool = service.config.filter.max_concurrent
        for _ in range(
            2 * pool + 3
        ):  # every worker busy with a partial line, the queue full, and more
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(sock))
            s.sendall(b'{"v":1,')
            slow.append(s)
        late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        late.settimeout(30)  # a loaded machine answers late; "busy" is what matters
        late.connect(str(sock))
        late.sendall(b'{"v":1,')
        assert json.loads(late.makefile("rb").readline()) == {
            "v": 1,
            "action": "error",
            "message": "busy",
        }
        late.close()
        for s in slow:
            s.close()
        assert ask(sock, request({}))["action"] == "accept"
    finally:
        server.shutdown()
        server.server_close()


def test_close_waits_for_the_workers_to_answer_what_they_hold(tmp_path, caplog) -> None:
    """After close no worker is left answering: its log lines land while the caller still listens."""
    service = FilterService(CONFIG)
    sock = tmp_path / "c.sock"
    server = open_server(service, sock)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    clients = []
    for _ in range(service.config.filter.max_concurrent):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(sock))
        s.sendall(b'{"v":1,')  # a partial line: a worker waits for the rest
        clients.append(s)
    # Connections are accepted in order: once a later complete request is answered, every
    # partial one above has been handed to a worker.
    assert ask(sock, request({}))["action"] == "accept"
    with caplog.at_level("WARNING", logger="slurm_dl.filter"):
        for s in clients:
            s.close()  # the workers now read a truncated request and answer an error
        server.shutdown()
        server.server_close()
        workers = [
            t
            for t in threading.enumerate()
            if t.name.startswith("filter-") and t in server._workers
        ]
        assert workers == []
    assert sum("bad request" in r.getMessage() for r in caplog.records) == len(clients)
