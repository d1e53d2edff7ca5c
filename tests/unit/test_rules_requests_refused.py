"""Requests the filter used to accept and should refuse or read: deadline steps in the past,
a hint given twice, GPU types no node can run where the job may go, and offline
``filter check`` reading ``--constraint`` as the live filter does."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def mixed():
    return load_config(REPO / "site-configs" / "testbed-mixed.toml")


def run(cfg, **fields):
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 60,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "req_switch": NO_VAL,
        "wait4switch": NO_VAL,
        "has_script": True,
    }
    return decide({**base, **fields}, cfg, FilterContext(now=NOW))


@pytest.mark.parametrize("steps", ["1=10,6h=5", f"{int(NOW) - 60}=10,6h=5", "4h=10,1=5"])
def test_a_deadline_step_before_the_submission_is_refused(mixed, steps):
    d = run(mixed, tres_per_job="gres:gpu:1", comment=f"dl:deadline_steps={steps}")
    assert not d.accepted and "is not after the submission" in d.message, d.message


def test_steps_after_the_submission_are_still_taken(mixed):
    d = run(mixed, tres_per_job="gres:gpu:1", comment="dl:deadline_steps=4h=10,6h=5")
    assert d.accepted and parse_tag(d.changes["admin_comment"]).soft_deadlines


@pytest.mark.parametrize(
    "comment, key",
    [
        ("dl:deadline=6h dl:deadline=1h", "deadline"),
        ("dl:deadline=6h;class=train;deadline=2h", "deadline"),
        ("dl:class=interactive dl:class=serve", "class"),
    ],
)
def test_a_hint_given_twice_with_different_values_is_refused(mixed, comment, key):
    d = run(mixed, tres_per_job="gres:gpu:1", comment=comment)
    assert not d.accepted and d.rule == "validate.hints"
    assert (
        f"dl:{key} is given 2 times with different values" in d.message
        and f"give dl:{key} once" in d.message
    )


def test_the_same_hint_twice_with_the_same_value_is_harmless(mixed):
    assert run(mixed, tres_per_job="gres:gpu:1", comment="dl:ckpt=0 dl:ckpt=0").accepted


@pytest.mark.parametrize(
    "fields, words",
    [
        (
            dict(tres_per_node="gres:gpu:v100:1", partition="h100"),
            "asked v100 GPUs in partition h100, which has h100 nodes only. Fix: -p v100 for v100",
        ),
        (
            dict(tres_per_node="gres:gpu:h100:1,gres:gpu:v100:1"),
            "each node here has GPUs of one type",
        ),
        (
            dict(tres_per_job="gres:gpu:h100:1,gres:gpu:v100:1", max_nodes=1),
            "each node here has GPUs of one type",
        ),
    ],
)
def test_typed_requests_no_node_can_run_are_refused(mixed, fields, words):
    d = run(mixed, **fields)
    assert not d.accepted and d.rule == "validate.gpu_types" and words in d.message, d.message


def test_typed_requests_that_some_node_runs_are_accepted(mixed):
    assert run(mixed, tres_per_node="gres:gpu:v100:1", partition="v100").accepted
    assert run(mixed, tres_per_node="gres:gpu:v100:1", partition="gpu").accepted
    assert run(
        mixed, tres_per_node="gres:gpu:v100:1"
    ).accepted  # the default partition holds every type
    # several types per job over several nodes: Slurm may place each on its own node
    assert run(
        mixed, tres_per_job="gres:gpu:h100:1,gres:gpu:v100:1", min_nodes=2, max_nodes=2
    ).accepted


def test_offline_filter_check_reads_the_constraint_as_the_live_filter_does(mixed):
    import json

    out = CliRunner().invoke(
        app,
        [
            "filter",
            "check",
            "--config",
            str(REPO / "site-configs" / "testbed-mixed.toml"),
            "--json",
            "--",
            "--gpus=2",
            "-t",
            "60",
            "--constraint=v100",
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["job"]["features"] == "v100" and doc["ignored"] == []
    offline = parse_tag(doc["decision"]["set"]["admin_comment"])
    live = parse_tag(
        run(mixed, tres_per_job="gres:gpu:2", features="v100").changes["admin_comment"]
    )
    assert offline.gpu_types == live.gpu_types == ("v100",)
