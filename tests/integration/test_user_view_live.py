"""What a researcher on a login node sees, on a REAL testbed: user ``nobody``, the prioritizer's
database unreadable to them (0600, root's), the explain endpoint on with the testbed's own
munged. ``dlsubmit status``, ``dlsubmit status JOBID`` and ``slurm-dl explain JOBID`` of a
waiting job at 80 columns: place, GPUs ahead and Slurm's start estimate present, no line wider
than 80, no internal tag or SiteFactor. About 30-60 s.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from polling import wait_until
from slurm_dl.testbed import submit
from slurm_dl.testbed.client import job_fields
from slurm_dl.testbed.site_toml import with_database_url, with_setting
from test_metrics_live import stop
from users import as_user, user_python

ROOT = Path(__file__).resolve().parents[2]
TESTBED_TOML = ROOT / "site-configs" / "testbed.toml"
INTERNAL = ("SiteFactor", "sdl1:", "(dl:", "tier ", "las 1 x", "account -", "SUBM.", " RS ")


def _public_site(testbed, public, url: str, port: int):
    """A site config users can read (preemption off, the explain endpoint on ``port``, the
    store at ``url``) and a work directory ``nobody`` owns, both under ``public``."""
    text = TESTBED_TOML.read_text().replace(
        "[preemption]\nenabled = true", "[preemption]\nenabled = false"
    )
    text = with_database_url(text, url)
    for key, value in (
        ("explain_port", port),
        ("explain_address", "127.0.0.1"),
        ("explain_host", "127.0.0.1"),
        ("munge_socket", str(testbed.layout.munge_socket)),
    ):
        text = with_setting(text, "prioritizer", key, value)
    cfg = public / "site.toml"
    cfg.write_text(text)
    cfg.chmod(0o644)
    work = public / "work"
    work.mkdir()
    shutil.chown(work, "nobody")
    return cfg, work


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines_fit(text: str) -> bool:
    return all(len(line) <= 80 for line in text.splitlines())


def test_a_user_without_the_database_sees_place_gpus_ahead_and_start_at_80_columns(
    testbed, tmp_path
) -> None:
    if testbed.bin_dir is not None:
        pytest.skip(
            "another release's clients run inside its Debian root; this runs on the host's Slurm"
        )
    params = testbed.params()
    if params is None or not params.munge:
        pytest.skip("the testbed runs no munged (Debian package munge not installed)")
    run, public = as_user(testbed)
    bin_dir = user_python()
    private = tmp_path / "private"  # root's alone, as on a controller
    private.mkdir(mode=0o700)
    port = _free_port()
    cfg, work = _public_site(testbed, public, f"sqlite:///{private / 'ledger.db'}", port)
    env = {**os.environ, **testbed.env()}
    log = tmp_path / "prio.log"
    prio = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "prioritizer",
            "run",
            "--init",
            "--config",
            str(cfg),
        ],
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    user_env = [
        "env",
        f"PATH={bin_dir}:/usr/bin:/bin",
        f"SLURM_DL_CONFIG={cfg}",
        f"HOME={work}",
        "COLUMNS=80",
    ]

    def as_nobody(*argv: str) -> subprocess.CompletedProcess:
        return run("bash", "-c", f'cd {work} && exec "$@"', "-", *user_env, *argv)

    jobs: list[int] = []
    try:
        wait_until("the explain endpoint", lambda: "explain endpoint on" in log.read_text(), 60)
        # Root fills the 4 x 8 GPUs and queues one job; the user's job waits behind it. (Jobs of the
        # user would not run here: the testbed's spool lies in pytest's root-only directory.)
        for gpus in (8, 8, 8, 8, 8):
            jobs.append(
                submit(
                    "#!/bin/bash\nsleep 120\n",
                    testbed.env(),
                    [f"--gpus={gpus}", "--time=5", "-o", "/dev/null", "--job-name=root-fill"],
                )
            )
        out = as_nobody(
            "dlsubmit",
            "train",
            "--gpus",
            "8",
            "--time",
            "5",
            "--name",
            "mine",
            "--launcher",
            "none",
            "--",
            "sleep",
            "120",
        )
        assert out.returncode == 0, out.stderr
        waiting = int(re.search(r"submitted train job (\d+)", out.stdout).group(1))
        jobs.append(waiting)
        assert (
            as_nobody("test", "-r", str(private / "ledger.db")).returncode != 0
        )  # unreadable to the user

        last: list[str] = []

        def explained() -> str | None:
            out = as_nobody("slurm-dl", "explain", str(waiting))
            last[:] = [out.stdout + out.stderr]
            return out.stdout if out.returncode == 0 and "Slurm expects" in out.stdout else None

        try:
            explain = wait_until(
                "an explanation with Slurm's estimate, through the endpoint", explained, 60, 1.0
            )
        except AssertionError as e:
            raise AssertionError(f"{e}; explain said:\n{last[0] if last else ''}") from None
        status = as_nobody("dlsubmit", "status")
        detail = as_nobody("dlsubmit", "status", str(waiting))
        assert status.returncode == 0 and detail.returncode == 0, status.stderr + detail.stderr
        for shown in (explain, status.stdout, detail.stdout):
            assert _lines_fit(shown), shown
            assert not [t for t in INTERNAL if t in shown], shown
        assert re.search(r"place: +\d+\w\w of \d+ waiting jobs; \d+ GPUs ahead of it", explain), (
            explain
        )
        assert "start:      Slurm expects" in explain, explain
        line = next(ln for ln in status.stdout.splitlines() if ln.split()[:1] == [str(waiting)])
        assert re.search(r"PENDING .* ~\d\d:\d\d +\d+\w\w of \d+, \d+ GPUs ahead$", line), (
            status.stdout
        )
        assert "note:" not in status.stdout, status.stdout  # the endpoint answered
        assert "start:       Slurm expects" in detail.stdout and "place:" in detail.stdout, (
            detail.stdout
        )
        # a job id Slurm does not know
        none = as_nobody("slurm-dl", "explain", "4000000000")
        assert none.returncode == 1 and "no such job" in none.stderr, none.stderr
    finally:
        stop(prio)
        if jobs:
            subprocess.run(["scancel", *map(str, jobs)], env=env, capture_output=True)
        shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(bin_dir.parent.parent, ignore_errors=True)


def test_a_user_without_a_postgresql_login_is_answered_by_the_endpoint(testbed, tmp_path) -> None:
    """The store on PostgreSQL, its password in a file only root reads (as the guide deploys
    it): ``nobody`` cannot log in to it, so ``slurm-dl explain`` and ``dlsubmit status`` ask
    the explain endpoint; with the prioritizer stopped, explain says in one message that
    neither the database nor the endpoint answered. About 20-40 s."""
    from pgserver import PgServer, unavailable_reason

    if (why := unavailable_reason()) is not None:
        pytest.skip(why)
    if testbed.bin_dir is not None:
        pytest.skip("another release's clients run inside its Debian root; this runs on the host's")
    params = testbed.params()
    if params is None or not params.munge:
        pytest.skip("the testbed runs no munged (Debian package munge not installed)")
    run, public = as_user(testbed)
    bin_dir = user_python()
    pg = PgServer().start()
    private = tmp_path / "private"  # root's alone, as /etc/slurm-dl/pgpass on a controller
    private.mkdir(mode=0o700)
    pgpass = private / "pgpass"
    pgpass.write_text("*:*:slurmdl:slurmdl:not-for-users\n")
    pgpass.chmod(0o600)
    url = pg.password_db("slurmdl", "not-for-users")
    port = _free_port()
    cfg, work = _public_site(testbed, public, url, port)
    env = {**os.environ, **testbed.env(), "PGPASSFILE": str(pgpass)}
    log = tmp_path / "prio.log"
    cli = [sys.executable, "-m", "slurm_dl.cli.main"]
    prio = subprocess.Popen(
        [*cli, "prioritizer", "run", "--init", "--config", str(cfg)],
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    user_env = ["env", f"PATH={bin_dir}:/usr/bin:/bin", f"SLURM_DL_CONFIG={cfg}", f"HOME={work}"]

    def as_nobody(*argv: str) -> subprocess.CompletedProcess:
        return run("bash", "-c", f'cd {work} && exec "$@"', "-", *user_env, *argv)

    jobs: list[int] = []
    try:
        wait_until("the explain endpoint", lambda: "explain endpoint on" in log.read_text(), 60)
        out = as_nobody(
            "sbatch", "--parsable", "--gres=gpu:1", "--time=5", "--begin=now+3600",
            "-o", "/dev/null", "--wrap", "true",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        mine = int(out.stdout.strip().split(";")[0])
        jobs.append(mine)
        direct = as_nobody("slurm-dl", "explain", str(mine), "--db", url, "--no-live")
        assert direct.returncode == 1 and "no password supplied" in direct.stderr, direct.stderr

        last: list[str] = []

        def explained() -> str | None:
            out = as_nobody("slurm-dl", "explain", str(mine), "--no-live")
            last[:] = [out.stdout + out.stderr]
            return out.stdout if out.returncode == 0 else None

        try:
            shown = wait_until("an explanation through the endpoint", explained, 60, 1.0)
        except AssertionError as e:
            raise AssertionError(f"{e}; explain said:\n{last[0] if last else ''}") from None
        assert f"job {mine}" in shown and "place:" in shown, shown
        status = as_nobody("dlsubmit", "status", str(mine))
        assert status.returncode == 0 and "place:" in status.stdout, status.stdout + status.stderr
        assert "note:" not in status.stdout, status.stdout  # the endpoint answered

        stop(prio)  # now neither answers
        both = as_nobody("slurm-dl", "explain", str(mine), "--no-live")
        said = both.stderr
        assert both.returncode == 1 and "Traceback" not in said, said
        assert "no password supplied" in said and "and its explain endpoint:" in said, said
        assert f"127.0.0.1:{port}" in said and "not-for-users" not in said, said
        assert _lines_fit(said), said
    finally:
        stop(prio)
        if jobs:
            subprocess.run(["scancel", *map(str, jobs)], env=env, capture_output=True)
        pg.stop()
        shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(bin_dir.parent.parent, ignore_errors=True)


def test_telemetry_users_cannot_read_is_named_by_doctor_and_not_available_in_status(
    testbed, tmp_path
) -> None:
    """``[telemetry] exposition_dir`` inside a 0750 state directory (as an earlier example had
    it): ``nobody``'s ``dlsubmit status JOBID`` of a running job says GPU use is not available
    (no traceback), and ``slurm-dl doctor``, as root and as ``nobody``, names the directory in
    the way with the fix. About 10 s."""
    if testbed.bin_dir is not None:
        pytest.skip("another release's clients run inside its Debian root; this runs on the host's")
    run, public = as_user(testbed)
    bin_dir = user_python()
    state = public / "state"  # the guide's /var/lib/slurm-dl: root's (slurm's), 0750
    telemetry = state / "telemetry"
    telemetry.mkdir(parents=True)
    state.chmod(0o750)
    text = with_database_url(TESTBED_TOML.read_text(), f"sqlite:///{state / 'ledger.db'}")
    text = with_setting(text, "telemetry", "exposition_dir", str(telemetry))
    cfg = public / "site.toml"
    cfg.write_text(text)
    cfg.chmod(0o644)
    work = public / "work"
    work.mkdir()
    shutil.chown(work, "nobody")
    env = {**os.environ, **testbed.env()}
    user_env = ["env", f"PATH={bin_dir}:/usr/bin:/bin", f"SLURM_DL_CONFIG={cfg}", f"HOME={work}"]

    def as_nobody(*argv: str) -> subprocess.CompletedProcess:
        return run("bash", "-c", f'cd {work} && exec "$@"', "-", *user_env, *argv)

    job = submit(
        "#!/bin/bash\nsleep 120\n", testbed.env(), ["--gpus=1", "--time=5", "-o", "/dev/null"]
    )
    try:
        wait_until("the job to run", lambda: job_fields(job, env).get("JobState") == "RUNNING", 60)
        status = as_nobody("dlsubmit", "status", str(job))
        said = status.stdout + status.stderr
        assert status.returncode == 0 and "Traceback" not in said, said
        assert "GPU use:     not available" in status.stdout and "slurm-dl doctor" in said, said
        assert _lines_fit(status.stdout), status.stdout
        want = f"users cannot read {telemetry}: {state} is mode 0750"
        for who, out in (
            ("nobody", as_nobody("slurm-dl", "doctor")),
            (
                "root",
                subprocess.run(
                    [sys.executable, "-m", "slurm_dl.cli.main", "doctor", "--config", str(cfg)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    cwd="/",
                ),  # fmt: skip
            ),
        ):
            lines = out.stdout.replace("\n      ", " ").replace("\n        ", " ")
            assert "Traceback" not in out.stdout + out.stderr, f"{who}: {out.stderr}"
            assert want in lines and "exposition_dir" in lines, f"{who}: {out.stdout}"
            assert _lines_fit(out.stdout), f"{who}: {out.stdout}"
    finally:
        subprocess.run(["scancel", str(job)], env=env, capture_output=True)
        shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(bin_dir.parent.parent, ignore_errors=True)
