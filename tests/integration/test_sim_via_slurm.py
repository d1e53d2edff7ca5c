"""``slurm-dl simulate --via-slurm`` on the live testbed: the replays run as ONE Slurm job
array (seen in squeue while a blocker job holds the nodes), the result is the one the local
run gives, a task killed with scancel is reported by name with its log, and the other
policies' rows are kept. Run from a world-writable directory where another user has planted
folders under the names an older release would have chosen, the run uses none of them: its
own folder is fresh and private while the array waits."""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polling import wait_until

pytest.importorskip("submitit")

CLI = [sys.executable, "-m", "slurm_dl.cli.main"]
TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 4},{i * 60},{400 + 71 * (i % 13)},{'ab'[i % 2]}\n" for i in range(60)
)


def _args(tmp_path: Path) -> list[str]:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    # two policies: each its shared run and one run per account (a, b): 6 array tasks
    return [
        *CLI,
        "simulate",
        "--trace",
        str(trace),
        "--format",
        "csv",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--policy",
        "fifo",
        "--policy",
        "las",
        "--json",
    ]


def _squeue(*more: str) -> str:
    return subprocess.run(
        ["squeue", "-h", *more], capture_output=True, text=True, check=True
    ).stdout


def _block_nodes(tmp_path: Path) -> str:
    """A job holding every node exclusively, so that the array waits in the queue."""
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "-N4",
            "--exclusive",
            "-o",
            str(tmp_path / "blocker.out"),
            "--wrap",
            "sleep 600",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    job = out.strip().split(";")[0]
    wait_until(
        "the blocker to run", lambda: _squeue("-j", job, "-o", "%T").strip() == "RUNNING", 60
    )
    return job


class _Payload:
    """Unpickled, this writes a file: what a planted pickle would do as whoever runs the what-if."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant(shared: Path, marker: Path, seconds: int = 8, pids: int = 40) -> set[str]:
    """As user nobody: folders under the names an older release chose (its start second and
    pid), each holding a pickle that runs code; the next ``pids`` pids, the next seconds."""
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    blob = pickle.dumps(_Payload(str(marker)))
    names = set()
    for s in range(seconds):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() + s))
        for pid in range(last + 1, last + 1 + pids):
            d = shared / f"slurm-dl-whatif-{stamp}-{pid}"
            d.mkdir(mode=0o777, exist_ok=True)
            (d / "inputs.pickle").write_bytes(blob)
            for p in (d, d / "inputs.pickle"):
                os.chown(p, 65534, 65534)
            names.add(d.name)
    return names


def test_via_slurm_runs_one_array_with_the_local_result_and_names_a_killed_task(
    testbed, tmp_path
) -> None:
    local = subprocess.run(
        [*_args(tmp_path), "--jobs", "1"], capture_output=True, text=True, cwd=tmp_path
    )
    assert local.returncode == 0, local.stderr

    shared = tmp_path / "shared"  # like /tmp: everyone may write, the sticky bit on
    shared.mkdir()
    os.chmod(shared, 0o1777)
    marker = tmp_path / "planted-pickle-ran"
    planted = _plant(shared, marker)
    blocker = _block_nodes(tmp_path)
    try:
        proc = subprocess.Popen(
            [*_args(tmp_path), "--via-slurm", "--time", "5"],
            cwd=shared,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # the array, pending behind the blocker: six tasks of one array job
        wait_until(
            "the array in squeue",
            lambda: len(_squeue("-r", "-n", "slurm-dl-whatif", "-o", "%i").split()) == 6,
            60,
        )
        mine = [p for p in shared.iterdir() if p.name not in planted]
        assert len(mine) == 1 and mine[0].name.startswith("slurm-dl-whatif-"), mine
        st = os.lstat(mine[0])
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
        assert stat.S_IMODE(os.lstat(mine[0] / "inputs.pickle").st_mode) == 0o600
        rows = [
            ln.split()
            for ln in _squeue("-r", "-n", "slurm-dl-whatif", "-o", "%i %F %K").splitlines()
        ]
        assert len({r[1] for r in rows}) == 1 and sorted(r[2] for r in rows) == [
            str(i) for i in range(6)
        ], rows
        array = rows[0][1]
        # kill las's shared run (planned: fifo's 3 tasks, then las's), then free the nodes
        subprocess.run(["scancel", f"{array}_3"], check=True)
    finally:
        subprocess.run(["scancel", blocker], check=False)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err
    assert f"submitted 6 replays as Slurm job array {array}" in err
    assert f"replay las: the shared cluster (Slurm job {array}_3) failed" in err, err
    assert "killed, cancelled or out of" in err
    log = err.split("its log:\n", 1)[1].split()[0]
    assert Path(log).parents[1] == mine[0], err  # the work folder stays
    assert "Traceback" not in err
    assert not marker.exists()  # no planted pickle was read
    doc = json.loads(out)
    want = json.loads(local.stdout)
    assert list(doc["policies"]) == ["fifo"] and doc["policies_not_run"] == ["las"]
    assert doc["policies"]["fifo"] == want["policies"]["fifo"]


def test_via_slurm_gives_the_local_result(testbed, tmp_path) -> None:
    local = subprocess.run(
        [*_args(tmp_path), "--jobs", "1"], capture_output=True, text=True, cwd=tmp_path
    )
    remote = subprocess.run(
        [*_args(tmp_path), "--via-slurm"], capture_output=True, text=True, cwd=tmp_path, timeout=240
    )
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout
    assert "submitted 6 replays as Slurm job array" in remote.stderr
    # the work folder is gone once every task succeeded
    assert not [p for p in os.listdir(tmp_path) if p.startswith("slurm-dl-whatif-")]


def test_tune_via_slurm_gives_the_local_proposal(testbed, tmp_path) -> None:
    trace = tmp_path / "tune.csv"
    trace.write_text(
        "job_id,num_gpus,submit_time,duration,account\n"
        + "".join(
            f"{i},{1 + i % 4},{i * 60},{300 + 97 * (i % 17)},{'abc'[i % 3]}\n" for i in range(120)
        )
    )
    args = [
        *CLI,
        "tune",
        "--trace",
        str(trace),
        "--format",
        "csv",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--policy",
        "las",
        "--no-fairness",
        "--param",
        "policy.las.thresholds_gpu_s=600:3600,36000",
        "--param",
        "policy.las.starvation_factor=none:2",
        "--json",
    ]
    local = subprocess.run([*args, "--jobs", "1"], capture_output=True, text=True, cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    remote = subprocess.run(
        [*args, "--via-slurm", "--time", "5"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert remote.returncode == 0, remote.stderr
    # the search (4 candidates), the current settings, then the judging (5): three arrays
    assert remote.stderr.count("as Slurm job array") == 3, remote.stderr
    want, got = json.loads(local.stdout), json.loads(remote.stdout)
    assert got["proposal"] == want["proposal"] and got["candidates"] == want["candidates"]
    assert got["proposal"] is not None
