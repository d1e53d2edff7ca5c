"""`slurm-dl filter check` takes every sbatch option: what the filter does not read is listed (stderr,
or "ignored" in --json), heterogeneous jobs are checked component by component."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from slurm_dl.cli.main import app

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"
runner = CliRunner()


def check(*args: str):
    return runner.invoke(app, ["filter", "check", "--config", str(CONFIG), *args])


def test_the_signal_the_preemption_guide_gives_is_accepted_and_ignored_options_go_to_stderr() -> (
    None
):
    r = check(
        "--",
        "--gpus=8",
        "-t",
        "60",
        "--signal=B:USR2@90",
        "--requeue",
        "--hold",
        "-o",
        "out.log",
        "--mail-type=END",
    )
    assert r.exit_code == 0 and "accept (class train)" in r.stdout, r.output
    lines = r.stderr.splitlines()
    assert lines == [
        "ignored --hold: the filter's decision does not depend on it",
        "ignored --output: the filter's decision does not depend on it",
        "ignored --mail-type: the filter's decision does not depend on it",
    ]
    assert all(len(line) <= 80 for line in lines) and "ignored" not in r.stdout


def test_json_lists_the_ignored_options_and_the_new_fields() -> None:
    r = check(
        "--json",
        "--",
        "-G",
        "1",
        "-t",
        "5",
        "-H",
        "--ntasks-per-gpu=2",
        "--exclusive=user",
        "--signal=USR2@90",
    )
    out = json.loads(r.stdout)
    assert out["ignored"] == ["--hold"] and r.stderr == ""
    job = out["job"]
    assert job["ntasks_per_tres"] == 2 and job["shared"] == 2 and job["signal"] == "USR2@90"


def test_a_heterogeneous_job_is_checked_per_component_and_any_rejection_exits_2() -> None:
    r = check("--", "-G", "1", "-t", "5", ":", "--gres=gpu:nosuchgpu:1", "-t", "5")
    assert r.exit_code == 2, r.output
    assert (
        "component 0: accept" in r.stdout
        and "component 1: reject" in r.stdout
        and "nosuchgpu" in r.stdout
    )
    r = check("--json", "--", "-G", "1", "-t", "5", ":", "-G", "2", "-t", "5")
    out = json.loads(r.stdout)
    first, second = out["components"]
    assert (
        r.exit_code == 0
        and first["job"]["het_job_offset"] == 0
        and second["job"]["het_job_offset"] == 1
    )
    assert second["job"]["has_script"] is False and out["ignored"] == []
    # the shim hands later components the tag the filter gave the first
    assert second["job"]["het_leader_tag"] == first["decision"]["set"]["admin_comment"]


def test_a_deadline_given_by_a_shortened_option_still_gets_the_live_filter_note() -> None:
    r = check("--", "--dead=now+3hours", "-t", "60", "-G", "1")
    assert r.exit_code == 0 and "dl:deadline=" in r.output


def test_refusals_stay_one_line() -> None:
    for args, word in (
        (["--gpu=1"], "ambiguous"),
        (["--exclusive=all"], "--exclusive"),
        (["--signal=NOPE"], "--signal"),
        (["--het-group=1"], "unknown sbatch option"),
    ):
        r = check("--", *args)
        assert r.exit_code == 1 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, (
            r.output
        )
