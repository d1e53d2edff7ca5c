"""The job_submit filter on a live testbed, through real sbatch.

Uses its OWN testbed (installing job_submit.lua into the shared session cluster would change
every other test), the real `slurm-dl filter serve` process, and the shim installed by
`slurm-dl filter install`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from slurm_dl.core.tags import parse_tag
from slurm_dl.testbed import Testbed, job_fields, submit, wait_for_job_state

from slurm_dl.core.errors import SlurmNotInstalledError
from users import as_user
from slurm_dl.testbed.install import find_slurm

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"
SCRIPT = "#!/bin/sh\nsleep 0\n"
TRAPPED = "#!/bin/bash\n#SBATCH --signal=B:USR2@45\ntrap 'exit 0' USR2\nsleep 0\n"


def require_testbed_support() -> None:
    """Skip without Slurm or root, as the shared fixtures do; under CI that is a failure instead."""
    reason = None
    try:
        find_slurm()
    except SlurmNotInstalledError as e:
        reason = str(e)
    if reason is None and os.geteuid() != 0:
        reason = "the testbed needs root (slurmd and mknod)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the integration tests, but: {reason}", pytrace=False)
        pytest.skip(reason)


class FilterProcess:
    """`slurm-dl filter serve` as a child process of the test."""

    def __init__(
        self, sock: Path, log: Path, env: dict[str, str] | None = None, config: Path = CONFIG
    ):
        self.sock, self.log, self.config = sock, log, config
        self.env = {
            **os.environ,
            **(env or {}),
        }  # SLURM_CONF: it reads live jobs and the switch tree
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "slurm_dl.cli.main",
                "filter",
                "serve",
                "--config",
                str(self.config),
                "--socket",
                str(self.sock),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("a"),
            env=self.env,
        )
        for _ in range(300):
            if self.sock.exists():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"filter service did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
        self.proc = None


class HungPeer:
    """A socket at the service's path that accepts connections and never answers."""

    def __init__(self, sock: Path):
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(sock))
        self.srv.listen(16)
        self.sock = sock
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.srv.close()
        for c in self.conns:
            c.close()
        self.sock.unlink(missing_ok=True)


