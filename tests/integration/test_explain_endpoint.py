"""The prioritizer's explain endpoint on a REAL local Slurm with a REAL munged: a user away from
the store asks ``slurm-dl explain --via-prioritizer`` and gets the same numbers as the store
holds; another user's credential is refused for that job; a replayed, forged or missing
credential is refused. The daemon runs as a subprocess (``prioritizer run``), munged with a
key made for the test, on its own socket.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from prioritizer.explain_server import ExplainServer
from slurm_dl.slurm.munge import encode
from slurm_dl.store import Store
from slurm_dl.testbed import submit

from test_metrics_live import stop
from polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
TESTBED_TOML = ROOT / "site-configs" / "testbed.toml"
CLI = [sys.executable, "-m", "slurm_dl.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def munged(tmp_path_factory: pytest.TempPathFactory):
    """A private munged: its key in a root-only directory, its socket where any user reaches it."""
    if os.geteuid() != 0 or not shutil.which("munged") or not shutil.which("runuser"):
        pytest.skip("needs root, munged and runuser (Debian packages munge, util-linux)")
    base = tmp_path_factory.mktemp("munge")
    private, public = base / "private", Path(f"/tmp/slurm-dl-munge-{os.getpid()}")
    private.mkdir(mode=0o700)
    public.mkdir(mode=0o755, exist_ok=True)
    os.chmod(base, 0o755)
    key = private / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}", "--bits=1024"], check=True)
    sock = public / "munge.socket"
    proc = subprocess.Popen(
        [
            "munged",
            "--foreground",
            "--force",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--log-file={private / 'munged.log'}",
            f"--pid-file={private / 'munged.pid'}",
            f"--seed-file={private / 'munged.seed'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until("munged's socket", sock.exists, 30, 0.1)
        yield str(sock)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(public, ignore_errors=True)


def _config(tmp_path: Path, port: int, sock: str) -> Path:
    text = TESTBED_TOML.read_text().replace(
        "[preemption]\nenabled = true", "[preemption]\nenabled = false"
    )
    text = text.replace(
        "[prioritizer]\n",
        f'[prioritizer]\nexplain_port = {port}\nexplain_address = "127.0.0.1"\n'
        f'explain_host = "127.0.0.1"\nmunge_socket = "{sock}"\n',
        1,
    )
    assert f"explain_port = {port}" in text and "enabled = false" in text
    p = tmp_path / "site.toml"
    p.write_text(text)
    return p


def _get(port: int, path: str, authorization: str | None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": authorization} if authorization else {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _credential_of(user: str, sock: str) -> str:
    out = subprocess.run(
        ["runuser", "-u", user, "--", "munge", "--no-input", f"--socket={sock}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.strip()


def test_users_see_their_own_jobs_through_the_endpoint_and_nothing_else(
    testbed, munged, tmp_path
) -> None:
    env = {**os.environ, **testbed.env()}
    port = free_port()
    cfg = _config(tmp_path, port, munged)
    db = f"sqlite:///{tmp_path / 'prio.db'}"
    log = tmp_path / "prio.log"
    job = submit(
        "#!/bin/bash\ntrue\n",
        testbed.env(),
        ["--gres=gpu:1", "--time=5", "--begin=now+3600", "-o", "/dev/null"],
    )
    prio = subprocess.Popen(
        [*CLI, "prioritizer", "run", "--init", "--config", str(cfg), "--db", db],
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    try:
        wait_until("the explain endpoint", lambda: "explain endpoint on" in log.read_text(), 60)
        store = Store(db)
        wait_until("the job's explanation", lambda: store.explanation(job) is not None, 60)

        # root, away from the store (no --db, and the config's store is not this one)
        out = subprocess.run(
            [
                *CLI,
                "explain",
                str(job),
                "--config",
                str(cfg),
                "--via-prioritizer",
                "--json",
                "--no-live",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/tmp",
        )
        assert out.returncode == 0, out.stderr
        remote = json.loads(out.stdout)
        local = json.loads(
            subprocess.run(
                [
                    *CLI,
                    "explain",
                    str(job),
                    "--config",
                    str(cfg),
                    "--db",
                    db,
                    "--json",
                    "--no-live",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                cwd="/tmp",
                check=True,
            ).stdout
        )
        assert remote["job_id"] == local["job_id"] == job
        assert (
            remote["rank"] == local["rank"]
            and remote["tiers"] == local["tiers"]
            and remote["queue"] == local["queue"]
        )
        text = subprocess.run(
            [*CLI, "explain", str(job), "--config", str(cfg), "--via-prioritizer", "--no-live"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/tmp",
        )
        assert text.returncode == 0 and f"job {job}" in text.stdout, text.stderr

        # another user: refused for root's job, with a message that says why
        status, doc = _get(
            port, f"/explain/{job}?live=0", f"MUNGE {_credential_of('nobody', munged)}"
        )
        assert status == 403 and "not yours" in doc["error"] and "nobody" in doc["error"]
        # a replayed credential, a forged one, none at all
        cred = encode(munged)
        assert _get(port, f"/explain/{job}?live=0", f"MUNGE {cred}")[0] == 200
        status, doc = _get(port, f"/explain/{job}?live=0", f"MUNGE {cred}")
        assert status == 401 and "Replayed" in doc["error"]
        status, doc = _get(port, f"/explain/{job}?live=0", "MUNGE MUNGE:AwQFAAAforged:")
        assert status == 401 and "refused" in doc["error"]
        assert _get(port, f"/explain/{job}?live=0", None)[0] == 401
        assert _get(port, "/explain/../../etc/passwd", f"MUNGE {encode(munged)}")[0] == 404

        # the owner without admin rights sees their own job (the same store, no admin uids)
        server = ExplainServer(lambda: Store(db), "127.0.0.1", 0, munged, admin_uids=frozenset())
        try:
            status, doc = _get(server.port, f"/explain/{job}?live=0", f"MUNGE {encode(munged)}")
            assert status == 200 and doc["job_id"] == job
            status, doc = _get(
                server.port, f"/explain/{job}?live=0", f"MUNGE {_credential_of('nobody', munged)}"
            )
            assert status == 403
        finally:
            server.close()
    finally:
        stop(prio)
        subprocess.run(["scancel", str(job)], env=env, capture_output=True)
