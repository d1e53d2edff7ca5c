"""Every GPU form and CPU / memory lever a user holds, through real sbatch on a live testbed with
the filter installed; the prioritizer's ledger and explain see the same GPU count.

Uses its own testbed (the shim changes every submission) and the real `slurm-dl filter serve`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from slurm_dl.store import Store
from slurm_dl.tags import parse_tag
from slurm_dl.testbed import Testbed, job_fields
from test_filter import CONFIG, REPO, FilterProcess, require_testbed_support


@pytest.fixture(scope="module")
def levers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, FilterProcess]]:
    require_testbed_support()
    root = tmp_path_factory.mktemp("levers-tb")
    tb = Testbed(root / "tb", nodes=4, gpus_per_node=8, gpu_type="h100")
    service = FilterProcess(root / "filter.sock", root / "filter.log")
    try:
        tb.up()
        service.start()
        out = subprocess.run(
            [sys.executable, "-m", "slurm_dl.cli.main", "filter", "install", "--config", str(CONFIG),
             "--slurm-conf-dir", str(tb.conf_dir), "--socket", str(service.sock)],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        yield tb, service
    finally:
        service.stop()
        tb.down()


def sbatch(tb: Testbed, *args: str, script: str = "#!/bin/sh\nsleep 0\n") -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args], input=script, env=tb.env(),
                          capture_output=True, text=True, timeout=60)


def wait_state(tb: Testbed, job_id: int, state: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while job_fields(job_id, tb.env()).get("JobState") != state:
        assert time.monotonic() < end, f"job {job_id} never reached {state}"
        time.sleep(0.5)


def test_gpus_per_task_job_is_counted_by_filter_ledger_and_explain(levers, tmp_path) -> None:
    tb, _ = levers
    out = sbatch(tb, "-n", "2", "--gpus-per-task=4", "-t", "5", script="#!/bin/sh\nsleep 120\n")
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    try:
        tag = parse_tag(job_fields(job_id, tb.env())["AdminComment"])
        assert tag is not None and tag.gpus == 8, tag
        wait_state(tb, job_id, "RUNNING")
        db = f"sqlite:///{tmp_path / 'prio.db'}"
        env = {**os.environ, **tb.env()}
        once = [sys.executable, "-m", "slurm_dl.cli.main", "prioritizer", "once", "--json", "--config", str(CONFIG),
                "--db", db]
        subprocess.run(once, env=env, check=True, capture_output=True, cwd=REPO)
        time.sleep(2)
        subprocess.run(once, env=env, check=True, capture_output=True, cwd=REPO)
        rec = Store(db).load_ledger().jobs[job_id]
        assert rec.attained_gpu_s > 0
        res = subprocess.run([sys.executable, "-m", "slurm_dl.cli.main", "explain", str(job_id), "--json",
                              "--config", str(CONFIG), "--db", db], env=env, capture_output=True, text=True, cwd=REPO)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["num_gpus"] == 8, doc
        # 8 GPUs for 2+ s: the ledger charges all eight, not one
        assert rec.attained_gpu_s >= 8 * 1.0, rec
    finally:
        subprocess.run(["scancel", str(job_id)], env=tb.env(), check=False)


@pytest.mark.parametrize("args, words", [
    (["--gpus=1", "--cpus-per-task=32"], ["32 CPUs", "at most 4", "Fix:"]),
    (["--gpus=1", "--exclusive"], ["--exclusive", "Fix:"]),
    (["--gpus=1", "--mem=240G"], ["31744M", "Fix:"]),
    (["-n", "4", "--ntasks-per-node=4", "--gpus-per-task=4"], ["16 GPUs per node", "Fix:"]),
])
def test_cpu_memory_and_per_node_levers_are_refused_with_a_fix(levers, args, words) -> None:
    tb, _ = levers
    out = sbatch(tb, "--hold", "-t", "5", *args)
    assert out.returncode != 0 and all(w in out.stderr for w in words), out.stderr
