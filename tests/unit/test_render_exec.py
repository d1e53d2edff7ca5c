"""Rendered scripts run under plain bash (no Slurm): hostile values stay data, resume and the
restart cap work, and USR2 reaches the job step at once.

Each test writes the script to a temp dir and runs it with bash and a minimal Slurm-like
environment (SLURM_JOB_ID, SLURM_SUBMIT_DIR); the command is a Python one-liner that records
its argv, environment and the items it saw.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from slurm_dl.dlsubmit.defaults import builtin_site
from slurm_dl.dlsubmit.render import JobSpec, render

HOSTILE = [
    "$(touch pwned-subst)",
    "`touch pwned-tick`",
    "; touch pwned-semi",
    "' ; touch pwned-quote ; '",
    '" ; touch pwned-dquote ; "',
    "line1\nline2; touch pwned-nl",
    "ünïcødé ✓ 日本",
    "$HOME ${PATH} $$ !! * ?",
    "--flag=a b",
    "",
]
RECORD = "import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, open(os.environ['OUT_FILE'], 'a')); open(os.environ['OUT_FILE'], 'a').write('\\n')"


def _run(script: str, tmp: Path, **env: str) -> subprocess.CompletedProcess:
    path = tmp / "job.sh"
    path.write_text(script)
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "SLURM_JOB_ID": "4242",
        "SLURM_SUBMIT_DIR": str(tmp),
        "OUT_FILE": str(tmp / "record.jsonl"),
    }
    return subprocess.run(
        ["bash", str(path)],
        cwd=tmp,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _records(tmp: Path) -> list[dict]:
    return [
        json.loads(line) for line in (tmp / "record.jsonl").read_text().splitlines() if line.strip()
    ]


def _no_pwned(tmp: Path) -> None:
    assert not list(tmp.rglob("pwned*")), "a hostile value was evaluated by the shell"


def test_hostile_command_words_name_and_env_are_passed_literally(tmp_path: Path) -> None:
    spec = JobSpec(
        kind="train",
        command=(sys.executable, "-c", RECORD, *HOSTILE),
        launcher="none",
        name="n $(touch pwned-name); `touch pwned-name2` 'q' ü",
        env=tuple((f"V{i}", v) for i, v in enumerate(HOSTILE)),
    )
    result = _run(render(spec, builtin_site()).script, tmp_path)
    assert result.returncode == 0, result.stderr
    (rec,) = _records(tmp_path)
    assert rec["argv"] == HOSTILE
    assert [rec["env"][f"V{i}"] for i in range(len(HOSTILE))] == HOSTILE
    assert rec["env"]["RESUME_FROM"] == "" and rec["env"]["PYTHONUNBUFFERED"] == "1"
    assert rec["env"]["MASTER_ADDR"] == "127.0.0.1" and rec["env"]["WORLD_SIZE"] == "1"
    _no_pwned(tmp_path)


def test_hostile_checkpoint_dir_is_created_literally(tmp_path: Path) -> None:
    spec = JobSpec(
        kind="train",
        command=(sys.executable, "-c", RECORD),
        launcher="none",
        checkpoint_dir="ck $(touch pwned-ck) `x`",
    )
    assert _run(render(spec, builtin_site()).script, tmp_path).returncode == 0
    assert (tmp_path / "ck $(touch pwned-ck) `x`" / ".dlsubmit" / "events").exists()
    _no_pwned(tmp_path)


def test_sweep_params_are_literal_and_indexed_by_array_task(tmp_path: Path) -> None:
    params = tuple(HOSTILE[:6])
    spec = JobSpec(
        kind="sweep",
        command=(sys.executable, "-c", RECORD, "--hp={param}"),
        params=params,
        parallel=2,
    )
    script = render(spec, builtin_site()).script
    for i in range(len(params)):
        assert _run(script, tmp_path, SLURM_ARRAY_TASK_ID=str(i)).returncode == 0
    recs = _records(tmp_path)
    assert [r["argv"] for r in recs] == [[f"--hp={p}"] for p in params]
    assert [r["env"]["DL_PARAM"] for r in recs] == list(params)
    assert recs[3]["env"]["CKPT_DIR"].endswith("/task-3")
    _no_pwned(tmp_path)


def test_infer_items_are_literal_and_done_stays_done(tmp_path: Path) -> None:
    items = [h for h in HOSTILE if "\n" not in h and h]
    (tmp_path / "items.txt").write_text("".join(i + "\n" for i in items))
    spec = JobSpec(
        kind="infer", command=(sys.executable, "-c", RECORD, "{item}"), inputs="items.txt"
    )
    script = render(spec, builtin_site()).script
    assert _run(script, tmp_path).returncode == 0
    assert [r["argv"] for r in _records(tmp_path)] == [[i] for i in items]
    assert [int(r["env"]["DL_ITEM_INDEX"]) for r in _records(tmp_path)] == list(range(len(items)))
    # A second run (a requeue after the end) processes nothing again.
    assert _run(script, tmp_path, SLURM_RESTART_COUNT="1").returncode == 0
    assert len(_records(tmp_path)) == len(items)
    _no_pwned(tmp_path)


def test_resume_from_points_at_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "step-1").write_text("1")
    (ck / "step-2").write_text("2")
    os.utime(ck / "step-1", (1000, 1000))
    (ck / "step-3.tmp").write_text("partial")  # newest, but not complete
    spec = JobSpec(
        kind="train", command=(sys.executable, "-c", RECORD), launcher="none", checkpoint_dir="ck"
    )
    result = _run(render(spec, builtin_site()).script, tmp_path, SLURM_RESTART_COUNT="2")
    assert result.returncode == 0, result.stderr
    (rec,) = _records(tmp_path)
    assert rec["env"]["RESUME_FROM"] == str(ck / "step-2")
    assert "event=resume restart=2" in (ck / ".dlsubmit" / "events").read_text()


def test_restart_cap_stops_before_running_the_command(tmp_path: Path) -> None:
    spec = JobSpec(
        kind="train", command=(sys.executable, "-c", RECORD), launcher="none", max_restarts=2
    )
    result = _run(render(spec, builtin_site()).script, tmp_path, SLURM_RESTART_COUNT="3")
    assert result.returncode == 3
    assert "restart-cap" in result.stdout
    assert not (tmp_path / "record.jsonl").exists()


CHECKPOINTER = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR2, lambda *a: got.append(1))
open(os.environ['OUT_FILE'] + '.ready', 'w').close()
for _ in range(600):
    if got:
        tmp = os.path.join(os.environ['CKPT_DIR'], 'final.tmp')
        open(tmp, 'w').write('saved')
        os.replace(tmp, os.path.join(os.environ['CKPT_DIR'], 'final'))
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""


def test_usr2_near_the_time_limit_is_forwarded_and_reported_as_timeout(tmp_path: Path) -> None:
    spec = JobSpec(
        kind="train",
        command=(sys.executable, "-c", CHECKPOINTER),
        launcher="none",
        time_minutes=1,
        grace_seconds=10,
        checkpoint_dir="ck",
    )
    (tmp_path / "job.sh").write_text(render(spec, builtin_site()).script)
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": "7",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "OUT_FILE": str(tmp_path / "rec"),
    }
    proc = subprocess.Popen(
        ["bash", str(tmp_path / "job.sh")], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    ready = tmp_path / "rec.ready"
    for _ in range(400):
        if ready.exists():
            break
        time.sleep(0.05)
    assert ready.exists(), "the job step never started"
    proc.send_signal(signal.SIGUSR2)  # what Slurm's --signal=B:USR2@10 does to the batch shell
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 124, out
    assert (tmp_path / "ck" / "final").read_text() == "saved"
    assert "event=timeout" in out and "event=timeout-checkpointed" in out


def _preempt_run(tmp_path: Path, ckpt_name: str, **spec_kw) -> tuple[int, str, Path]:
    """Run a train script whose program saves ``ckpt_name`` on USR2, signal it with plenty
    of time left (a preemption), with a fake ``scontrol`` that records its calls."""
    program = CHECKPOINTER.replace("'final", repr(ckpt_name)[:-1])
    spec = JobSpec(
        kind="train",
        command=(sys.executable, "-c", program),
        launcher="none",
        time_minutes=60,
        grace_seconds=120,
        checkpoint_dir="ck",
        **spec_kw,
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol.calls"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nkill -TERM $PPID\n')
    (bin_dir / "scontrol").chmod(0o755)
    (tmp_path / "job.sh").write_text(render(spec, builtin_site()).script)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "7",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "OUT_FILE": str(tmp_path / "rec"),
    }
    proc = subprocess.Popen(
        ["bash", str(tmp_path / "job.sh")], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    ready = tmp_path / "rec.ready"
    for _ in range(400):
        if ready.exists():
            break
        time.sleep(0.05)
    assert ready.exists(), "the job step never started"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGUSR2)  # the prioritizer's scancel --batch --signal=USR2
    out, _ = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 15, "the script held its GPUs waiting for a requeue"
    return proc.returncode, out + (calls.read_text() if calls.exists() else ""), tmp_path / "ck"


def test_a_preempted_script_requeues_itself_once_its_checkpoint_is_saved(tmp_path: Path) -> None:
    """No waiting out the grace period with the GPUs held: `scontrol requeue` at once."""
    rc, out, ck = _preempt_run(tmp_path, "step-5.pt")
    assert "requeue 7" in out, out
    events = (ck / ".dlsubmit" / "events").read_text()
    assert "event=checkpointed" in events and "event=requeue-self" in events, events
    assert "event=no-checkpoint" not in events
    assert not list((ck / ".dlsubmit").glob("saving-*")), "a saved checkpoint left its marker"


def test_a_save_cut_short_by_the_requeue_is_reported_at_the_next_start(tmp_path: Path) -> None:
    """The program wrote a log, not a checkpoint: the script says so, the log is not
    RESUME_FROM, and the next start records the lost work."""
    rc, out, ck = _preempt_run(tmp_path, "steps.log")
    events = (ck / ".dlsubmit" / "events").read_text()
    assert "event=no-checkpoint" in events and "requeue 7" in out, events
    (ck / "step-3.pt").write_text("old")
    os.utime(ck / "step-3.pt", (1000, 1000))
    spec = JobSpec(
        kind="train", command=(sys.executable, "-c", RECORD), launcher="none", checkpoint_dir="ck"
    )
    result = _run(
        render(spec, builtin_site()).script, tmp_path, SLURM_RESTART_COUNT="1", SLURM_JOB_ID="7"
    )
    assert result.returncode == 0, result.stderr
    (rec,) = _records(tmp_path)
    assert rec["env"]["RESUME_FROM"] == str(ck / "step-3.pt")  # never steps.log, though newer
    events = (ck / ".dlsubmit" / "events").read_text()
    assert "event=lost-work signalled=" in events and " saved=1000:" in events, events
    assert "before its checkpoint finished" in result.stdout


def test_ckpt_glob_decides_what_resume_from_may_be(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    for name, t in (("model.weights", 1000), ("steps.log", 3000), ("notes.txt", 4000)):
        (ck / name).write_text(name)
        os.utime(ck / name, (t, t))
    spec = JobSpec(
        kind="train",
        command=(sys.executable, "-c", RECORD),
        launcher="none",
        checkpoint_dir="ck",
        ckpt_glob="*.weights",
    )
    assert _run(render(spec, builtin_site()).script, tmp_path).returncode == 0
    assert _records(tmp_path)[0]["env"]["RESUME_FROM"] == str(ck / "model.weights")
