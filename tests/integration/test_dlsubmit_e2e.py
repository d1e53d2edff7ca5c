"""dlsubmit end to end on the live testbed: submit with the CLI, preempt the way the prioritizer
does (USR2 to the batch shell, then requeue, through the backend), and check the job resumes
from its checkpoint and ends exactly as an uninterrupted run would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.dlsubmit.cli import app
from slurm_dl.slurm import get_backend
from slurm_dl.testbed import wait_for_job_state

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

# A deterministic "training" loop: the model state is a float vector updated step by step; the
# state is checkpointed (write then rename) every step and on USR2, then the loop stops.
TRAIN = r"""
import hashlib, json, os, signal, sys, time
STEPS = int(sys.argv[1]); DELAY = float(sys.argv[2]); OUT = sys.argv[3]
stop = []
signal.signal(signal.SIGUSR2, lambda *a: stop.append(1))
ckpt_dir = os.environ["CKPT_DIR"]
state = {"step": 0, "w": [0.5, -1.25, 3.0]}
if os.environ.get("RESUME_FROM"):
    state = json.load(open(os.environ["RESUME_FROM"]))
def save():
    tmp = os.path.join(ckpt_dir, "state.json.tmp")
    json.dump(state, open(tmp, "w"))
    os.replace(tmp, os.path.join(ckpt_dir, "state.json"))
while state["step"] < STEPS:
    if stop:
        save(); print("checkpointed at", state["step"]); sys.exit(0)
    k = state["step"]
    state["w"] = [w * 0.999 + ((k * 7 + i) % 5) * 0.01 for i, w in enumerate(state["w"])]
    state["step"] = k + 1
    save()
    time.sleep(DELAY)
json.dump(state, open(OUT, "w"))
"""

INFER = r"""
import os, sys, time
with open(sys.argv[2], "a") as f:
    f.write(sys.argv[1] + "\n")
time.sleep(float(sys.argv[3]))
"""


# A sweep task: says it ran, and reports its result by a printed line (even tasks) or by the
# $DL_RESULT file (odd ones).
SWEEP_TASK = r"""
import json, os, sys
i = int(os.environ["SLURM_ARRAY_TASK_ID"])
open(f"result-{i}", "w").write(sys.argv[1])
if i % 2:
    json.dump({"task": i, "by": "file"}, open(os.environ["DL_RESULT"], "w"))
else:
    print("DLSUBMIT_RESULT " + json.dumps({"task": i, "by": "line"}), flush=True)
