"""Accounts are not taken on trust: on a cluster with slurmdbd that does not enforce associations
(the accounting testbed), the filter refuses an account the user has no association with, so
``--account=made-up`` buys no fresh fair-share factor and opens no class restricted by account.
Tried as user ``nobody``, who is given one association (account ``dl``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


from slurm_dl.testbed import Testbed
from slurm_dl.testbed.client import run_client

from test_filter import FilterProcess, install_filter, require_testbed_support
from users import as_user


def test_an_account_the_user_has_no_association_with_is_refused() -> None:
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
    public = None
    try:
        tb.up()
        run_client(["sacctmgr", "-i", "add", "user", "nobody", "account=dl"], tb.env(), timeout=60)
        service.start()
        install_filter(tb, service.sock)
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
        service.stop()
        tb.down()
        if public is not None:
            shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
