"""High classes cost something: serve / interactive open only to listed accounts or QOS, and at
most max_gpus_per_user GPUs per user in live jobs; the prioritizer re-checks both."""

from __future__ import annotations

from pathlib import Path

import pytest

from prioritizer.jobs import demote_violations
from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import Job, JobClass, JobState
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def cfg():
    data = load_config(REPO / "site-configs" / "testbed.toml").model_dump(mode="json")
    data["classes"]["serve"].update(
        allow_accounts=["serving"], allow_qos=["prod"], allow_users=None, max_gpus_per_user=4
    )
    data["classes"]["interactive"].update(allow_accounts=["ml", "serving"], max_gpus_per_user=2)
    return parse_config(data)


def job(**fields):
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 60,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "has_script": True,
        "tres_per_job": "gres:gpu:2",
    }
    base.update(fields)
    return base


def run(cfg, held=None, **fields):
    return decide(job(**fields), cfg, FilterContext(now=NOW, user_class_gpus=held or {}))


def test_serve_from_an_account_not_on_the_list_is_refused_with_the_reason(cfg) -> None:
    d = run(cfg, account="physics", comment="dl:class=serve")
    assert not d.accepted and d.rule == "validate.class_access"
    assert (
        "class serve is open to accounts serving or QOS prod, not to account 'physics'" in d.message
    )
    assert "Fix:" in d.message


@pytest.mark.parametrize(
    "fields",
    [
        {"account": "serving"},
        {"qos": "prod"},
        {"default_account": "serving"},
        {"account": "physics", "qos": "prod"},
    ],
)
def test_serve_from_a_listed_account_or_qos_is_taken(cfg, fields) -> None:
    d = run(cfg, comment="dl:class=serve", **fields)
    assert d.accepted and d.job_class is JobClass.SERVE


def test_quota_counts_what_the_user_already_holds(cfg) -> None:
    assert run(cfg, held={"serve": 2}, account="serving", comment="dl:class=serve").accepted
    d = run(cfg, held={"serve": 3}, account="serving", comment="dl:class=serve")
    assert not d.accepted and d.rule == "validate.class_quota" and "you hold 3" in d.message


def test_allocation_without_a_script_from_an_unlisted_account_runs_as_train(cfg) -> None:
    d = run(cfg, account="physics", has_script=False, tres_per_job="gres:gpu:1")
    assert d.accepted and d.job_class is JobClass.TRAIN
    assert any("runs as class train" in n for n in d.notices)
    assert parse_tag(d.changes["admin_comment"]).job_class is JobClass.TRAIN
    d = run(cfg, account="ml", has_script=False, tres_per_job="gres:gpu:1")
    assert d.job_class is JobClass.INTERACTIVE


def test_unrestricted_classes_stay_open(cfg) -> None:
    assert run(cfg, account="physics", comment="dl:class=inference").accepted


def test_prioritizer_demotes_unlisted_accounts_and_jobs_over_the_quota(cfg) -> None:
    def serve(i, account, gpus, t):
        return Job(
            i,
            user="u",
            account=account,
            num_gpus=gpus,
            time_limit=3600.0,
            submit_time=t,
            job_class=JobClass.SERVE,
            state=JobState.PENDING,
        )

    jobs = [
        serve(1, "physics", 1, 1),
        serve(2, "serving", 2, 2),
        serve(3, "serving", 2, 3),
        serve(4, "serving", 1, 4),
    ]
    why = demote_violations(jobs, cfg)
    assert set(why) == {1, 4}, why
    assert "not to account 'physics'" in why[1] and "allows 4 GPU(s) per user" in why[4]
    assert [j.job_class for j in jobs] == [
        JobClass.TRAIN,
        JobClass.SERVE,
        JobClass.SERVE,
        JobClass.TRAIN,
    ]