def install_filter(tb: Testbed, sock: Path, config: Path = CONFIG) -> None:
    """`slurm-dl filter install` of the shim for the service on ``sock`` into ``tb``'s slurm.conf dir."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "filter",
            "install",
            "--config",
            str(config),
            "--slurm-conf-dir",
            str(tb.conf_dir),
            "--socket",
            str(sock),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def install_cli_filter(tb: Testbed) -> None:
    """What the admin docs say: `slurm-dl filter cli-filter` as cli_filter.lua next to slurm.conf."""
    out = subprocess.run(
        [sys.executable, "-m", "slurm_dl.cli.main", "filter", "cli-filter"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (tb.conf_dir / "cli_filter.lua").write_text(out.stdout)


@contextlib.contextmanager
def filtered_testbed(root: Path, nodes: int) -> Iterator[tuple[Testbed, FilterProcess]]:
    """A testbed of ``nodes`` x 8 H100 (the release SLURM_DL_TEST_SLURM names) with the filter
    service installed in front of slurmctld, torn down on leaving."""
    require_testbed_support()
    tb = Testbed(
        root / "tb",
        nodes=nodes,
        gpus_per_node=8,
        gpu_type="h100",
        slurm=os.environ.get("SLURM_DL_TEST_SLURM") or None,
        extra_conf=("CliFilterPlugins=cli_filter/lua",),  # sbatch's --signal, as a site has it
    )
    service = FilterProcess(root / "filter.sock", root / "filter.log", tb.env())
    try:
        tb.up()
        install_cli_filter(tb)
        service.start()
        install_filter(tb, service.sock)
        yield tb, service
    finally:
        service.stop()
        tb.down()


@pytest.fixture(scope="module")
def filtered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, FilterProcess]]:
    with filtered_testbed(tmp_path_factory.mktemp("filter-tb"), 4) as both:
        yield both


def gres(tres: str) -> str:
    """``gres:gpu:8`` (22.05) and ``gres/gpu:8`` (23.02 and later) -> ``gpu:8``."""
    return tres.removeprefix("gres:").removeprefix("gres/")


def sbatch(tb: Testbed, *args: str, script: str = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sbatch", "--parsable", "--hold", *args],
        input=script,
        env=tb.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def accepted_job(tb: Testbed, *args: str, script: str = SCRIPT) -> tuple[dict[str, str], str]:
    out = sbatch(tb, *args, script=script)
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    fields = job_fields(job_id, tb.env())
    subprocess.run(["scancel", str(job_id)], env=tb.env(), check=False)
    return fields, out.stderr


def scheduling_works(tb: Testbed, tmp_path: Path) -> None:
    """slurmctld still starts and finishes jobs."""
    job_id = submit(SCRIPT, tb.env(), ["--gres=gpu:1", "-t", "5", f"--output={tmp_path}/%j.out"])
    wait_for_job_state(job_id, tb.env(), ("COMPLETED",), timeout=60)


def test_unknown_gpu_type_is_rejected_with_what_exists(filtered) -> None:
    tb, service = filtered
    service.start()
    out = sbatch(tb, "--gres=gpu:nosuchgpu:1")
    assert out.returncode != 0
    assert "nosuchgpu" in out.stderr and "h100" in out.stderr and "Fix:" in out.stderr


def test_gpus_16_becomes_two_nodes_with_gres_and_switch(filtered) -> None:
    tb, service = filtered
    service.start()
    fields, _ = accepted_job(tb, "--gpus=16")
    assert fields["NumNodes"] == "2-2" or fields["NumNodes"] == "2"
    assert gres(fields["TresPerNode"]) == "gpu:8" and "TresPerJob" not in fields
    assert fields["Switches"].startswith("1@")
    assert parse_tag(fields["AdminComment"]).shape == "2x8"


def test_tags_land_in_admin_comment_and_user_text_does_not_survive(filtered) -> None:
    tb, service = filtered
    service.start()
    forged = "sdl1:class=serve;ckpt=1;gpus=8;shape=any"
    help_text = subprocess.run(
        ["sbatch", "--help"], env=tb.env(), capture_output=True, text=True
    ).stdout
    if "--admin-comment" in help_text:
        fields, _ = accepted_job(tb, "--gres=gpu:1", f"--admin-comment={forged}")
    else:
        # Slurm 22.05's sbatch has no --admin-comment: the user cannot even send one.
        refused = sbatch(tb, "--gres=gpu:1", f"--admin-comment={forged}")
        assert refused.returncode != 0 and "admin-comment" in refused.stderr
        fields, _ = accepted_job(tb, "--gres=gpu:1", f"--comment={forged}")
    tag = parse_tag(fields["AdminComment"])
    assert tag is not None and fields["AdminComment"] != forged
    assert tag.job_class.value == "train" and tag.gpus == 1 and not tag.checkpointable


def test_only_a_job_that_declares_a_handler_is_tagged_checkpointable(filtered) -> None:
    """Preemption is opt-in: a plain GPU job keeps its own requeue setting and is never tagged
    checkpointable; dl:ckpt=1 (batch shell) and dl:ckpt=steps (srun steps) are."""
    tb, service = filtered
    service.start()
    plain, _ = accepted_job(tb, "--gpus=8", "--no-requeue")
    assert not parse_tag(plain["AdminComment"]).checkpointable and plain["Requeue"] == "0"
    batch, _ = accepted_job(tb, "--gpus=1", "--comment=dl:ckpt=1", script=TRAPPED)
    tag = parse_tag(batch["AdminComment"])
    assert tag.checkpointable and tag.signal_target == "batch" and batch["Requeue"] == "1"
    assert tag.signal == "USR2" and tag.lead_s == 45  # its own #SBATCH --signal=B:USR2@45
    # a batch shell that traps nothing would die of the signal: never a victim, and told so
    untrapped, told = accepted_job(tb, "--gpus=1", "--comment=dl:ckpt=1")
    assert not parse_tag(untrapped["AdminComment"]).checkpointable and "does not trap USR2" in told
    steps, _ = accepted_job(
        tb,
        "--gpus=1",
        "--comment=dl:ckpt=steps",
        "--signal=USR2@30",
        script="#!/bin/sh\nsrun true\n",
    )
    assert parse_tag(steps["AdminComment"]).signal_target == "steps"
    # submitit's script says --signal=USR2@90 (its steps) whatever dl:ckpt says
    submitit, told = accepted_job(
        tb,
        "--gpus=1",
        "--comment=dl:ckpt=1",
        "--requeue",
        script="#!/bin/bash\n#SBATCH --signal=USR2@90\nsrun true\n",
    )
    tag = parse_tag(submitit["AdminComment"])
    assert (
        tag.checkpointable
        and tag.signal_target == "steps"
        and tag.lead_s == 90
        and "--signal=USR2@90" in told
    )
    fields, told = accepted_job(tb, "--gpus=1", "--comment=dl:ckpt=1", "--no-requeue")
    assert not parse_tag(fields["AdminComment"]).checkpointable and "will not be preempted" in told


def test_the_command_lines_signal_is_the_jobs_signal_on_every_release(filtered) -> None:
    """`sbatch --signal=B:USR2@60 --comment=dl:ckpt=1` over a script that gives none (or another)
    is signalled 60 s ahead, not with the site's lead: the command line wins, as in Slurm. As
    user nobody, from /, with the release's own sbatch."""
    tb, service = filtered
    service.start()
    trap, steps = "#!/bin/bash\ntrap 'exit 0' USR2\nsleep 0\n", "#!/bin/bash\nsrun true\n"
    for args, script, want in [
        (("--signal=B:USR2@60", "--comment=dl:ckpt=1"), trap, ("batch", 60)),
        (("--signal=B:USR2", "--comment=dl:ckpt=1"), trap, ("batch", 60)),  # sbatch's own @60
        (("--signal=USR2@200", "--comment=dl:ckpt=steps"), steps, ("steps", 200)),
    ]:
        fields, _ = as_nobody_accepted(tb, *args, script=script)
        tag = parse_tag(fields["AdminComment"])
        assert (tag.signal, tag.signal_target, tag.lead_s) == ("USR2", *want), (args, fields)
    fields, _ = as_nobody_accepted(tb, "--signal=B:USR2@30", "--comment=dl:ckpt=1", script=TRAPPED)
    assert parse_tag(fields["AdminComment"]).lead_s == 30  # over the script's @45
    fields, _ = as_nobody_accepted(tb, "--comment=dl:ckpt=1", script=TRAPPED)
    assert parse_tag(fields["AdminComment"]).lead_s == 45 and "signal" not in fields["Comment"]


