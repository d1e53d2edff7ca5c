"""The dlsubmit CLI without Slurm: dry-run (script, sbatch command, filter verdict), render,
--json, defaults from the site config and the user's file, and one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.dlsubmit.cli import app
from slurm_dl.dlsubmit.status import describe_jobs, newest_checkpoint, print_status, save_record
from slurm_dl.core.model import Job, JobState
from slurm_dl.dlsubmit.render import JobSpec, render
from slurm_dl.cli.config_file import load_config

ROOT = Path(__file__).resolve().parents[2]
TESTBED_CONFIG = ROOT / "site-configs" / "testbed.toml"
runner = CliRunner()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_DL_CONFIG", raising=False)
    monkeypatch.setenv("SLURM_DL_USER_DEFAULTS", str(tmp_path / "user.toml"))
    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_no_args_shows_help() -> None:
    result = runner.invoke(app, [])
    assert "train" in result.output and "status" in result.output


def test_dry_run_prints_script_sbatch_command_and_filter_verdict() -> None:
    result = runner.invoke(
        app,
        [
            "train",
            "--gpus",
            "2",
            "--time",
            "30",
            "--config",
            str(TESTBED_CONFIG),
            "--dry-run",
            "--",
            "python3",
            "train.py",
        ],
    )
    assert result.exit_code == 0, result.output
    # the verdict and what the filter changes first, in words; no internal tag; the script on request
    lines = result.output.splitlines()
    assert lines[0] == "filter: accepts it as a train job"
    assert "  preemptible: asked to checkpoint (USR2, 10 s ahead), then requeued" in lines
    assert "sbatch command: sbatch --parsable < script" in lines
    assert (
        "sdl1:" not in result.output
        and "admin_comment" not in result.output
        and "#!/bin/bash" not in result.output
    )
    assert all(len(line) <= 80 for line in lines), result.output
    shown = runner.invoke(
        app,
        [
            "train",
            "--gpus",
            "2",
            "--time",
            "30",
            "--config",
            str(TESTBED_CONFIG),
            "--dry-run",
            "--show-script",
            "--",
            "python3",
            "train.py",
        ],
    )
    assert shown.exit_code == 0 and shown.output.index("filter: accepts") < shown.output.index(
        "#!/bin/bash"
    )
    assert "#SBATCH --gpus-per-node=2" in shown.output and "#SBATCH --time=30" in shown.output


def test_show_script_without_a_dry_run_submits_nothing(monkeypatch, tmp_path) -> None:
    """Asking to see the script is no request to submit it (an sbatch on the PATH that
    records its calls is never called)."""
    called = tmp_path / "sbatch-called"
    fake = tmp_path / "sbatch"
    fake.write_text(f"#!/bin/sh\ntouch {called}\necho 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    result = runner.invoke(
        app,
        ["train", "--gpus", "1", "--time", "30", "--show-script", "--", "python3", "t.py"],
    )
    assert result.exit_code == 1, result.output
    assert "add --dry-run (nothing was submitted)" in result.output
    assert "#!/bin/bash" not in result.output and not called.exists()


def test_dry_run_shows_the_deadline_steps_the_filter_accepted_or_why_it_refuses() -> None:
    result = runner.invoke(
        app,
        [
            "train",
            "--gpus",
            "1",
            "--time",
            "60",
            "--deadline-steps",
            "4h=10,6h=5,10h=2",
            "--config",
            str(TESTBED_CONFIG),
            "--dry-run",
            "--",
            "python3",
            "train.py",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "deadline steps (worth by then):" in result.output and "100 %" in result.output, (
        result.output
    )
    assert "50 %" in result.output and "20 %" in result.output
    assert all(len(line) <= 80 for line in result.output.splitlines()), result.output
    late = runner.invoke(
        app,
        [
            "train",
            "--gpus",
            "1",
            "--time",
            "600",
            "--deadline-steps",
            "2h=10",
            "--config",
            str(TESTBED_CONFIG),
            "--dry-run",
            "--",
            "python3",
            "train.py",
        ],
    )
    assert (
        late.exit_code == 2 and "REFUSES" in late.output and "runs past the deadline" in late.output
    )


def test_dry_run_json_shows_a_filter_rejection() -> None:
    # 40 GPUs fit the node shape (5 x 8) but the testbed has 32 in all: the renderer lets it
    # through, the filter's rules reject it, and --dry-run says so.
    result = runner.invoke(
        app,
        [
            "train",
            "--gpus",
            "40",
            "--nodes",
            "5",
            "--config",
            str(TESTBED_CONFIG),
            "--dry-run",
            "--json",
            "--",
            "x",
        ],
    )
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["sbatch"][:2] == ["sbatch", "--parsable"]
    assert doc["script"].startswith("#!/bin/bash") and "--nodes=5" in doc["directives"]
    assert doc["filter"]["action"] == "reject" and "32" in doc["filter"]["message"]
    human = runner.invoke(
        app,
        [
            "train",
            "--gpus",
            "40",
            "--nodes",
            "5",
            "--config",
            str(TESTBED_CONFIG),
            "--dry-run",
            "--",
            "x",
        ],
    )
    assert human.output.startswith("filter: REFUSES it:") and human.exit_code == 2


def test_render_prints_only_the_script() -> None:
    result = runner.invoke(
        app,
        [
            "render",
            "sweep",
            "--param",
            "a=1",
            "--param",
            "a=2",
            "--parallel",
            "1",
            "--",
            "python3",
            "t.py",
            "{param}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("#!/bin/bash") and "#SBATCH --array=0-1%1" in result.output
    assert "# filter" not in result.output


def test_params_file_feeds_the_sweep(isolated: Path) -> None:
    (isolated / "grid.txt").write_text("# comment\nlr=0.1\n\nlr=0.2\nlr=0.3\n")
    result = runner.invoke(
        app, ["render", "sweep", "--params-file", "grid.txt", "--", "x", "{param}"]
    )
    assert result.exit_code == 0, result.output
    assert "#SBATCH --array=0-2%3" in result.output


def test_user_defaults_file_applies_and_a_bad_key_is_named(isolated: Path) -> None:
    (isolated / "user.toml").write_text(
        'partition = "gpu"\naccount = "vision"\ntime_minutes = 33\n[env]\nHF_HOME = "/x y"\n'
    )
    result = runner.invoke(app, ["render", "train", "--", "x"])
    assert result.exit_code == 0, result.output
    assert "#SBATCH --account=vision" in result.output and "#SBATCH --time=33" in result.output
    assert "export HF_HOME='/x y'" in result.output
    (isolated / "user.toml").write_text("partiton = 'gpu'\n")
    result = runner.invoke(app, ["render", "train", "--", "x"])
    assert result.exit_code == 1
    assert "user.toml" in result.output and "partiton: unknown key" in result.output


def test_site_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_DL_CONFIG", str(TESTBED_CONFIG))
    result = runner.invoke(app, ["render", "train", "--", "x"])
    assert (
        "#SBATCH --signal=B:USR2@10" in result.output
    )  # testbed grace; the built-in default is 120
    monkeypatch.delenv("SLURM_DL_CONFIG")
    assert (
        "#SBATCH --signal=B:USR2@120" in runner.invoke(app, ["render", "train", "--", "x"]).output
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--name", "a\nb", "--", "x"], "job name 'a\\nb': control characters"),
        (["train", "--dry-run"], "no command"),
        (["train", "--inputs", "f", "--", "x"], "--inputs applies to infer jobs"),
        (["train", "--launcher", "mpirun", "--", "x"], "--launcher 'mpirun'"),
        (["train", "--env", "NOVALUE", "--", "x"], "expected NAME=VALUE"),
        (["train", "--config", "/nonexistent.toml", "--", "x"], "cannot read the file"),
        (["sweep", "--params-file", "/nonexistent", "--", "x"], "cannot read it"),
    ],
)
def test_errors_are_one_line_and_non_zero(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_status_joins_slurm_jobs_with_the_submit_record(isolated: Path) -> None:
    job = render(JobSpec(kind="train", command=("x",), name="r"), load_config(TESTBED_CONFIG))
    save_record(77, job, isolated)
    ckpt = isolated / job.checkpoint_dir
    (ckpt / ".dlsubmit").mkdir(parents=True)
    (ckpt / "step-9").write_text("x")
    (ckpt / "step-10.tmp").write_text("x")
    (ckpt / ".dlsubmit" / "events").write_text("1 job=77 restart=1 event=resume\n")
    jobs = [
        Job(job_id=77, name="r", state=JobState.PENDING, state_reason="Priority", restarts=1),
        Job(job_id=78, name="other", state=JobState.RUNNING),
    ]
    rows = describe_jobs(jobs, None)
    assert [r["job_id"] for r in rows] == [77]  # only jobs dlsubmit submitted, unless asked by id
    (row,) = rows
    assert row["restarts"] == 1 and row["last_checkpoint"] == str(ckpt / "step-9")
    assert row["explain"] is None and row["events"] == ["1 job=77 restart=1 event=resume"]
    assert [r["job_id"] for r in describe_jobs(jobs, 78)] == [78]
    print_status(rows)  # renders without a prioritizer: "no prioritizer data"


def test_newest_checkpoint_ignores_partial_and_hidden(tmp_path: Path) -> None:
    assert newest_checkpoint(tmp_path / "missing") is None
    (tmp_path / ".hidden").write_text("x")
    (tmp_path / "a.partial").write_text("x")
    assert newest_checkpoint(tmp_path) is None
    (tmp_path / "a").write_text("x")
    assert newest_checkpoint(tmp_path) == str(tmp_path / "a")


def test_status_says_which_checkpoint_resumes_and_what_work_was_lost(isolated: Path) -> None:
    """A log kept in the checkpoint directory is never RESUME_FROM, and status says which file
    is; a restart after a save cut short by the requeue says the work since it was lost."""
    from slurm_dl.dlsubmit.status import detail_lines, local_time

    job = render(JobSpec(kind="train", command=("x",), name="r"), load_config(TESTBED_CONFIG))
    save_record(77, job, isolated)
    ckpt = isolated / job.checkpoint_dir
    (ckpt / ".dlsubmit").mkdir(parents=True)
    for name, t in (("step-1.pt", 1000), ("step-2.pt", 2000), ("steps.log", 3000)):
        (ckpt / name).write_text(name)
        os.utime(ckpt / name, (t, t))
    (ckpt / ".dlsubmit" / "events").write_text(
        "5000 job=77 restart=1 event=lost-work signalled=4000 saved=2000: requeued before "
        "its checkpoint finished; the work since the checkpoint it resumes from was lost\n"
    )
    jobs = [Job(job_id=77, name="r", state=JobState.RUNNING, restarts=1)]
    text = "\n".join(detail_lines(describe_jobs(jobs, 77)[0]))
    assert "resume from: step-2.pt (the newest of 2 checkpoints)" in text, text
    assert f"work since {local_time(2000)} lost" in text, text
    assert all(len(line) <= 80 for line in text.splitlines() if str(isolated) not in line), text


def test_status_shows_the_prioritizers_explanation_when_its_store_has_one(tmp_path: Path) -> None:
    from slurm_dl.core.ledger import Ledger
    from slurm_dl.store.repository import CycleWrite, Store

    url = f"sqlite:///{tmp_path / 'prio.db'}"
    expl = {
        "job_id": 77,
        "name": "r",
        "user": "u",
        "account": "a",
        "state": "PENDING",
        "class": "train",
        "num_gpus": 2,
        "rank": 0,
        "score": 5.0,
        "ranked": 3,
        "policy": "las",
        "site_factor": 900,
        "tiers": [],
        "factors": {"las": {"score": 5.0, "queue": 0}},
        "attained_gpu_s": 0.0,
        "executed_s": 0.0,
        "restarts": 0,
        "deadline": None,
        "account_usage_gpu_s": 0.0,
        "waiting_for": "4 GPUs free, needs 2",
    }
    store = Store(url)
    store.save_cycle(CycleWrite(now=1.0, cycle=1, ledger=Ledger(), explanations={77: expl}))
    store.close()
    jobs = [Job(job_id=77, name="r", state=JobState.PENDING, state_reason="Priority")]
    (row,) = describe_jobs(jobs, 77, url)
    # the explanation for people: place and what it waits for, no scheduler internals
    assert row["explain"] and "job 77" in row["explain"] and "place:" in row["explain"]
    assert "4 GPUs free, needs 2" in row["explain"] and "SiteFactor" not in row["explain"]
    # No store file: no prioritizer data, and none is created.
    (row,) = describe_jobs(jobs, 77, f"sqlite:///{tmp_path / 'absent.db'}")
    assert row["explain"] is None and not (tmp_path / "absent.db").exists()


def test_status_ignores_records_of_a_reused_job_id(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = render(JobSpec(kind="train", command=("x",), name="mine"), load_config(TESTBED_CONFIG))
    save_record(5, job, isolated)
    assert describe_jobs([Job(job_id=5, name="someone-else", state=JobState.RUNNING)], None) == []
    assert [
        r["kind"] for r in describe_jobs([Job(job_id=5, name="mine", state=JobState.RUNNING)], None)
    ] == ["train"]
    monkeypatch.setenv(
        "SLURM_CONF", "/other/cluster/slurm.conf"
    )  # another cluster: its own records
    assert describe_jobs([Job(job_id=5, name="mine", state=JobState.RUNNING)], None) == []


def test_submitted_lines_fit_80_columns():
    from slurm_dl.dlsubmit.cli import _submitted_lines
    from slurm_dl.dlsubmit.render import RenderedJob

    job = RenderedJob(
        kind="train",
        name="train-python3",
        script="",
        directives=(),
        sbatch_argv=(),
        output="train-python3-%j.out",
        checkpoint_dir="checkpoints/train-python3-20261123-215358",
        job_class="train",
    )
    lines = _submitted_lines("train", 123456, job, "train-python3-20261123-215358")
    assert all(len(line) <= 80 for line in lines), lines
    assert "    dlsubmit train --resume train-python3-20261123-215358 ..." in lines
    short = _submitted_lines("train", 7, job, "run-1")
    assert "  continue this run later with: dlsubmit train --resume run-1 ..." in short


@pytest.mark.parametrize("kind", ["train", "sweep"])
def test_dlsubmits_own_option_after_the_dashes_stops_before_anything_is_submitted(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-- python3 train.py --dry-run` used to submit a real job with --dry-run for the program."""
    import slurm_dl.dlsubmit.cli as cli

    monkeypatch.setattr(cli, "_run_job", lambda *a, **k: pytest.fail("must not submit"))
    extra = ["--param", "1"] if kind == "sweep" else []
    result = runner.invoke(app, [kind, *extra, "--", "python3", "train.py", "--dry-run", "--json"])
    assert result.exit_code == 2
    out = result.output
    assert "--dry-run --json comes after --" in out and "nothing was submitted" in out
    assert f"dlsubmit {kind} [OPTIONS] --dry-run --json -- python3 train.py" in out
    assert f"dlsubmit {kind} [OPTIONS] -- -- python3 train.py --dry-run --json" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_a_second_dashes_passes_dlsubmits_options_on_to_the_program() -> None:
    result = runner.invoke(
        app, ["render", "train", "--", "--", "python3", "train.py", "--dry-run", "--config", "c"]
    )
    assert result.exit_code == 0, result.output
    assert "dl_cmd=( python3 train.py --dry-run --config c )" in result.output
    # the program's own options that are not about what dlsubmit does pass as they are
    result = runner.invoke(app, ["render", "train", "--", "python3", "train.py", "--config", "c"])
    assert result.exit_code == 0 and "train.py --config c )" in result.output


