"""Steering between GPU types, live on a mixed testbed (``--gpus v100:2x8,h100:2x8``: the slow
type's nodes come first, so Slurm alone puts an untyped job on a V100), with the real filter and
the real prioritizer daemon:

* a job that accepts both types starts on the faster free one;
* a job that names a type never moves;
* an opted-in job that had to start on V100 (the H100s were full) moves once to the H100s when
  they free with nobody waiting for them, and not back;
* the ledger charges at each type's speed; ``explain`` shows the choice.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.tags import parse_tag
from slurm_dl.store import Store
from slurm_dl.testbed import Testbed, job_fields, submit

from conftest import TEST_SLURM, require_testbed_support
from polling import wait_until
from test_filter import REPO, FilterProcess, install_filter

SPEC = "v100:2x8,h100:2x8"
V100, H100 = {"gpu01", "gpu02"}, {"gpu03", "gpu04"}
TRAP = "#!/bin/bash\ntrap 'echo USR2; exit 0' USR2\nwhile true; do sleep 1 & wait $!; done\n"


def nodes_of(tb: Testbed, job: int) -> set[str]:
    from slurm_dl.core.hostlist import expand_hostlist

    text = job_fields(job, tb.env()).get("NodeList", "")
    return set(expand_hostlist(text)) if text and text != "(null)" else set()


def state(tb: Testbed, job: int) -> str:
    return job_fields(job, tb.env()).get("JobState", "")


def test_jobs_are_steered_to_the_type_where_they_run_best(tmp_path: Path) -> None:
    require_testbed_support()
    root = Path(tempfile.mkdtemp(prefix="slurm-dl-types-"))
    root.chmod(0o755)
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "testbed",
            "up",
            "--dir",
            str(root / "tb"),
            "--gpus",
            SPEC,
            *(["--slurm", TEST_SLURM] if TEST_SLURM else []),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    tb = Testbed(root / "tb")
    config = tb.layout.site_config
    env = tb.env()
    service = FilterProcess(root / "filter.sock", root / "filter.log", env, config=config)
    daemon = None
    ids: list[int] = []
    try:
        assert up.returncode == 0, up.stderr
        assert load_config(config).gpu_type_names == ["v100", "h100"]
        service.start()
        install_filter(tb, service.sock, config)
        db = f"sqlite:///{root / 'prio.db'}"
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "slurm_dl.cli.main",
                "prioritizer",
                "run",
                "--init",
                "--config",
                str(config),
                "--db",
                db,
                "--verbose",
            ],
            env={**os.environ, **env},
            stdout=open(root / "prio.log", "a"),
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )

        def sub(*args: str, script: str = "#!/bin/bash\nsleep 600\n") -> int:
            ids.append(submit(script, env, ["-o", "/dev/null", "-t", "20", *args]))
            return ids[-1]

        # 1. accepts both: starts on the faster free type (Slurm alone would take gpu01, a V100)
        both = sub("--gpus=1")
        wait_until("the untyped job to run", lambda: state(tb, both) == "RUNNING", 60)
        assert nodes_of(tb, both) <= H100, nodes_of(tb, both)
        assert parse_tag(job_fields(both, env)["AdminComment"]).gpu_types == ("v100", "h100")
        # 2. names a type: keeps it
        named = sub("--gres=gpu:v100:1")
        wait_until("the typed job to run", lambda: state(tb, named) == "RUNNING", 60)
        assert nodes_of(tb, named) <= V100
        # 3. the H100s full (15 more of their 16 GPUs: a hog naming h100), an opted-in job that
        # accepts both starts on V100; when the hog ends it moves to H100 once, and not back
        hog = sub("--gres=gpu:h100:8", "-N1")
        hog2 = sub("--gres=gpu:h100:7", "-N1")
        wait_until(
            "the H100s to fill",
            lambda: state(tb, hog) == "RUNNING" and state(tb, hog2) == "RUNNING",
            60,
        )
        # 3a. a deadline job that makes it only at h100 speed (20 min there, 60 on v100, due in
        # 40 min) waits for the H100s instead of starting on the free V100s
        due = sub("--gpus=8", "--comment=dl:deadline=40m")
        time.sleep(4 * load_config(config).prioritizer.interval_seconds)
        assert state(tb, due) == "PENDING", nodes_of(tb, due)
        said = Store(db).explanation(due) or {}
        assert "would finish after its deadline" in str(said.get("gpu_types")), said
        subprocess.run(["scancel", str(due)], env=env, check=True)
        mover = sub(
            "--gpus=8",
            "--requeue",
            "--comment=dl:ckpt=1",
            script="#!/bin/bash\n#SBATCH --signal=B:USR2@10\n" + TRAP.split("\n", 1)[1],
        )
        wait_until("the opted-in job to run on V100", lambda: state(tb, mover) == "RUNNING", 90)
        assert nodes_of(tb, mover) <= V100
        time.sleep(load_config(config).preemption.min_runtime_seconds + 1)
        subprocess.run(["scancel", str(hog), str(hog2)], env=env, check=True)
        wait_until(
            "the opted-in job to be requeued",
            lambda: int(job_fields(mover, env).get("Restarts", 0)) >= 1,
            120,
        )
        wait_until("it to run again", lambda: state(tb, mover) == "RUNNING", 120)
        assert nodes_of(tb, mover) <= H100, nodes_of(tb, mover)
        time.sleep(12)  # several cycles: no move back
        assert int(job_fields(mover, env)["Restarts"]) == 1 and state(tb, mover) == "RUNNING"
        assert nodes_of(tb, named) <= V100 and int(job_fields(named, env)["Restarts"]) == 0
        # 4. charges at the type's speed, and explain says what was chosen
        store = Store(db)
        ledger = store.load_ledger()
        rec = ledger.jobs[both]
        assert rec.gpu_type == "h100" and rec.attained_gpu_s > 2.5 * rec.executed_s, (
            rec
        )  # 1 GPU at 3.0
        rows = [r for r in store.preemptions() if r.victim_job_id == mover]
        assert (
            len(rows) == 1
            and rows[0].need_job_id == mover
            and "move from v100 to h100" in rows[0].reason
        )
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "slurm_dl.cli.main",
                "explain",
                str(mover),
                "--config",
                str(config),
                "--db",
                db,
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, **env},
        )
        assert out.returncode == 0, out.stderr
        assert re.search(r"GPU type: +accepts v100 1x", out.stdout) and "h100 3x" in out.stdout, (
            out.stdout
        )
    finally:
        if ids:
            subprocess.run(["scancel", *map(str, ids)], env=env, check=False)
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
        service.stop()
        tb.down()
        if os.environ.get("SLURM_DL_KEEP"):
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