def as_nobody_accepted(tb: Testbed, *args: str, script: str) -> tuple[dict[str, str], str]:
    as_nobody, public = as_user(tb)
    try:
        out = as_nobody("sbatch", "--parsable", "--hold", "-o", "/dev/null", *args, stdin=script)
    finally:
        shutil.rmtree(public, ignore_errors=True)
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    fields = job_fields(job_id, tb.env())
    subprocess.run(["scancel", str(job_id)], env=tb.env(), check=False)
    return fields, out.stderr


def test_a_user_declares_soft_deadline_steps_and_the_prioritizer_reads_them(filtered) -> None:
    """As user nobody: dl:deadline_steps is checked, recorded in the tag as shares of the top
    value and read by the prioritizer from Slurm's job record; bad steps are refused with what
    is wrong; steps forged in the comment's tag text are not."""
    from prioritizer.jobs import apply_tags
    from slurm_dl.slurm import CliBackend

    tb, service = filtered
    service.start()
    env = tb.env()
    as_nobody, public = as_user(tb)
    job_id = None
    try:

        def submit_as_nobody(*args: str) -> subprocess.CompletedProcess:
            return as_nobody(
                "sbatch",
                "--parsable",
                "--hold",
                "--chdir=/tmp",
                "-o",
                "/dev/null",
                "--gpus=1",
                *args,
                stdin=SCRIPT,
            )

        out = submit_as_nobody("-t", "60", "--comment=dl:deadline_steps=2h=10,4h=5,8h=1")
        assert out.returncode == 0, out.stderr
        job_id = int(out.stdout.strip().split(";")[0])
        submitted = time.time()
        tag = parse_tag(job_fields(job_id, env)["AdminComment"])
        assert tag is not None and tag.deadline is None
        assert [v for _, v in tag.soft_deadlines] == [1.0, 0.5, 0.1]
        assert [round(t - submitted) // 60 for t, _ in tag.soft_deadlines] in (
            [120, 240, 480],
            [119, 239, 479],
        )
        [job] = [j for j in CliBackend(env).jobs() if j.job_id == job_id]
        apply_tags(job)
        assert job.soft_deadlines == tuple((float(t), v) for t, v in tag.soft_deadlines)
        rising = submit_as_nobody("-t", "60", "--comment=dl:deadline_steps=2h=5,4h=10")
        assert rising.returncode != 0 and "values must fall" in rising.stderr, rising.stderr
        too_long = submit_as_nobody("-t", "300", "--comment=dl:deadline_steps=2h=10,4h=5")
        assert too_long.returncode != 0 and "runs past the deadline" in too_long.stderr, (
            too_long.stderr
        )
        forged = submit_as_nobody(
            "-t", "60", "--comment=sdl1:class=train;ckpt=0;gpus=1;shape=any;soft=1999999999:1"
        )
        assert forged.returncode == 0, forged.stderr
        forged_id = forged.stdout.strip().split(";")[0]
        forged_tag = parse_tag(job_fields(int(forged_id), env)["AdminComment"])
        subprocess.run(["scancel", forged_id], env=env, check=False)
        assert forged_tag is not None and forged_tag.soft_deadlines is None
    finally:
        if job_id is not None:
            subprocess.run(["scancel", str(job_id)], env=env, check=False)
        shutil.rmtree(public, ignore_errors=True)


