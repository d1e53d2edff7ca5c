"""Accounts are not taken on trust: on a cluster with slurmdbd that does not enforce associations
(the accounting testbed), the filter refuses an account the user has no association with, so
``--account=made-up`` buys no fresh fair-share factor and opens no class restricted by account.
Tried as user ``nobody``, who is given one association (account ``dl``).

The same testbed runs the prioritizer as ``nobody``, a user that is not SlurmUser: without
operator rights it says at start what to run, its cycle is failed and doctor says so; with
them (``sacctmgr modify user nobody set adminlevel=operator``) its SiteFactors take, and the
filter's shim lets it move jobs between partitions once ``[prioritizer] user`` names it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


import json
import sys

import pytest

from slurm_dl.slurm import CliBackend
from slurm_dl.testbed import Testbed, submit, wait_for_job_state
from slurm_dl.testbed.client import run_client
from slurm_dl.testbed.site_toml import with_setting

from test_filter import CONFIG, REPO, FilterProcess, install_filter, require_testbed_support
from users import as_user, user_python


@pytest.fixture(scope="module")
def accounting_bed():
    """A 1 x 8 H100 testbed with slurmdbd, the filter installed, and user nobody in account dl."""
    require_testbed_support()
    root = Path(tempfile.mkdtemp(prefix="slurm-dl-accounts-"))
    root.chmod(0o755)
    tb = Testbed(
        root / "tb",
        nodes=1,
        gpus_per_node=8,
        gpu_type="h100",
        accounting=True,
        slurm=os.environ.get("SLURM_DL_TEST_SLURM") or None,
    )
    service = FilterProcess(root / "filter.sock", root / "filter.log", tb.env())
    try:
        tb.up()
        run_client(["sacctmgr", "-i", "add", "user", "nobody", "account=dl"], tb.env(), timeout=60)
        service.start()
        install_filter(tb, service.sock)
        yield tb, service, root
    finally:
        service.stop()
        tb.down()
        shutil.rmtree(root, ignore_errors=True)


def test_an_account_the_user_has_no_association_with_is_refused(accounting_bed) -> None:
    tb, service, root = accounting_bed
    public = None
    try:
        run, public = as_user(tb)
        args = [
            "sbatch",
            "--parsable",
            "--hold",
            "-o",
            "/dev/null",
            "-t",
            "5",
            "--gpus=1",
            "--wrap",
            "true",
        ]
        end = time.monotonic() + 30  # the service reads the associations in the background at start
        while True:
            refused = run(*args, "--account=made-up")
            if refused.returncode != 0 or time.monotonic() > end:
                break
            subprocess.run(
                ["scancel", refused.stdout.strip().split(";")[0]], env=tb.env(), check=False
            )
            time.sleep(1)
        assert refused.returncode != 0, refused.stdout
        assert (
            "account 'made-up' is not one of yours" in refused.stderr
            and "yours: dl" in refused.stderr
        )
        mine = run(*args, "--account=dl")
        assert mine.returncode == 0, mine.stderr
        subprocess.run(["scancel", mine.stdout.strip().split(";")[0]], env=tb.env(), check=False)
    finally:
        if public is not None:
            shutil.rmtree(public, ignore_errors=True)


def _doctor_rights(tb: Testbed, config: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "slurm_dl.cli.main", "doctor", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **tb.env()},
        timeout=120,
    )
    found = [x for x in json.loads(out.stdout)["findings"] if x["check"] == "prioritizer rights"]
    assert len(found) == 1, out.stdout
    return found[0]


def test_a_prioritizer_without_operator_rights_says_so_then_works_once_granted(
    accounting_bed,
) -> None:
    tb, service, root = accounting_bed
    env = tb.env()
    state = root / "nobody-prio"
    state.mkdir()
    state.chmod(0o777)
    config = root / "prio-as-nobody.toml"
    config.write_text(with_setting(CONFIG.read_text(), "prioritizer", "user", "nobody"))
    config.chmod(0o644)
    bin_dir = user_python()
    run, public = as_user(tb)
    ids: list[int] = []
    once = [
        str(bin_dir / "slurm-dl"),
        "prioritizer",
        "once",
        "--config",
        str(config),
        "--db",
        f"sqlite:///{state / 'ledger.db'}",
    ]
    try:
        hog = submit("#!/bin/bash\nsleep 600\n", env, ["-o", "/dev/null", "-t", "20", "--gpus=8"])
        ids.append(hog)
        wait_for_job_state(hog, env, ("RUNNING",), timeout=60)
        for _ in range(2):  # two waiting jobs: the prioritizer ranks them apart
            ids.append(
                submit("#!/bin/bash\ntrue\n", env, ["-o", "/dev/null", "-t", "5", "--gpus=1"])
            )
        # 1. no operator rights: told at start what to run; the cycle is failed, not ok
        denied = run(*once, "--init")
        assert denied.returncode == 1, denied.stdout + denied.stderr
        assert "sacctmgr modify user nobody set adminlevel=operator" in denied.stderr
        lines = denied.stderr.splitlines()
        said = [i for i, line in enumerate(lines) if "cannot change jobs" in line]
        fix = [i for i, line in enumerate(lines) if line.startswith("Fix: sacctmgr")]
        assert said and fix and said[0] < fix[0], denied.stderr
        assert all(len(line) <= 80 for line in lines[said[0] : fix[0] + 1]), denied.stderr
        assert "every Slurm update failed" in denied.stdout, denied.stdout
        assert "for lack of rights" in denied.stdout
        assert "Invalid user id" in denied.stderr, denied.stderr  # Slurm's own words, logged
        assert not any(CliBackend(env).site_factors().get(j) for j in ids[1:])
        rights = _doctor_rights(tb, config)
        assert rights["status"] == "fail" and "adminlevel=operator" in rights["fix"], rights
        # 2. the shim refuses an untrusted user's partition change (a GPU-type move) ...
        run_client(
            ["sacctmgr", "-i", "modify", "user", "nobody", "set", "adminlevel=operator"],
            env,
            timeout=60,
        )
        partition = job_partition(tb, ids[1])
        move = ("scontrol", "update", f"JobId={ids[1]}", f"Partition={partition}")
        wait_for_operator = time.monotonic() + 30  # slurmctld learns AdminLevel from slurmdbd
        while True:
            refused = run(*move)
            if "Invalid user id" not in refused.stderr or time.monotonic() > wait_for_operator:
                break
            time.sleep(1)
        assert refused.returncode != 0 and "Access/permission denied" in refused.stderr, (
            refused.stderr
        )
        log = (tb.layout.log_dir / "slurmctld.log").read_text(errors="replace")
        assert f"uid 65534 may not change partition of job {ids[1]}" in log
        # ... and lets it through once filter install reads [prioritizer] user
        install_filter(tb, service.sock, config)
        moved = run(*move)
        assert moved.returncode == 0, moved.stderr
        # 3. with operator rights: SiteFactors take, the cycle is ok, doctor agrees
        ok = run(*once)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "every Slurm update failed" not in ok.stdout and "cannot change" not in ok.stderr
        assert any(CliBackend(env).site_factors().get(j) for j in ids[1:]), ok.stdout
        rights = _doctor_rights(tb, config)
        assert rights["status"] == "ok" and "Operator" in rights["detail"], rights
    finally:
        subprocess.run(["scancel", *map(str, ids)], env=env, check=False)
        install_filter(tb, service.sock)
        shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(bin_dir.parent.parent, ignore_errors=True)


def job_partition(tb: Testbed, job: int) -> str:
    from slurm_dl.testbed import job_fields

    return job_fields(job, tb.env())["Partition"]
