"""The local GPU test cluster, against a real Slurm: GPUs, multi-node steps, idempotent up,
clean down, two clusters at once and clear errors for bad states."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from slurm_dl.core import errors
from slurm_dl.testbed import Testbed, submit, wait_for_job_state
from slurm_dl.testbed import process
from slurm_dl.testbed.client import node_states


def test_gpus_3_sets_three_cuda_visible_devices(run_job) -> None:
    fields, out = run_job("#!/bin/bash\necho CVD=$CUDA_VISIBLE_DEVICES\n", ["--gpus=3"])
    line = next(ln for ln in out.splitlines() if ln.startswith("CVD="))
    devices = line.removeprefix("CVD=").split(",")
    assert len(devices) == 3, out
    assert len(set(devices)) == 3
    assert fields["TresPerJob"] in ("gres:gpu:3", "gres/gpu:3")  # 22.05 / 23.02 and later


def test_two_nodes_eight_gpus_each_run_an_srun_step_on_both(run_job) -> None:
    script = "#!/bin/bash\nsrun bash -c 'echo STEP $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES'\n"
    fields, out = run_job(script, ["-N2", "--ntasks-per-node=1", "--gpus-per-node=8"])
    steps = [ln.split() for ln in out.splitlines() if ln.startswith("STEP ")]
    assert len(steps) == 2, out
    assert len({s[1] for s in steps}) == 2, out
    for step in steps:
        assert step[2].split(",") == [str(i) for i in range(8)], out
    assert fields["NumNodes"] == "2"


def test_topology_has_two_leaf_switches_and_gres_on_every_node(testbed: Testbed) -> None:
    out = subprocess.run(
        ["scontrol", "show", "topology"],
        env=testbed.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "SwitchName=leaf1" in out and "SwitchName=leaf2" in out and "SwitchName=spine" in out
    nodes = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %G"],
        env=testbed.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    gres = {ln.split()[0]: ln.split()[1] for ln in nodes if ln.strip()}
    assert gres == {f"gpu0{i}": "gpu:h100:8" for i in range(1, 5)}


def test_up_is_idempotent(testbed: Testbed) -> None:
    before = testbed.status()
    again = testbed.up()
    assert again.up
    assert again.daemons == before.daemons  # same pids: no second set of daemons
    # healthy states (planned: the backfill scheduler holds the node for a waiting job)
    assert set(again.nodes.values()) <= {"idle", "mixed", "allocated", "completing", "planned"}


def test_env_points_clients_at_this_cluster(testbed: Testbed) -> None:
    assert testbed.env()["SLURM_CONF"] == str(testbed.slurm_conf)
    assert os.environ["SLURM_CONF"] == str(testbed.slurm_conf)
    assert sorted(node_states(testbed.env())) == ["gpu01", "gpu02", "gpu03", "gpu04"]


def test_down_leaves_no_process_even_with_a_running_job(make_testbed) -> None:
    tb = make_testbed()
    tb.up()
    pid_file = tb.state_dir / "job.pid"
    job = submit(
        f"#!/bin/bash\necho $$ > {pid_file}\nsleep 300\n",
        tb.env(),
        ["--gpus=1", "--output=/dev/null"],
    )
    wait_for_job_state(job, tb.env(), ["RUNNING"])
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.1)
    job_shell = int(pid_file.read_text())
    daemons = [p for p in tb.status().daemons.values() if p]
    assert len(daemons) == (
        3 if tb.params().munge else 2
    )  # slurmctld, slurmd (and munged): down stops all
    stopped = tb.down()
    assert set(daemons) <= set(stopped)
    assert job_shell in stopped
    assert not any(process.alive(p) for p in [*daemons, job_shell])
    assert process.marked_processes(tb.state_dir) == []
    assert not tb.status().any_running


def test_down_after_a_crash_and_up_again(make_testbed) -> None:
    tb = make_testbed()
    tb.up()
    ctld = tb.status().daemons["slurmctld"]
    assert ctld
    os.kill(ctld, signal.SIGKILL)
    for _ in range(100):
        if not process.alive(ctld):
            break
        time.sleep(0.05)
    half = tb.status()
    assert half.any_running and not half.up
    again = tb.up()  # stops the survivors and starts clean
    assert again.up and again.daemons["slurmctld"] != ctld
    tb.down()
    assert process.marked_processes(tb.state_dir) == []


def test_two_testbeds_at_once(testbed: Testbed, make_testbed) -> None:
    other = make_testbed(gpu_type="a100")
    other.up()
    assert other.params().ctld_port != testbed.params().ctld_port
    job = submit("#!/bin/bash\ntrue\n", other.env(), ["--gres=gpu:a100:1", "--output=/dev/null"])
    fields = wait_for_job_state(job, other.env(), ["COMPLETED"])
    assert fields["NodeList"] == "gpu01"
    # The session cluster does not know the other's GPU type: the two are distinct clusters.
    with pytest.raises(Exception):
        submit("#!/bin/bash\ntrue\n", testbed.env(), ["--gres=gpu:a100:1", "--output=/dev/null"])
    other.down()
    assert testbed.status().up


def test_taken_port_is_a_clear_error(make_testbed) -> None:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        tb = make_testbed(ctld_port=port)
        with pytest.raises(errors.TestbedError, match=rf"port\(s\) {port} already in use"):
            tb.up()
    assert process.marked_processes(tb.state_dir) == []


def test_daemon_dying_at_start_quotes_its_log(make_testbed) -> None:
    tb = make_testbed(extra_conf=("NoSuchSlurmKey=1",))
    with pytest.raises(errors.TestbedError, match="died at start") as err:
        tb.up()
    assert "NoSuchSlurmKey" in str(err.value)
    assert process.marked_processes(tb.state_dir) == []


def test_cli_up_env_status_down(tmp_path_factory: pytest.TempPathFactory, make_testbed) -> None:
    tmp_path = tmp_path_factory.mktemp("cli")  # short: slurmd's socket paths live under it
    state = tmp_path / "tb"
    cli = [sys.executable, "-m", "slurm_dl.cli.main", "testbed"]
    release = os.environ.get(
        "SLURM_DL_TEST_SLURM"
    )  # this run's release (its clients may be on PATH)
    up = subprocess.run(
        [
            *cli,
            "up",
            "--dir",
            str(state),
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            *(["--slurm", release] if release else []),
        ],
        capture_output=True,
        text=True,
    )
    try:
        assert up.returncode == 0, up.stderr
        env = subprocess.run(
            [*cli, "env", "--dir", str(state)], capture_output=True, text=True, check=True
        ).stdout
        assert f"export SLURM_CONF={state.resolve()}/etc/slurm.conf" in env
        shell = subprocess.run(
            ["bash", "-c", f'{env}\nsinfo -h -N -o "%N %T %G"'], capture_output=True, text=True
        )
        assert shell.stdout.split() == ["gpu01", "idle", "gpu:h100:2"], shell.stderr
        status = subprocess.run(
            [*cli, "status", "--dir", str(state)], capture_output=True, text=True
        )
        assert status.returncode == 0 and "running pid" in status.stdout
    finally:
        down = subprocess.run([*cli, "down", "--dir", str(state)], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    assert process.marked_processes(state.resolve()) == []
    status = subprocess.run([*cli, "status", "--dir", str(state)], capture_output=True, text=True)
    assert status.returncode == 1
    missing = subprocess.run(
        [*cli, "env", "--dir", str(tmp_path / "nothing")], capture_output=True, text=True
    )
    assert missing.returncode != 0 and missing.stderr.startswith("error: no testbed at")


def test_accounting_gives_sacct_with_gpu_tres(make_testbed) -> None:
    from slurm_dl.core.errors import SlurmNotInstalledError
    from slurm_dl.testbed.accounting import find_accounting_binaries

    try:
        find_accounting_binaries()
    except SlurmNotInstalledError as e:
        pytest.skip(str(e))
    tb = make_testbed(accounting=True)
    status = tb.up()
    assert status.daemons["mariadb"] and status.daemons["slurmdbd"]
    job = submit("#!/bin/bash\ntrue\n", tb.env(), ["--gpus=2", "--output=/dev/null"])
    wait_for_job_state(job, tb.env(), ["COMPLETED"])
    out = ""
    for _ in range(50):  # the job record reaches slurmdbd asynchronously
        out = subprocess.run(
            [
                "sacct",
                "-a",
                "-X",
                "-n",
                "-P",
                "-S",
                "2000-01-01",
                "-j",
                str(job),
                "-o",
                "JobID,State,AllocTRES",
            ],
            env=tb.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if "COMPLETED" in out:
            break
        time.sleep(0.2)
    assert f"{job}|COMPLETED|" in out and "gres/gpu=2" in out, out
    # the associations the testbed registers, as slurm-dl's Slurm edge reads them (not enforced)
    from slurm_dl.slurm.accounts import slurm_associations

    view = slurm_associations(tb.env())
    assert view.pairs == {("root", "root"), ("root", "dl")} and not view.enforced, view
    assert view.allows("root", "DL") and view.allows("root", "made-up") is False
    tb.down()
    assert process.marked_processes(tb.state_dir) == []