def test_defaults_time_limit_and_requeue(filtered) -> None:
    tb, service = filtered
    service.start()
    fields, _ = accepted_job(tb, "--gres=gpu:1")
    assert fields["TimeLimit"] == "01:00:00" and fields["Requeue"] == "1"


def test_serve_hint_without_constraints_is_downgraded_and_told(filtered) -> None:
    tb, service = filtered
    service.start()
    fields, err = accepted_job(tb, "--gres=gpu:2", "--comment=dl:class=serve")
    assert "dl:class=serve downgraded to train" in err
    assert parse_tag(fields["AdminComment"]).job_class.value == "train"
    fields, _ = accepted_job(tb, "--gres=gpu:2", "-t", "60", "--comment=dl:class=serve")
    assert parse_tag(fields["AdminComment"]).job_class.value == "serve"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--gres=gpu:1", "--cpus-per-gpu=8"], ["--cpus-per-gpu=8", "at most 4"]),
        (["--gres=gpu:1", "-t", "3000"], ["--time=3000", "at most 1440"]),
        (["--gpus=1", "-t", "60", "--comment=dl:deadline=2000-01-01T00:00"], ["deadline", "Fix:"]),
    ],
)
def test_rejections_reach_the_sbatch_user(filtered, args, words) -> None:
    tb, service = filtered
    service.start()
    out = sbatch(tb, *args)
    assert out.returncode != 0 and all(w in out.stderr for w in words), out.stderr