"""


@pytest.fixture
def workdir(testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_DL_CONFIG", str(ROOT / "site-configs" / "testbed.toml"))
    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLURM_DL_USER_DEFAULTS", str(tmp_path / "no-user-defaults.toml"))
    return tmp_path


def _submit(*args: str) -> dict:
    result = runner.invoke(app, [*args[:1], "--json", *args[1:]])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _wait_for(pred, what: str, timeout: float = 90.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def _events(ckpt: Path) -> str:
    p = ckpt / ".dlsubmit" / "events"
    return p.read_text() if p.exists() else ""


def _preempt(job_id: int, ckpt: Path) -> None:
    """What the prioritizer does: USR2 to the batch shell. The script saves and requeues the job
    itself at once, well within the grace period (10 s) after which slurm-dl would."""
    get_backend().signal_batch(job_id, "USR2")
    t0 = time.monotonic()
    _wait_for(lambda: "event=requeue-self" in _events(ckpt), "the job to requeue itself", 30)
    assert time.monotonic() - t0 < 8, "the script held its GPUs after its checkpoint"
    assert "event=checkpointed" in _events(ckpt), _events(ckpt)


def test_train_preempted_resumes_to_the_same_final_state(workdir: Path, testbed) -> None:
    prog = workdir / "train_loop.py"
    prog.write_text(TRAIN)
    steps, delay = 60, 0.2
    # The uninterrupted reference run, locally.
    ref_ckpt = workdir / "ref-ckpt"
    ref_ckpt.mkdir()
    env = {**os.environ, "CKPT_DIR": str(ref_ckpt), "RESUME_FROM": ""}
    subprocess.run(
        [sys.executable, str(prog), str(steps), "0", str(workdir / "reference.json")],
        env=env,
        check=True,
    )

    name = "tr $(touch pwned); `touch pwned2` 'q' #h 50% ü"
    sub = _submit(
        "train",
        "--gpus",
        "2",
        "--time",
        "10",
        "--name",
        name,
        "--launcher",
        "none",
        "--ckpt-glob",
        "state.json",
        "--",
        sys.executable,
        str(prog),
        str(steps),
        str(delay),
        str(workdir / "final.json"),
    )
    job_id, ckpt = sub["job_id"], workdir / sub["checkpoint_dir"]
    _wait_for(
        lambda: (
            (ckpt / "state.json").exists()
            and json.loads((ckpt / "state.json").read_text())["step"] >= 5
        ),
        "training progress",
    )
    assert (
        next(j for j in get_backend().jobs() if j.job_id == job_id).name == name
    )  # the #SBATCH line kept it whole
    _preempt(job_id, ckpt)
    wait_for_job_state(job_id, testbed.env(), ("COMPLETED",), timeout=120)

    assert json.loads((workdir / "final.json").read_text()) == json.loads(
        (workdir / "reference.json").read_text()
    )
    events = _events(ckpt)
    assert "event=preempt" in events and "event=resume restart=1 from=" in events
    assert "event=lost-work" not in events and "event=no-checkpoint" not in events
    out = workdir / sub["output"]
    assert sub["output"] == f"tr_touch_pwned_touch_pwned2_q_h_50-{job_id}.out"
    assert out.exists(), f"output file {out} not in the submit directory"
    assert "event=resume" in out.read_text()  # --open-mode=append kept both runs
    assert (
        "preempted on purpose" in out.read_text()
    )  # our line, before Slurm's CANCELLED/REQUEUE one
    assert not list(workdir.rglob("pwned*"))

    status = runner.invoke(app, ["status", str(job_id), "--json"])
    assert status.exit_code == 0, status.output
    (row,) = json.loads(status.stdout)
    assert row["restarts"] >= 1 and row["last_checkpoint"].endswith("state.json")


def test_infer_preempted_processes_every_item_exactly_once(workdir: Path, testbed) -> None:
    prog = workdir / "infer_item.py"
    prog.write_text(INFER)
    items = [f"item-{i:02d} $(touch pwned) ;`x`" for i in range(30)]
    (workdir / "items.txt").write_text("".join(i + "\n" for i in items))
    log = workdir / "processed.log"
    sub = _submit(
        "infer",
        "--gpus",
        "1",
        "--time",
        "10",
        "--name",
        "inf",
        "--inputs",
        "items.txt",
        "--",
        sys.executable,
        str(prog),
        "{item}",
        str(log),
        "0.3",
    )
    job_id, ckpt = sub["job_id"], workdir / sub["checkpoint_dir"]
    _wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 5, "inference progress")
    _preempt(job_id, ckpt)
    wait_for_job_state(job_id, testbed.env(), ("COMPLETED",), timeout=120)
    assert log.read_text().splitlines() == items  # none twice, none missed, in order
    assert "event=resume" in _events(ckpt)
    assert not list(workdir.rglob("pwned*"))


def test_sweep_runs_every_array_task(workdir: Path, testbed) -> None:
    params = ["lr=0.1", "lr=0.01", "lr=0.001", "lr=0.0001 $(touch pwned)"]
    sub = _submit(
        "sweep",
        "--gpus",
        "1",
        "--time",
        "5",
        "--name",
        "hpo",
        "--parallel",
        "2",
        *[a for p in params for a in ("--param", p)],
        "--",
        sys.executable,
        "-c",
        SWEEP_TASK,
        "{param}",
    )
    _wait_for(
        lambda: all((workdir / f"result-{i}").exists() for i in range(len(params))),
        "all sweep tasks",
    )
    assert [(workdir / f"result-{i}").read_text() for i in range(len(params))] == params
    assert not list(workdir.rglob("pwned*"))
    assert sub["job_id"] > 0

    # each task's result (a printed line or the $DL_RESULT file) comes back through status
    def results():
        out = runner.invoke(app, ["status", "--json"])
        assert out.exit_code == 0, out.output
        (row,) = [r for r in json.loads(out.stdout) if r["job_id"] == sub["job_id"]]
        got = row.get("results") or []
        return got if len(got) == len(params) and all(r["result"] for r in got) else None

    got = _wait_for(results, "every task's result in dlsubmit status")
    assert [(r["task"], r["param"], r["result"]) for r in got] == [
        (i, p, {"task": i, "by": "file" if i % 2 else "line"}) for i, p in enumerate(params)
    ]
    shown = runner.invoke(app, ["status", str(sub["job_id"])]).output
    assert "results: 4 of 4 tasks:" in shown and '(lr=0.1): {"task": 0, "by": "line"}' in shown


def test_serve_publishes_its_port_and_answers(workdir: Path, testbed) -> None:
    (workdir / "hello.txt").write_text("hello from dlsubmit serve")
    sub = _submit(
        "serve",
        "--gpus",
        "1",
        "--time",
        "5",
        "--name",
        "api",
        "--",
        sys.executable,
        "-m",
        "http.server",
        "--bind",
        "127.0.0.1",
        "{port}",
    )
    endpoint = workdir / "api.endpoint"
    text = _wait_for(
        lambda: endpoint.exists() and endpoint.read_text().strip(), "the endpoint file"
    )
    port = int(text.split()[1])

    def answer():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/hello.txt", timeout=2) as r:
                return r.read().decode()
        except OSError:
            return None

    assert _wait_for(answer, "the server to answer") == "hello from dlsubmit serve"
    result = runner.invoke(app, ["cancel", str(sub["job_id"])])
    assert result.exit_code == 0, result.output
    _wait_for(lambda: not endpoint.exists(), "the endpoint file to be removed", 30)


MULTI = r"""
import json, os, signal, sys, time
node = os.environ.get("SLURM_NODEID", "?")
ckpt = os.path.join(os.environ["CKPT_DIR"], f"node{node}")
info = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "DL_NNODES", "RESUME_FROM", "DL_RESTART")}
with open(os.path.join(sys.argv[1], f"run-{info['DL_RESTART']}-node{node}.json"), "w") as f:
    json.dump(info, f)
