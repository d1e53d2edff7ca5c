"""``slurm-dl doctor`` and ``slurm-dl prioritizer reset`` on a real testbed.

A private one-node testbed with the filter (shim installed), the prioritizer (metrics on) and a
site config that points at them: doctor passes (warning that without slurmdbd the accounts fair
share trusts cannot be checked); with gpu01's agent file gone stale and a write lock held on
the ledger, the daemon's log and metrics say the first and doctor names both, the holder by
its pid; with the filter socket removed it names that fault and its fix and exits 1. Before the store is made, ``db status`` and the daemon refuse
it and create nothing; ``db upgrade`` makes it. Then the prioritizer is stopped and ``prioritizer reset`` puts
every SiteFactor it set back to 0 in Slurm, and ``doctor --uninstalled`` names what still acts
until the filter is stopped and uninstalled.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from slurm_dl.testbed.site_toml import with_database_url
from slurm_dl.slurm import CliBackend
from slurm_dl.testbed import submit
from slurm_dl.testbed.client import job_fields
from test_metrics_live import Proc, free_port, scrape, total, wait_until

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "slurm_dl.cli.main"]


def site_config(tmp_path: Path, sock: Path, fport: int, pport: int) -> Path:
    text = with_database_url(
        (ROOT / "site-configs" / "testbed.toml").read_text(), f"sqlite:///{tmp_path}/ledger.db"
    )
    text = re.sub(r'(?m)^socket = ".*"$', f'socket = "{sock}"', text)
    text = text.replace('nodes = "gpu[01-04]"', 'nodes = "gpu01"')  # the one-node testbed below
    text = text.replace(
        "[filter]\n", f'[filter]\nmetrics_port = {fport}\nmetrics_address = "127.0.0.1"\n', 1
    )
    text = text.replace(
        "[prioritizer]\n",
        f'[prioritizer]\nmetrics_port = {pport}\nmetrics_address = "127.0.0.1"\n',
        1,
    )
    text += f'\n[telemetry]\nexposition_dir = "{tmp_path}/agents"\n'
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def agent_file(tmp_path: Path, at: float) -> Path:
    """gpu01's agent file as the agent writes it, its samples taken at ``at`` (no job holds
    the GPUs: the file's age is what counts here)."""
    from slurm_dl.core.samples import JobGpuSample
    from slurm_dl.telemetry import exposition
    from slurm_dl.telemetry.agent import write_atomically

    agents = tmp_path / "agents"
    agents.mkdir(mode=0o755, exist_ok=True)
    rows = [JobGpuSample(0, "gpu01", g, 0.0, 0, 50.0, 0, at) for g in range(8)]
    path = agents / "gpu01.prom"
    write_atomically(path, exposition.render(rows))
    return path