def test_service_stopped_job_is_accepted_and_scheduling_goes_on(filtered, tmp_path) -> None:
    tb, service = filtered
    service.stop()
    try:
        fields, _ = accepted_job(tb, "--gpus=16")
        assert (
            parse_tag(fields.get("AdminComment", "")) is None
        )  # the shim let it through untouched
        assert "TresPerJob" in fields  # unchanged: no reshape without the service
        scheduling_works(tb, tmp_path)
    finally:
        service.start()


def test_hung_service_job_is_accepted_within_the_timeout(filtered, tmp_path) -> None:
    tb, service = filtered
    service.stop()
    peer = HungPeer(service.sock)
    time.sleep(5.5)  # past the breaker's cool-down, should the test before have opened it
    try:
        fields, _ = accepted_job(tb, "--gres=gpu:1")
        assert parse_tag(fields.get("AdminComment", "")) is None
        scheduling_works(tb, tmp_path)
        log = (tb.state_dir / "log" / "slurmctld.log").read_text()
        # the full 0.2 s timeout, or a tenth of it when the shim already saw the service fail
        assert re.search(r"slurm-dl filter: no answer within 0\.0?2 s", log)
    finally:
        peer.close()
        service.start()


def test_filter_works_again_after_restart_and_jobs_run(filtered, tmp_path) -> None:
    tb, service = filtered
    service.start()
    # the tests before stopped or hung the service: the shim's circuit breaker may still be open
    # (it skips the service for breaker_cooldown_seconds, then probes it again)
    end = time.monotonic() + 30
    while True:
        fields, _ = accepted_job(tb, "--gpus=16")
        if "TresPerNode" in fields or time.monotonic() > end:
            break
        time.sleep(1)
    assert gres(fields["TresPerNode"]) == "gpu:8"
    scheduling_works(tb, tmp_path)


def test_a_user_cannot_change_the_gpu_request_after_the_filter_saw_it(filtered) -> None:
    """`scontrol update` by the job's owner may not change GPUs, nodes, switch wait or partition
    (that would skip the filter's checks and keep stale tags); harmless fields may change, and
    root may change anything."""
    tb, _ = filtered
    env = tb.env()
    as_nobody, public = as_user(tb)

    out = as_nobody(
        "sbatch",
        "--parsable",
        "--hold",
        "--chdir=/tmp",
        "-o",
        "/dev/null",
        "--gpus=1",
        "-t",
        "5",
        "--wrap",
        "sleep 60",
    )
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    try:
        before = job_fields(int(job_id), env)
        gpu_field = "TresPerNode" if before.get("TresPerNode", "N/A") != "N/A" else "TresPerJob"
        for change in (f"{gpu_field}=gres:gpu:8", "NumNodes=2", "Partition=gpu"):
            refused = as_nobody("scontrol", "update", f"JobId={job_id}", change)
            assert refused.returncode != 0 and "denied" in refused.stderr.lower(), (
                change,
                refused.stderr,
            )
        assert as_nobody("scontrol", "update", f"JobId={job_id}", "TimeLimit=3").returncode == 0
        assert as_nobody("scontrol", "update", f"JobId={job_id}", "Name=renamed").returncode == 0
        fields = job_fields(int(job_id), env)
        assert fields[gpu_field] == before[gpu_field] and fields["NumNodes"] == before["NumNodes"]
        assert fields["TimeLimit"] == "00:03:00" and fields["JobName"] == "renamed"
        admin = subprocess.run(
            ["scontrol", "update", f"JobId={job_id}", f"{gpu_field}=gres:gpu:2"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert admin.returncode == 0, admin.stderr
        assert gres(job_fields(int(job_id), env)[gpu_field]) == "gpu:2"
    finally:
        subprocess.run(["scancel", job_id], env=env, check=False)
        shutil.rmtree(public, ignore_errors=True)
