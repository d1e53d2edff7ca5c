"""dlsubmit speaks Slurm: time and memory as sbatch takes them, per-kind options, one checkpoint
directory per run unless a name asks to share, readable refusals with the valid choices, the
cluster check of --dry-run, the single-process warning, and a status table that fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.dlsubmit.cli import app
from slurm_dl.dlsubmit.checks import (
    ClusterFacts,
    cluster_problems,
    refusal_lines,
    refusal_message,
    single_process_warning,
)
from slurm_dl.dlsubmit.status import parse_since, select_rows, status_table
from slurm_dl.core.errors import SlurmError
from slurm_dl.core.model import Partition
from slurm_dl.core.units import UnitError, format_time, parse_memory_mb, parse_time_seconds

runner = CliRunner()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_DL_CONFIG", raising=False)
    monkeypatch.setenv("SLURM_DL_USER_DEFAULTS", str(tmp_path / "user.toml"))
    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "empty-slurm.conf").write_text("")
    monkeypatch.setenv(
        "SLURM_CONF", str(tmp_path / "empty-slurm.conf")
    )  # no cluster reachable, at once
    return tmp_path


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 5400),
        ("5:30", 330),
        ("2:00:00", 7200),
        ("1-00", 86400),
        ("1-02:30", 95400),
        ("1-00:00:00", 86400),
        ("0:30", 30),
    ],
)
def test_every_slurm_time_format(text: str, seconds: int) -> None:
    assert parse_time_seconds(text) == seconds


@pytest.mark.parametrize("text", ["0", "0:00", "-5", "2h", "1-", "a:b", ""])
def test_bad_or_zero_time_is_an_error(text: str) -> None:
    with pytest.raises(UnitError):
        parse_time_seconds(text)


def test_memory_needs_a_unit() -> None:
    assert parse_memory_mb("80G") == (81920, "80G")
    assert parse_memory_mb("512m") == (512, "512M")
    for bad in ("80", "-4", "0G", "lots", "1.5G"):
        with pytest.raises(UnitError):
            parse_memory_mb(bad)
    assert format_time(86400) == "1-00:00:00" and format_time(5400) == "1:30:00"


def test_dry_run_renders_slurm_time_and_memory() -> None:
    r = runner.invoke(
        app,
        [
            "train",
            "-t",
            "1-00:00:00",
            "--mem-per-gpu",
            "80G",
            "--dry-run",
            "--show-script",
            "--",
            "python3",
            "t.py",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "#SBATCH --time=1-00:00:00" in r.output and "#SBATCH --mem-per-gpu=80G" in r.output
    assert "DL_TIME_LIMIT_S=86400" in r.output
    assert "cluster: not checked (" in r.output  # says when it could not check


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--time", "0", "--", "x"], "--time 0: must be more than zero"),
        (
            ["sweep", "--parallel", "0", "--param", "a", "--", "x"],
            "--parallel 0: must be 1 or more",
        ),
        (["train", "--mem-per-gpu", "-4", "--", "x"], "--mem-per-gpu -4: must be more than zero"),
        (["train", "--mem-per-gpu", "80", "--", "x"], "give a unit, e.g. 80G"),
        (["train", "--cpus-per-gpu", "0", "--", "x"], "--cpus-per-gpu 0: must be 1 or more"),
        (["train", "--time", "99-00", "--", "x"], "train jobs allow at most"),
        (
            ["infer", "--nodes", "2", "--inputs", "f", "--", "x"],
            "--nodes applies to train jobs, not infer",
        ),
        (["train", "python3", "train.py", "--lr", "0.1"], "put -- before the program"),
    ],
)
def test_bad_values_are_errors_not_defaults(args: list[str], message: str) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code != 0
    assert message in r.output, r.output
    assert "Traceback" not in r.output


def test_default_checkpoint_directory_is_per_run_unless_named() -> None:
    one = json.loads(
        runner.invoke(app, ["train", "--dry-run", "--json", "--", "python3", "t.py"]).stdout
    )
    assert one["checkpoint_dir"].startswith("checkpoints/train-python3-")
    named = json.loads(
        runner.invoke(app, ["train", "--name", "llm", "--dry-run", "--json", "--", "x"]).stdout
    )
    assert named["checkpoint_dir"] == "checkpoints/llm"
    resumed = json.loads(
        runner.invoke(
            app, ["train", "--resume", "train-x-1", "--dry-run", "--json", "--", "x"]
        ).stdout
    )
    assert resumed["checkpoint_dir"] == "checkpoints/train-x-1"
    r = runner.invoke(app, ["train", "--resume", "a", "--checkpoint-dir", "b", "--", "x"])
    assert r.exit_code == 1 and "give one" in r.output


def test_infer_help_lists_no_train_options() -> None:
    text = runner.invoke(app, ["infer", "--help"], env={"COLUMNS": "80"}).output
    assert "--inputs" in text and "--nodes" not in text and "train only" not in text


FACTS = ClusterFacts(
    checked=True,
    partitions=[Partition("gpu", default=True, max_time_s=7200.0), Partition("debug")],
    gpu_types=["a100", "h100"],
)


def test_cluster_check_names_the_valid_choices() -> None:
    assert cluster_problems(FACTS, ["--partition=nosuch"]) == [
        "partition 'nosuch' does not exist; valid: gpu, debug"
    ]
    assert "valid: a100, h100" in cluster_problems(FACTS, ["--gpus-per-node=v100:2"])[0]
    assert "over partition gpu's limit of 2:00:00" in cluster_problems(FACTS, ["--time=3:00:00"])[0]
    assert cluster_problems(FACTS, ["--partition=debug", "--time=3:00:00"]) == []
    assert cluster_problems(ClusterFacts(checked=False, why="down"), ["--partition=x"]) == []


def test_refusals_read_as_one_line_with_details_kept() -> None:
    e = SlurmError(
        "sbatch: sbatch: error: Batch job submission failed: Invalid partition name specified"
    )
    assert refusal_lines(e) == ["Batch job submission failed: Invalid partition name specified"]
    msg = refusal_message(e, FACTS)
    assert msg == [
        "Slurm refused the job: Batch job submission failed: Invalid partition name specified "
        "(valid partitions: gpu, debug)"
    ]
    multi = SlurmError("sbatch: sbatch: error: first problem; sbatch: error: second problem")
    assert refusal_message(multi, None) == [
        "Slurm refused the job: first problem",
        "second problem",
    ]


def test_single_process_warning() -> None:
    assert "ONE process" in single_process_warning(
        "train", 2, "auto", ["python3", "t.py"], torchrun_here=False
    )
    assert (
        single_process_warning("train", 2, "auto", ["python3", "t.py"], torchrun_here=True) is None
    )
    assert (
        single_process_warning("train", 2, "auto", ["torchrun", "t.py"], torchrun_here=False)
        is None
    )
    assert "must use all 4 GPUs" in single_process_warning("train", 4, "none", ["python3", "t.py"])
    assert single_process_warning("train", 1, "none", ["python3", "t.py"]) is None
    # a 2 x 8 job: the whole job's GPUs, and one process per node
    two = single_process_warning(
        "train", 8, "auto", ["python3", "t.py"], torchrun_here=False, nodes=2
    )
    assert "this 16-GPU job on 2 nodes runs ONE process per node" in two and "8-GPU" not in two


def _row(job_id: int, state: str, submitted: float, why: str | None = None) -> dict:
    return {
        "job_id": job_id,
        "name": "a-very-long-job-name-indeed",
        "state": state,
        "reason": "Priority",
        "restarts": 1,
        "nodes": ["node001", "node002"],
        "kind": "train",
        "submitted_at": submitted,
        "started_at": submitted + 60,
        "why": why,
        "telemetry": False,
        "gpu": None,
    }


def test_status_table_fits_80_columns_and_lists_recent_jobs() -> None:
    now = 1_800_000_000.0
    rows = [
        _row(1, "RUNNING", now - 10 * 86400),
        _row(2, "PENDING", now - 60, "3rd of 9 waiting; " + "x" * 90),
        _row(3, "COMPLETED", now - 3600),
        _row(4, "COMPLETED", now - 3 * 86400),
    ]
    shown = select_rows(rows, show_all=False, since_s=parse_since("24h"), now=now)
    assert [r["job_id"] for r in shown] == [1, 2, 3]
    assert len(select_rows(rows, show_all=True, since_s=1, now=now)) == 4
    lines = status_table(shown, 80)
    assert all(len(line) <= 80 for line in lines), lines
    assert "3rd of 9 waiting" in lines[2]
    with pytest.raises(ValueError):
        parse_since("soon")


def test_user_defaults_speak_slurm_too(isolated: Path) -> None:
    (isolated / "user.toml").write_text('time = "1-00"\nmem_per_gpu = "512M"\n')
    r = runner.invoke(app, ["render", "train", "--", "x"])
    assert r.exit_code == 0, r.output
    assert "#SBATCH --time=1-00" in r.output and "#SBATCH --mem-per-gpu=512M" in r.output
    r = runner.invoke(app, ["render", "train", "-t", "30", "--", "x"])  # the command line wins
    assert "#SBATCH --time=30" in r.output
    (isolated / "user.toml").write_text('mem_per_gpu = "80"\n')
    r = runner.invoke(app, ["render", "train", "--", "x"])
    assert r.exit_code == 1 and "give a unit" in r.output


def test_explain_names_the_checkpoint_the_next_start_resumes_from(isolated: Path) -> None:
    """The checkpoint of a dlsubmit job's record, as status finds it: the newest by name."""
    import json
    import os

    from slurm_dl.dlsubmit.status import resume_checkpoint, state_dir

    ckpt = isolated / "ckpt"
    ckpt.mkdir()
    d = state_dir()
    d.mkdir(parents=True)
    record = {"name": "train", "checkpoint_dir": str(ckpt), "ckpt_globs": ["step-*.json"]}
    (d / "77.json").write_text(json.dumps(record))
    assert resume_checkpoint(77, "train") == ""  # none yet
    for i, name in enumerate(("step-000030.json", "step-000031.json", "notes.txt")):
        (ckpt / name).write_text("{}")
        os.utime(ckpt / name, (1000 + i, 1000 + i))
    assert resume_checkpoint(77, "train") == "step-000031.json"
    assert resume_checkpoint(77, "other") is None and resume_checkpoint(78, "train") is None


