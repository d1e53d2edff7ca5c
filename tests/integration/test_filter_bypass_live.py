"""Ways around the filter, tried live as an ordinary user (``nobody``) through real sbatch, srun,
salloc and scontrol, against the real filter service and the shim `slurm-dl filter install`
writes (its own testbed: 4 nodes x 8 GPUs, 32 CPUs and 250 GB each; 4 CPUs and 31 GB per GPU).

The site config is the testbed's with two changes that make the rows testable: partition gpu
allows 120 minutes (below class train's 1440, so the partition decides a time-limit raise), and
a user may hold 8 deadline jobs (so four 2-task arrays fill it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from slurm_dl.core.tags import parse_tag
from slurm_dl.testbed import Testbed, job_fields

from test_filter import REPO, FilterProcess, install_filter, require_testbed_support
from users import as_user

BASE = REPO / "site-configs" / "testbed.toml"


def site_config(path: Path) -> Path:
    text = BASE.read_text()
    text = text.replace("max_time_minutes = 2880", "max_time_minutes = 120", 1)
    text = text.replace(
        "[policy.deadline]\n", "[policy.deadline]\nmax_deadline_jobs_per_user = 8\n", 1
    )
    assert "max_time_minutes = 120" in text and "max_deadline_jobs_per_user = 8" in text
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def attacker() -> Iterator[tuple[Testbed, object]]:
    require_testbed_support()
    # nobody's batch scripts run from slurmd's spool: the testbed must be world-traversable
    root = Path(tempfile.mkdtemp(prefix="slurm-dl-bypass-"))
    root.chmod(0o755)
    config = site_config(root / "site.toml")
    tb = Testbed(
        root / "tb",
        nodes=4,
        gpus_per_node=8,
        gpu_type="h100",
        slurm=os.environ.get("SLURM_DL_TEST_SLURM") or None,
    )
    service = FilterProcess(root / "filter.sock", root / "filter.log", tb.env(), config=config)
    public = None
    try:
        tb.up()
        service.start()
        install_filter(tb, service.sock, config)
        run, public = as_user(tb)
        yield tb, run
    finally:
        subprocess.run(["scancel", "-u", "nobody"], env=tb.env(), check=False)
        service.stop()
        tb.down()
        if public is not None:
            shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def refusal(out: subprocess.CompletedProcess) -> str:
    """The filter's one-line message in a refused command's stderr."""
    assert out.returncode != 0, f"accepted: {out.stdout} {out.stderr}"
    lines = [line for line in out.stderr.splitlines() if "slurm-dl:" in line]
    assert len(lines) == 1, out.stderr
    return lines[0]


CAP_BYPASSES = [
    ["--ntasks-per-gpu=32", "--gpus=1"],
    ["--exclusive=user", "--gpus=1"],
    ["--exclusive=mcs", "--gpus=1"],
    ["-c", "32", "--mem=250G"],
    ["--ntasks-per-node=32", "--gpus=1"],
    ["-c", "32", "--gpus=1"],
    ["--mem=0", "--gpus=1"],
]


@pytest.mark.parametrize("args", CAP_BYPASSES, ids=lambda a: " ".join(a))
def test_each_way_around_the_cap_is_refused_in_sbatch_srun_and_salloc(attacker, args) -> None:
    tb, run = attacker
    for command in (
        ["sbatch", "--hold", "-o", "/dev/null", "-t", "5", *args, "--wrap", "true"],
        ["srun", "-t", "5", *args, "true"],
        ["salloc", "-t", "5", *args, "true"],
    ):
        line = refusal(run(*command))
        assert "Fix:" in line and len(line.split("error: ", 1)[-1]) < 400, line


def test_the_four_job_strand_attack_leaves_the_gpus_usable(attacker) -> None:
    """Four -c 32 --mem=250G jobs would each take a whole node's CPUs and memory and strand its
    8 GPUs: refused, and 32 one-GPU jobs after them all run."""
    tb, run = attacker
    for _ in range(4):
        assert "without a GPU" in refusal(
            run(
                "sbatch",
                "-o",
                "/dev/null",
                "-t",
                "5",
                "-c",
                "32",
                "--mem=250G",
                "--wrap",
                "sleep 30",
            )
        )
    ids = []
    for _ in range(32):
        out = run(
            "sbatch", "--parsable", "-o", "/dev/null", "-t", "5", "--gpus=1", "--wrap", "sleep 8"
        )
        assert out.returncode == 0, out.stderr
        ids.append(int(out.stdout.strip().split(";")[0]))
    end = time.monotonic() + 60
    while time.monotonic() < end:
        states = [job_fields(i, tb.env()).get("JobState") for i in ids]
        if all(s in ("RUNNING", "COMPLETED") for s in states):
            break
        time.sleep(1)
    assert all(s in ("RUNNING", "COMPLETED") for s in states), states  # all 32 GPUs in use at once
    subprocess.run(["scancel", *map(str, ids)], env=tb.env(), check=False)


def test_serve_is_refused_for_a_user_the_site_did_not_allow(attacker) -> None:
    tb, run = attacker
    line = refusal(
        run(
            "sbatch",
            "-o",
            "/dev/null",
            "-t",
            "60",
            "--gpus=1",
            "--comment=dl:class=serve",
            "--wrap",
            "true",
        )
    )
    assert "class serve is open to users root" in line and "nobody" in line
    # an srun session is interactive within its quota (4 GPUs per user), beyond it train, never serve
    out = run("srun", "-t", "5", "--gpus=1", "--comment=dl:class=serve", "true")
    assert out.returncode != 0 and "class serve" in out.stderr


def test_the_fifth_deadline_array_is_refused(attacker) -> None:
    """A quota of 8 deadline jobs per user: four 2-task arrays fill it, the fifth is refused
    (an array used to count as one job: four 50-task arrays put 200 in the queue)."""
    tb, run = attacker
    deadline = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() + 3 * 3600))
    args = [
        "sbatch",
        "--parsable",
        "--hold",
        "-o",
        "/dev/null",
        "-t",
        "30",
        "--gpus=1",
        "-a",
        "0-1",
        f"--comment=dl:deadline={deadline}",
        "--wrap",
        "true",
    ]
    ids = []
    try:
        for _ in range(4):
            out = run(*args)
            assert out.returncode == 0, out.stderr
            ids.append(out.stdout.strip().split(";")[0])
            assert (
                parse_tag(job_fields(int(ids[-1]), tb.env())["AdminComment"]).deadline is not None
            )
        assert "this array adds 2" in refusal(run(*args))
        big = [*args[:9], "0-49", *args[10:]]
        assert "this array adds 50" in refusal(run(*big))
    finally:
        subprocess.run(["scancel", *ids], env=tb.env(), check=False)


def test_a_time_limit_raise_past_the_partition_maximum_is_refused(attacker) -> None:
    tb, run = attacker
    out = run(
        "sbatch",
        "--parsable",
        "--hold",
        "-o",
        "/dev/null",
        "-t",
        "60",
        "--gpus=1",
        "--wrap",
        "true",
    )
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    try:
        raised = run("scontrol", "update", f"JobId={job}", "TimeLimit=200")
        assert raised.returncode != 0 and "time limit" in raised.stderr.lower(), raised.stderr
        assert job_fields(int(job), tb.env())["TimeLimit"] == "01:00:00"
        assert run("scontrol", "update", f"JobId={job}", "TimeLimit=100").returncode == 0
        log = (tb.state_dir / "log" / "slurmctld.log").read_text()
        assert re.search(
            rf"may not change time_limit of job {job} .*partition gpu maximum 120", log
        )
    finally:
        subprocess.run(["scancel", job], env=tb.env(), check=False)


def test_absurd_gpu_counts_do_not_open_the_breaker(attacker) -> None:
    """Each is refused with a message; the next ordinary job is still tagged and reshaped (the
    shim kept asking: only timeouts and refused connections open its breaker)."""
    tb, run = attacker
    for value in (
        "--gpus=" + "9" * 4400,
        "--gpus-per-node=" + "9" * 1000,
        "--gres=gpu:h100:" + "9" * 300,
    ):
        out = run("sbatch", "-o", "/dev/null", "-t", "5", value, "--wrap", "true")
        assert out.returncode != 0
    out = run(
        "sbatch",
        "--parsable",
        "--hold",
        "-o",
        "/dev/null",
        "-t",
        "5",
        "--gpus=16",
        "--wrap",
        "true",
    )
    assert out.returncode == 0, out.stderr
    job = int(out.stdout.strip().split(";")[0])
    fields = job_fields(job, tb.env())
    subprocess.run(["scancel", str(job)], env=tb.env(), check=False)
    assert parse_tag(fields["AdminComment"]).shape == "2x8"
    log = (tb.state_dir / "log" / "slurmctld.log").read_text()
    assert "failures in a row" not in log and "failure mode" not in log


def test_a_heterogeneous_jobs_components_share_the_first_ones_class(attacker) -> None:
    """A later component's own dl:class hint counts for nothing: it runs as the class the filter
    gave the first component (here train, checkpointable), not interactive or serve."""
    tb, run = attacker
    script = (
        "#!/bin/sh\n#SBATCH -t 5 --gpus=1 --comment=dl:ckpt=1 --requeue\n#SBATCH hetjob\n"
        "#SBATCH -t 5 --gpus=1 --comment=dl:class=interactive\ntrap 'exit 0' USR2\ntrue\n"
    )
    out = run("sbatch", "--parsable", "--hold", "-o", "/dev/null", stdin=script)
    assert out.returncode == 0, out.stderr
    leader = int(out.stdout.strip().split(";")[0].split("+")[0])
    try:
        tags = [parse_tag(job_fields(leader + i, tb.env())["AdminComment"]) for i in (0, 1)]
        assert [t.job_class.value for t in tags] == ["train", "train"], tags
        assert all(t.checkpointable for t in tags)
    finally:
        subprocess.run(["scancel", str(leader)], env=tb.env(), check=False)
