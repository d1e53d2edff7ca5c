"""Every GPU form and CPU / memory lever a user holds, through real sbatch on a live testbed with
the filter installed; the prioritizer's ledger and explain see the same GPU count.

Uses its own testbed (the shim changes every submission) and the real `slurm-dl filter serve`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Iterator

import pytest

from slurm_dl.store import Store
from slurm_dl.core.tags import parse_tag
from slurm_dl.testbed import Testbed, job_fields
from test_filter import CONFIG, REPO, FilterProcess, install_filter, require_testbed_support
from users import as_user


@pytest.fixture(scope="module")
def levers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, FilterProcess]]:
    require_testbed_support()
    root = tmp_path_factory.mktemp("levers-tb")
    config = root / "site.toml"
    text = CONFIG.read_text().replace(
        '[classes.serve]\nallow_users = ["root"]\nmax_gpus_per_user = 8\n',
        '[classes.serve]\nallow_accounts = ["serving"]\nmax_gpus_per_user = 4\n',
    )
    assert 'allow_accounts = ["serving"]' in text
    config.write_text(text)
    tb = Testbed(
        root / "tb",
        nodes=4,
        gpus_per_node=8,
        gpu_type="h100",
        slurm=os.environ.get("SLURM_DL_TEST_SLURM") or None,
    )
    service = FilterProcess(root / "filter.sock", root / "filter.log", tb.env(), config=config)
    try:
        tb.up()
        service.start()
        install_filter(tb, service.sock, config)
        yield tb, service
    finally:
        service.stop()
        tb.down()


def sbatch(
    tb: Testbed, *args: str, script: str = "#!/bin/sh\nsleep 0\n"
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", *args],
        input=script,
        env=tb.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


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
        once = [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "prioritizer",
            "once",
            "--init",
            "--json",
            "--config",
            str(CONFIG),
            "--db",
            db,
        ]
        subprocess.run(once, env=env, check=True, capture_output=True, cwd=REPO)
        time.sleep(2)
        subprocess.run(once, env=env, check=True, capture_output=True, cwd=REPO)
        rec = Store(db).load_ledger().jobs[job_id]
        assert rec.attained_gpu_s > 0
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "slurm_dl.cli.main",
                "explain",
                str(job_id),
                "--json",
                "--config",
                str(CONFIG),
                "--db",
                db,
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["num_gpus"] == 8, doc
        # 8 GPUs for 2+ s: the ledger charges all eight, not one
        assert rec.attained_gpu_s >= 8 * 1.0, rec
    finally:
        subprocess.run(["scancel", str(job_id)], env=tb.env(), check=False)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--gpus=1", "--cpus-per-task=32"], ["32 CPUs", "at most 4", "Fix:"]),
        (["--gpus=1", "--exclusive"], ["--exclusive", "Fix:"]),
        (["--gpus=1", "--mem=240G"], ["31744M", "Fix:"]),
        (["-n", "4", "--ntasks-per-node=4", "--gpus-per-task=4"], ["16 GPUs per node", "Fix:"]),
    ],
)
def test_cpu_memory_and_per_node_levers_are_refused_with_a_fix(levers, args, words) -> None:
    tb, _ = levers
    out = sbatch(tb, "--hold", "-t", "5", *args)
    assert out.returncode != 0 and all(w in out.stderr for w in words), out.stderr


@pytest.fixture
def as_nobody(levers):
    """Run Slurm commands as user nobody, with a readable copy of the client configuration."""
    tb, _ = levers
    run, public = as_user(tb)
    yield run
    shutil.rmtree(public, ignore_errors=True)


def test_user_cannot_raise_time_past_the_class_max_or_grow_cpus_after_submission(
    levers, as_nobody
) -> None:
    tb, _ = levers
    out = as_nobody(
        "sbatch",
        "--parsable",
        "--hold",
        "-o",
        "/dev/null",
        "--gres=gpu:1",
        "-t",
        "30",
        "--comment=dl:class=interactive",
        "--wrap",
        "sleep 60",
    )
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    try:
        assert (
            parse_tag(job_fields(job_id, tb.env())["AdminComment"]).job_class.value == "interactive"
        )
        refused = as_nobody("scontrol", "update", f"JobId={job_id}", "TimeLimit=2000")
        assert refused.returncode != 0, refused.stdout
        for change in ("NumCPUs=32", "MinMemoryNode=200000", "Comment=dl:class=serve"):
            r = as_nobody("scontrol", "update", f"JobId={job_id}", change)
            assert r.returncode != 0, (change, r.stdout)
        within = as_nobody("scontrol", "update", f"JobId={job_id}", "TimeLimit=100")
        assert within.returncode == 0, within.stderr  # up to the class max stays the user's call
        fields = job_fields(job_id, tb.env())
        assert fields["TimeLimit"] == "01:40:00" and fields["NumCPUs"] == "1"
        log = (tb.state_dir / "log" / "slurmctld.log").read_text()
        assert "may not change time_limit" in log and "class maximum 120" in log
    finally:
        subprocess.run(["scancel", str(job_id)], env=tb.env(), check=False)


def test_serve_from_an_account_not_on_the_list_is_refused_and_the_quota_counts_live_jobs(
    levers, as_nobody
) -> None:
    tb, service = levers
    service.start()
    serve = [
        "sbatch",
        "--parsable",
        "--hold",
        "-o",
        "/dev/null",
        "-t",
        "60",
        "--comment=dl:class=serve",
        "--wrap",
        "sleep 60",
    ]
    out = as_nobody(*serve, "-A", "physics", "--gres=gpu:2")
    assert out.returncode != 0
    assert (
        "class serve is open to accounts serving, not to account 'physics'" in out.stderr
        and "Fix:" in out.stderr
    )
    ok = as_nobody(*serve, "-A", "serving", "--gres=gpu:3")
    assert ok.returncode == 0, ok.stderr
    first = int(ok.stdout.strip().split(";")[0])
    try:
        assert parse_tag(job_fields(first, tb.env())["AdminComment"]).job_class.value == "serve"
        over = as_nobody(*serve, "-A", "serving", "--gres=gpu:2")  # 3 held + 2 > 4
        assert over.returncode != 0 and "allows 4 GPU(s) per user" in over.stderr, over.stderr
    finally:
        subprocess.run(["scancel", str(first)], env=tb.env(), check=False)
    # the cancelled job leaves the live jobs: once the service re-reads them the quota is free again
    end = time.monotonic() + 40
    while True:
        again = as_nobody(*serve, "-A", "serving", "--gres=gpu:2")
        if again.returncode == 0 or time.monotonic() > end:
            break
        time.sleep(2)
    assert again.returncode == 0, again.stderr
    subprocess.run(["scancel", again.stdout.strip().split(";")[0]], env=tb.env(), check=False)


def test_breaker_opens_on_a_hung_service_and_closes_when_it_answers_again(levers) -> None:
    """SIGSTOP the service: only the first breaker_failures submissions wait for the timeout, the
    rest go in unchanged without asking; after SIGCONT and the cool-down a probe closes it."""
    tb, service = levers
    service.start()
    log_path = tb.state_dir / "log" / "slurmctld.log"
    before = log_path.read_text()
    os.kill(service.proc.pid, signal.SIGSTOP)
    ids = []
    try:
        outs: list[subprocess.CompletedProcess] = []
        threads = [
            threading.Thread(
                target=lambda: outs.append(sbatch(tb, "--hold", "--gres=gpu:1", "-t", "5"))
            )
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
        ids = [int(o.stdout.strip().split(";")[0]) for o in outs]
        new = log_path.read_text()[len(before) :]
        assert new.count("no answer within") == 3, new  # breaker_failures = 3 in the testbed config
        assert "3 failures in a row; not asking the service for 5.0 s" in new
        assert all(parse_tag(job_fields(j, tb.env()).get("AdminComment", "")) is None for j in ids)
    finally:
        os.kill(service.proc.pid, signal.SIGCONT)
    time.sleep(5.5)  # the cool-down
    fields = None
    end = time.monotonic() + 30
    while fields is None or parse_tag(fields.get("AdminComment", "")) is None:
        assert time.monotonic() < end, "the breaker never closed"
        out = sbatch(tb, "--hold", "--gres=gpu:1", "-t", "5")
        ids.append(int(out.stdout.strip().split(";")[0]))
        fields = job_fields(ids[-1], tb.env())
    assert "the service answers again" in log_path.read_text()
    subprocess.run(["scancel", *map(str, ids)], env=tb.env(), check=False)


def test_switch_requests_are_ones_the_tree_can_satisfy(levers) -> None:
    """The testbed has two leaf switches of two nodes: four nodes cannot sit under one."""
    tb, service = levers
    service.start()
    end = time.monotonic() + 30  # the service reads the tree when it starts; give it a moment
    while True:
        two = sbatch(tb, "--hold", "-t", "5", "-N2", "--gpus-per-node=8")
        f2 = job_fields(int(two.stdout.strip().split(";")[0]), tb.env())
        subprocess.run(["scancel", f2["JobId"]], env=tb.env(), check=False)
        if f2.get("Switches", "").startswith("1@") or time.monotonic() > end:
            break
        time.sleep(1)
    assert f2["Switches"].startswith("1@"), f2.get("Switches")
    four = sbatch(tb, "--hold", "-t", "5", "-N4", "--gpus-per-node=8")
    assert four.returncode == 0, four.stderr
    f4 = job_fields(int(four.stdout.strip().split(";")[0]), tb.env())
    subprocess.run(["scancel", f4["JobId"]], env=tb.env(), check=False)
    assert not f4.get("Switches", "0").startswith("1@"), f4.get("Switches")


def test_user_cannot_clear_requeue_of_a_checkpointable_job(levers, as_nobody) -> None:
    tb, service = levers
    service.start()
    out = as_nobody(
        "sbatch",
        "--parsable",
        "--hold",
        "-o",
        "/dev/null",
        "--gres=gpu:1",
        "-t",
        "30",
        "--comment=dl:ckpt=1",
        "--wrap",
        "trap 'exit 0' USR2; sleep 60",
    )
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    try:
        fields = job_fields(job_id, tb.env())
        assert parse_tag(fields["AdminComment"]).checkpointable and fields["Requeue"] == "1"
        refused = as_nobody("scontrol", "update", f"JobId={job_id}", "Requeue=0")
        assert refused.returncode != 0
        hint = as_nobody("scontrol", "update", f"JobId={job_id}", "Comment=dl:ckpt=0")
        assert hint.returncode != 0
        assert job_fields(job_id, tb.env())["Requeue"] == "1"
    finally:
        subprocess.run(["scancel", str(job_id)], env=tb.env(), check=False)