def _infer_dry_run(config: Path, *opts: str) -> str:
    Path("items.txt").write_text("a\n")
    result = runner.invoke(
        app,
        ["infer", "--gpus", "1", *opts, "--inputs", "items.txt", "--config", str(config)]
        + ["--dry-run", "--", "python3", "infer.py", "{item}"],
    )
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.output.splitlines()), result.output
    return result.output


def test_share_and_gpu_mem_say_a_whole_gpu_where_the_site_offers_no_shards(isolated) -> None:
    out = _infer_dry_run(TESTBED_CONFIG, "--share")
    assert out.startswith("filter: accepts it as an inference job")  # an, not a
    assert "warning: --share: this site offers no GPU shards" in out
    assert "so the job gets a whole GPU" in out
    out = _infer_dry_run(TESTBED_CONFIG, "--gpu-mem", "10G")
    assert "--gpu-mem 10G: this site offers no GPU shards" in out
    assert "a whole GPU with at least 10G" in out
    shared = isolated / "shared.toml"
    shared.write_text(
        TESTBED_CONFIG.read_text()
        + '\n[[sharing.groups]]\nnode_group = "h100"\nshards_per_gpu = 4\n'
    )
    assert "no GPU shards" not in _infer_dry_run(shared, "--share")
    assert "no GPU shards" not in _infer_dry_run(TESTBED_CONFIG)  # nothing asked