if info["DL_RESTART"] != "0":
    sys.exit(0)  # the resumed run finishes at once
stop = []
signal.signal(signal.SIGUSR2, lambda *a: stop.append(1))
for _ in range(1200):
    if stop:
        open(ckpt + ".tmp", "w").write("saved")
        os.replace(ckpt + ".tmp", ckpt)
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""


def test_multinode_train_forwards_usr2_through_srun_and_requeues_itself(
    workdir: Path, testbed
) -> None:
    """Two nodes, one srun task each; USR2 to the batch shell reaches both tasks; the script
    requeues itself once they have saved and the rerun resumes."""
    prog = workdir / "multi.py"
    prog.write_text(MULTI)
    sub = _submit(
        "train",
        "--gpus",
        "16",
        "--nodes",
        "2",
        "--time",
        "10",
        "--name",
        "mn",
        "--launcher",
        "none",
        "--ckpt-glob",
        "node*",
        "--",
        sys.executable,
        str(prog),
        str(workdir),
    )
    job_id, ckpt = sub["job_id"], workdir / sub["checkpoint_dir"]
    _wait_for(
        lambda: all((workdir / f"run-0-node{n}.json").exists() for n in (0, 1)),
        "both nodes to start",
    )
    first = [json.loads((workdir / f"run-0-node{n}.json").read_text()) for n in (0, 1)]
    assert (
        first[0]["MASTER_ADDR"] == first[1]["MASTER_ADDR"]
        and first[0]["MASTER_PORT"] == first[1]["MASTER_PORT"]
    )
    assert first[0]["WORLD_SIZE"] == "2" and first[0]["DL_NNODES"] == "2"
    get_backend().signal_batch(job_id, "USR2")
    _wait_for(
        lambda: (ckpt / "node0").exists() and (ckpt / "node1").exists(),
        "both nodes to checkpoint",
        30,
    )
    wait_for_job_state(job_id, testbed.env(), ("COMPLETED",), timeout=150)
    events = _events(ckpt)
    assert "event=requeue-self" in events and "event=resume restart=1" in events
    resumed = [json.loads((workdir / f"run-1-node{n}.json").read_text()) for n in (0, 1)]
    assert all(r["RESUME_FROM"] in (str(ckpt / "node0"), str(ckpt / "node1")) for r in resumed)


def test_dry_run_and_refusals_name_the_clusters_valid_choices(workdir: Path, testbed) -> None:
    partitions = [p.name for p in get_backend().partitions()]
    dry = runner.invoke(
        app,
        [
            "train",
            "-p",
            "nosuch",
            "-t",
            "1-00:00:00",
            "--mem-per-gpu",
            "8G",
            "--dry-run",
            "--show-script",
            "--",
            "python3",
            "t.py",
        ],
    )
    assert dry.exit_code == 2, dry.output
    assert "#SBATCH --time=1-00:00:00" in dry.output and "#SBATCH --mem-per-gpu=8G" in dry.output
    assert (
        f"cluster: REFUSES it: partition 'nosuch' does not exist; valid: {', '.join(partitions)}"
        in dry.output
    )
    ok = runner.invoke(app, ["train", "--gpus", "1", "--dry-run", "--", "python3", "t.py"])
    assert ok.exit_code == 0 and "cluster: ok (partitions" in ok.output and "h100" in ok.output
    refused = runner.invoke(app, ["train", "-p", "nosuch", "--", "python3", "t.py"])
    assert refused.exit_code == 1
    first = refused.output.strip().splitlines()[0]
    assert (
        first.startswith("error: Slurm refused the job: ")
        and f"(valid partitions: {', '.join(partitions)})" in first
    )
    assert "sbatch: error" not in refused.output and "error: sbatch" not in refused.output