def test_dry_run_says_whether_the_deadline_would_be_promised_now() -> None:
    """The pure part: the filter's tag and a queue snapshot through the prioritizer's
    admission test; and without a cluster the dry run says what the test would need."""
    from slurm_dl.core.model import Job, JobState, Node
    from slurm_dl.dlsubmit.checks import deadline_outlook

    now = 1_800_000_000.0
    tag = f"sdl1:class=train;ckpt=0;gpus=8;shape=1x8;deadline={int(now + 4000)}"
    queued = Job(1, user="u", num_gpus=8, time_limit=3600.0, submit_time=now - 60)
    queued.state = JobState.PENDING
    queued.admin_comment = f"sdl1:class=train;ckpt=0;gpus=8;shape=1x8;deadline={int(now + 3900)}"
    nodes = [Node("gpu01", 8, "h100")]
    said = deadline_outlook(tag, 60, "alice", [queued], nodes, now, 1.0)
    assert said.startswith("deadline: would not be promised now:") and "best effort" in said
    said = deadline_outlook(tag, 60, "alice", [], nodes, now, 1.0)
    assert said.startswith("deadline: would be promised if submitted now")
    assert (
        deadline_outlook("sdl1:class=train;ckpt=0;gpus=8;shape=1x8", 60, "a", [], nodes, now, 1.0)
        is None
    )
    cfg = Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml"
    r = runner.invoke(
        app,
        ["train", "--config", str(cfg), "--gpus", "1", "-t", "60", "--deadline", "6h"]
        + ["--dry-run", "--", "python3", "t.py"],
        env={"COLUMNS": "80"},
    )
    assert "deadline: whether it would be promised is not known here" in r.output, r.output
    assert all(len(line) <= 80 for line in r.output.splitlines())