def test_sharing_warning_is_for_jobs_that_could_share() -> None:
    from slurm_dl.dlsubmit.checks import sharing_warning

    assert sharing_warning("train", 1, False, "40G", False) is None  # a type filter only
    assert sharing_warning("infer", 2, False, "40G", False) is None
    assert sharing_warning("sweep", 1, True, None, True) is None
    assert "--share" in sharing_warning("serve", 1, True, "10G", False)


def test_cancel_takes_several_ids_and_says_each(monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_dl.dlsubmit.cli as cli
    from slurm_dl.core.errors import JobNotFoundError

    asked = []

    class Backend:
        def cancel(self, ref):
            asked.append(str(ref))
            if str(ref) == "99":
                raise JobNotFoundError("no such job")

    monkeypatch.setattr(cli, "_backend", lambda: Backend())
    result = runner.invoke(app, ["cancel", "1234", "1240", "1234_7", "1240"])
    assert result.exit_code == 0, result.output
    assert asked == ["1234", "1240", "1234_7"]
    assert "cancelled 1234\ncancelled 1240\ncancelled 1234_7" in result.output
    asked.clear()
    result = runner.invoke(app, ["cancel", "99", "1234"])
    assert result.exit_code == 1 and asked == ["99", "1234"]
    assert "job 99: Slurm does not know it" in result.output and "cancelled 1234" in result.output
    asked.clear()
    result = runner.invoke(app, ["cancel", "1234", "12 34"])  # a bad id: nothing is cancelled
    assert result.exit_code != 0 and asked == []


def test_help_speaks_plainly_and_summaries_are_whole_at_80_columns() -> None:
    top = runner.invoke(app, ["--help"], terminal_width=80, env={"COLUMNS": "80"})
    commands = top.output.split("Commands:")[1].splitlines()
    assert all(len(line) <= 80 and "..." not in line for line in commands), top.output
    for cmd in ("train", "infer", "serve", "sweep", "status", "logs", "cancel", "render"):
        out = runner.invoke(app, [cmd, "--help"], terminal_width=80, env={"COLUMNS": "80"})
        assert out.exit_code == 0
        for jargon in ("range", "x>=", "<int", "INTEGER"):
            assert jargon not in out.output, (cmd, out.output)