def doctor(env) -> tuple[int, dict, str]:
    text = subprocess.run(
        [*CLI, "doctor"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    js = subprocess.run(
        [*CLI, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    return js.returncode, json.loads(js.stdout), text.stdout + text.stderr


def uninstalled(env) -> tuple[int, str]:
    out = subprocess.run(
        [*CLI, "doctor", "--uninstalled"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    return out.returncode, out.stdout + out.stderr


def test_doctor_passes_then_names_the_missing_socket_and_reset_clears_site_factors(
    make_testbed, tmp_path
) -> None:
    tb = make_testbed(nodes=1, gpus_per_node=8)
    tb.up()
    sock = tmp_path / "filter.sock"
    fport, pport = free_port(), free_port()
    conf = site_config(tmp_path, sock, fport, pport)
    env = {**os.environ, **tb.env(), "SLURM_DL_CONFIG": str(conf)}  # every command finds it there
    filt = Proc([*CLI, "filter", "serve"], env, tmp_path / "filter.log").start()
    prio = Proc([*CLI, "prioritizer", "run"], env, tmp_path / "prio.log")
    jobs: list[int] = []
    try:
        wait_until("the filter socket", sock.exists, 30, 0.1)
        out = subprocess.run(
            [*CLI, "filter", "install", "--slurm-conf-dir", str(tb.conf_dir)],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        time.sleep(1.1)  # slurmctld re-reads job_submit.lua when its mtime changes
        busy = submit(
            "#!/bin/bash\nsleep 300\n", env, ["--gres=gpu:8", "-t", "10", "--comment=dl:ckpt=0"]
        )
        jobs.append(busy)
        wait_until(
            "the full-node job to run",
            lambda: job_fields(busy, env).get("JobState") == "RUNNING",
            60,
        )
        for _ in range(3):  # pending jobs for the prioritizer to rank
            jobs.append(submit("#!/bin/bash\nsleep 5\n", env, ["--gres=gpu:2", "-t", "5"]))
        # nothing made yet: db status and the daemon say so and create nothing (a mistyped path
        # must not pass for the ledger); db upgrade makes the store, as the admin guide says
        ledger = tmp_path / "ledger.db"
        out = subprocess.run(
            [*CLI, "db", "status"], env=env, capture_output=True, text=True, cwd=ROOT, timeout=60
        )
        assert (
            out.returncode == 1 and "no such file" in out.stderr and "db upgrade" in out.stderr
        ), out.stderr
        out = subprocess.run(
            [*CLI, "prioritizer", "run", "--max-cycles", "1"],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert (
            out.returncode == 1 and "no such file" in out.stderr and "db upgrade" in out.stderr
        ), out.stderr
        assert not ledger.exists()
        out = subprocess.run(
            [*CLI, "db", "upgrade"], env=env, capture_output=True, text=True, cwd=ROOT, timeout=60
        )
        assert out.returncode == 0 and ledger.exists(), out.stderr
        agent_file(tmp_path, time.time())  # gpu01's agent writes
        prio.start()
        wait_until(
            "a prioritizer cycle",
            lambda: total(scrape(pport), "slurm_dl_prioritizer_cycles_total", outcome="ok") >= 1,
            60,
        )

        rc, result, text = doctor(env)
        assert rc == 0, text
        checks = {x["check"]: x["status"] for x in result["findings"]}
        for name in (
            "Slurm release",
            "slurmctld",
            "PriorityType",
            "JobSubmitPlugins",
            "job_submit.lua",
            "filter socket",
            "database",
            "prioritizer",
            "prioritizer metrics",
            "filter metrics",
            "site config vs Slurm",
            "database writes",
            "gpu-agent samples",
        ):
            assert checks.get(name) == "ok", (name, text)
        assert "0 problem(s)" in text, text
        # fair share trusts the account a job names, and this testbed has no slurmdbd to check it
        accounts = next(
            x for x in result["findings"] if x["check"] == "accounts (AccountingStorageEnforce)"
        )
        assert accounts["status"] == "warn" and "cannot be checked at all" in accounts["detail"], (
            accounts
        )
        assert "AccountingStorageEnforce=associations,limits" in accounts["fix"], accounts
        assert all(len(line) <= 80 or " " not in line.strip() for line in text.splitlines()), (
            text
        )  # a long path

        stale_agent_and_held_write_lock(tmp_path, env, pport)

        sock.unlink()  # the fault: the service keeps running, but nothing can reach it
        rc, result, text = doctor(env)
        assert rc == 1
        failed = [x for x in result["findings"] if x["status"] == "fail"]
        assert [x["check"] for x in failed] == ["filter socket"], text
        assert "does not exist" in failed[0]["detail"] and "slurm-dl-filter" in failed[0]["fix"]
        assert "FAIL  filter socket" in text and "fix: systemctl start slurm-dl-filter" in text

        pending = jobs[1:]
        slurm = CliBackend(env=env)
        wait_until(
            "SiteFactors on the pending jobs (sprio)",
            lambda: all(slurm.site_factors().get(j) for j in pending),
            60,
        )
        prio.stop()
        # a store that knows none of them (replaced): reset names what it leaves, changes nothing
        other = f"sqlite:///{tmp_path / 'other.db'}"
        assert (
            subprocess.run(
                [*CLI, "db", "upgrade", "--db", other],
                env=env,
                capture_output=True,
                cwd=ROOT,
                timeout=60,
            ).returncode
            == 0
        )
        out = subprocess.run(
            [*CLI, "prioritizer", "reset", "--db", other],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert out.returncode == 0 and "reset SiteFactor to 0 on 0 job(s)" in out.stdout, (
            out.stdout + out.stderr
        )
        assert f"note: {len(pending)} pending job(s) still carry a SiteFactor" in out.stderr, (
            out.stderr
        )
        assert "--all-pending" in out.stderr and all(slurm.site_factors().get(j) for j in pending)
        out = subprocess.run(
            [*CLI, "prioritizer", "reset", "--json"],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert set(pending) <= set(report["reset"])
        assert all(not slurm.site_factors().get(j) for j in pending), slurm.site_factors()

        # uninstalling: doctor --uninstalled names what still acts, then passes
        rc, text = uninstalled(env)
        assert rc == 1 and "FAIL  job_submit.lua" in text and "FAIL  filter metrics" in text, (
            text
        )  # socket gone
        assert "fix: slurm-dl filter uninstall" in text and "FAIL  SiteFactor" not in text, text
        filt.stop()
        out = subprocess.run(
            [*CLI, "filter", "uninstall", "--slurm-conf-dir", str(tb.conf_dir)],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        rc, text = uninstalled(env)
        assert (
            rc == 0
            and "ok    job_submit.lua" in text
            and "ok    SiteFactor: no job carries one" in text
        ), text
        assert "WARN  database" in text and "DROP ROLE" in text.replace("\n", " "), text
    finally:
        prio.stop()
        filt.stop()
        for j in jobs:
            subprocess.run(["scancel", str(j)], env=env, capture_output=True)


def stale_agent_and_held_write_lock(tmp_path: Path, env, pport: int) -> None:
    """Two faults nothing else shows: gpu01's agent stops writing (its file stays), and a shell
    holds the ledger's write lock (readers get through). The running daemon says the first in
    its log and metrics; doctor names both, the holder by its pid; both undone, all is ok."""
    import sqlite3

    stale = agent_file(tmp_path, time.time() - 3600)
    wait_until(
        "the prioritizer to see the stale agent file",
        lambda: total(scrape(pport), "slurm_dl_prioritizer_telemetry_stale_nodes") == 1,
        60,
    )
    metrics = scrape(pport)
    assert total(metrics, "slurm_dl_prioritizer_telemetry_fresh_nodes") == 0
    assert total(metrics, "slurm_dl_prioritizer_active") == 1
    age = total(metrics, "slurm_dl_prioritizer_telemetry_sample_age_seconds", node="gpu01")
    assert 3600 <= age < 3700, age
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # an sqlite3 shell left inside a transaction
    try:
        rc, result, text = doctor(env)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert rc == 1, text
    found = {x["check"]: x for x in result["findings"] if x["status"] == "fail"}
    writes = found["database writes"]
    assert f"held by process {os.getpid()} (" in writes["detail"], writes
    assert f"kill {os.getpid()}" in writes["fix"], writes
    samples = [x for x in result["findings"] if x["check"] == "gpu-agent samples"]
    assert [x["status"] for x in samples] == ["fail", "fail"], samples
    assert samples[0]["detail"].startswith(f"{stale}: newest sample 60 min old"), samples
    assert "idle detection is off" in samples[1]["detail"], samples
    assert "FAIL  database writes" in text and "FAIL  gpu-agent samples" in text, text
    log = (tmp_path / "prio.log").read_text()
    assert log.count("idle detection is off") == 1, log[-2000:]
    assert "is the gpu-agent on gpu01 running?" in log

    agent_file(tmp_path, time.time())
    cycles = total(scrape(pport), "slurm_dl_prioritizer_cycles_total", outcome="ok")
    wait_until(
        "a cycle saved after the lock went",
        lambda: (
            total(scrape(pport), "slurm_dl_prioritizer_cycles_total", outcome="ok") > cycles
            and total(scrape(pport), "slurm_dl_prioritizer_telemetry_fresh_nodes") == 1
        ),
        90,
    )
    log = (tmp_path / "prio.log").read_text()
    # A lock held past the lease makes the daemon stand down and lead again with its state
    # rebuilt from the store (a fresh watcher never said "off"); otherwise the watcher resumes.
    relead = "lost the leader lease (the database did not answer" in log
    assert "idle detection resumes" in log or (relead and "leading again at epoch" in log), log
    rc, result, text = doctor(env)
    assert rc == 0, text
