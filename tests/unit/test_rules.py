"""Each filter rule and its messages, on the testbed site config (4 nodes x 8 h100, caps 4 CPU / 31 GB per GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import JobClass
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.decision import ESLURM_INVALID_GRES
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16, JobRequest, parse_gpu_tres
from slurm_dl.core.rules.reshape import fewest_nodes_shape
from slurm_dl.core.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0
TREE = (("gpu01", "gpu02"), ("gpu03", "gpu04"))  # the testbed's two leaf switches


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "site-configs" / "testbed.toml")


def with_filter(cfg, **flags):
    data = cfg.model_dump(mode="json")
    data["filter"].update(flags)
    return parse_config(data)


def job(**fields):
    """A job_desc as slurmctld gives it: unset numbers are NO_VAL."""
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": NO_VAL,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "req_switch": NO_VAL,
        "wait4switch": NO_VAL,
        "has_script": True,
    }
    base.update(fields)
    return base


def run(cfg, ctx=None, **fields):
    return decide(job(**fields), cfg, ctx or FilterContext(now=NOW, leaf_nodes=TREE))


# --- request decoding --------------------------------------------------------------------
def test_gres_strings_decode_to_gpu_asks() -> None:
    asks, others = parse_gpu_tres("gres:gpu:h100:2,gres:license:1")
    assert [(a.gpu_type, a.count) for a in asks] == [("h100", 2)]
    assert others == ["gres:license:1"]
    assert [(a.gpu_type, a.count) for a in parse_gpu_tres("gres:gpu:3")[0]] == [(None, 3)]
    assert [(a.gpu_type, a.count) for a in parse_gpu_tres("gres:gpu")[0]] == [(None, 1)]


def test_sentinels_mean_not_set() -> None:
    req = JobRequest.from_job_desc(job(pn_min_memory=1.8446744073709552e19))
    assert (
        req.time_limit_min is None
        and req.min_nodes is None
        and req.requeue is None
        and req.req_switch is None
    )


def test_wrong_types_count_as_unset_and_are_reported() -> None:
    req = JobRequest.from_job_desc({"comment": 5, "time_limit": "60", "min_nodes": True})
    assert req.comment is None and req.time_limit_min is None and req.min_nodes is None
    assert any("comment" in p for p in req.problems)


# --- classify ----------------------------------------------------------------------------
def test_plain_batch_job_is_train(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=30)
    assert d.accepted and d.job_class is JobClass.TRAIN


def test_array_is_sweep_whatever_the_hint(cfg) -> None:
    d = run(
        cfg, array_inx="0-9", comment="dl:class=serve", tres_per_node="gres:gpu:1", time_limit=30
    )
    assert d.job_class is JobClass.SWEEP
    assert any("arrays run as class sweep" in n for n in d.notices)


def test_no_script_is_interactive(cfg) -> None:
    d = run(cfg, has_script=False, tres_per_node="gres:gpu:1", time_limit=30)
    assert d.job_class is JobClass.INTERACTIVE


def test_serve_hint_with_its_constraints_met_is_kept(cfg) -> None:
    d = run(
        cfg, comment="dl:class=serve", tres_per_node="gres:gpu:2", time_limit=120, user_name="root"
    )
    assert d.job_class is JobClass.SERVE
    assert parse_tag(d.changes["admin_comment"]).checkpointable is False


@pytest.mark.parametrize(
    "fields, why",
    [
        ({"tres_per_node": "gres:gpu:2"}, "no explicit --time"),
        ({"tres_per_job": "gres:gpu:16", "time_limit": 60}, "more than one node"),
        ({"tres_per_node": "gres:gpu:8", "min_nodes": 2, "time_limit": 60}, "more than one node"),
    ],
)
def test_serve_hint_without_its_constraints_is_downgraded(cfg, fields, why) -> None:
    d = run(cfg, comment="dl:class=serve", **fields)
    assert d.job_class is JobClass.TRAIN
    assert any("dl:class=serve downgraded to train" in n and why in n for n in d.notices)


def test_interactive_hint_over_the_class_time_is_downgraded(cfg) -> None:
    d = run(cfg, comment="dl:class=interactive", tres_per_node="gres:gpu:1", time_limit=600)
    assert d.job_class is JobClass.TRAIN
    assert any("exceeds the class maximum 120 min" in n for n in d.notices)


def test_unknown_class_hint_is_ignored_with_a_notice(cfg) -> None:
    d = run(cfg, comment="dl:class=vip", tres_per_node="gres:gpu:1", time_limit=30)
    assert d.job_class is JobClass.TRAIN
    assert any("ignored dl:class=vip" in n and "allowed:" in n for n in d.notices)


def test_unprivileged_hint_is_taken(cfg) -> None:
    assert (
        run(cfg, comment="x dl:class=inference", tres_per_node="gres:gpu:1").job_class
        is JobClass.INFERENCE
    )


def test_classify_off_leaves_train(cfg) -> None:
    d = run(with_filter(cfg, classify=False), comment="dl:class=inference", time_limit=30)
    assert d.job_class is JobClass.TRAIN


# --- validate ----------------------------------------------------------------------------
def test_unknown_gpu_type_names_it_and_what_exists(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:nosuchgpu:1")
    assert not d.accepted and d.code == ESLURM_INVALID_GRES and d.rule == "validate.gpu_type"
    assert "'nosuchgpu'" in d.message and "h100" in d.message and "Fix:" in d.message


def test_more_gpus_per_node_than_any_node_has(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:9")
    assert not d.accepted and d.rule == "validate.gpus_per_node"
    assert (
        "asked 9 GPUs per node" in d.message
        and "more than 8" in d.message
        and "--gpus=9" in d.message
    )


def test_more_gpus_than_the_cluster_has(cfg) -> None:
    d = run(cfg, tres_per_job="gres:gpu:64")
    assert not d.accepted and "asked 64" in d.message and "only 32" in d.message


def test_more_nodes_than_the_cluster_has(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:0", min_nodes=65534)
    assert (
        not d.accepted
        and d.rule == "validate.nodes"
        and "asked 65534 nodes" in d.message
        and "only 4" in d.message
    )


def test_out_of_range_shape_is_tagged_spread_when_validation_is_off(cfg) -> None:
    d = run(with_filter(cfg, validate_jobs=False), tres_per_node="gres:gpu:1", min_nodes=65533)
    assert d.accepted and parse_tag(d.changes["admin_comment"]).shape == "spread"
    d = run(with_filter(cfg, validate_jobs=False), tres_per_node="gres:gpu:0", min_nodes=65533)
    assert d.accepted and parse_tag(d.changes["admin_comment"]).shape == "any"


def test_time_over_the_class_maximum(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=2000)
    assert not d.accepted and d.code == "ESLURM_INVALID_TIME_LIMIT"
    assert "--time=2000 min for class train" in d.message and "at most 1440" in d.message


def test_unlimited_time_is_over_long(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=4294967295)
    assert not d.accepted and "--time=UNLIMITED" in d.message and "at most 1440" in d.message


def test_time_over_the_partition_maximum(cfg) -> None:
    d = run(cfg, comment="dl:class=serve", tres_per_node="gres:gpu:1", time_limit=5000)
    assert not d.accepted and "partition gpu" in d.message and "2880" in d.message


def test_missing_time_is_rejected_when_defaults_are_off(cfg) -> None:
    d = run(with_filter(cfg, defaults=False), tres_per_node="gres:gpu:1")
    assert (
        not d.accepted and d.code == "ESLURM_MISSING_TIME_LIMIT" and "--time=MINUTES" in d.message
    )


def test_cpus_per_gpu_over_the_cap(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", cpus_per_tres="gres:gpu:8", time_limit=30)
    assert not d.accepted and "--cpus-per-gpu=8" in d.message and "at most 4" in d.message


def test_mem_per_gpu_over_the_cap(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", mem_per_tres="gres:gpu:40960", time_limit=30)
    assert not d.accepted and "--mem-per-gpu=40960M" in d.message and "31744M" in d.message


def test_caps_within_limits_pass(cfg) -> None:
    d = run(
        cfg,
        tres_per_node="gres:gpu:1",
        cpus_per_tres="gres:gpu:4",
        mem_per_tres="gres:gpu:31744",
        time_limit=30,
    )
    assert d.accepted


def test_validate_off_accepts_what_it_would_refuse(cfg) -> None:
    assert run(with_filter(cfg, validate_jobs=False), tres_per_node="gres:gpu:nosuchgpu:1").accepted


# --- deadlines ---------------------------------------------------------------------------
def test_feasible_deadline_is_tagged(cfg) -> None:
    d = run(
        cfg, tres_per_node="gres:gpu:1", time_limit=60, comment=f"dl:deadline={int(NOW) + 7200}"
    )
    assert d.accepted and parse_tag(d.changes["admin_comment"]).deadline == int(NOW) + 7200


def test_iso_deadline_hint(cfg) -> None:
    # NOW is 2027-01-15T08:00:00Z; the hint is read as UTC.
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=60, comment="dl:deadline=2027-01-15T12:00")
    assert d.accepted and parse_tag(d.changes["admin_comment"]).deadline == int(NOW) + 4 * 3600


@pytest.mark.parametrize("text", ["2h", "now+2h", "120m", "7200s"])
def test_a_deadline_after_submission_is_read_at_submission(cfg, text) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=60, comment=f"dl:deadline={text}")
    assert d.accepted and parse_tag(d.changes["admin_comment"]).deadline == int(NOW) + 7200


def test_a_deadline_after_submission_too_close_is_refused(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=180, comment="dl:deadline=1h")
    assert not d.accepted and "deadline" in d.message


def test_deadline_without_a_time_limit(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", comment=f"dl:deadline={int(NOW) + 7200}")
    assert not d.accepted and "needs an explicit time limit" in d.message


def test_deadline_that_cannot_be_met_even_starting_now(cfg) -> None:
    d = run(
        cfg, tres_per_node="gres:gpu:1", time_limit=180, comment=f"dl:deadline={int(NOW) + 3600}"
    )
    assert not d.accepted and "runs past the deadline" in d.message and "Fix:" in d.message


def test_deadline_too_far_ahead(cfg) -> None:
    d = run(
        cfg,
        tres_per_node="gres:gpu:1",
        time_limit=60,
        comment=f"dl:deadline={int(NOW) + 30 * 86400}",
    )
    assert not d.accepted and "at most 7 days" in d.message


def test_deadline_quota_per_user(cfg) -> None:
    ctx = FilterContext(now=NOW, user_deadline_jobs=4)
    d = run(
        cfg,
        ctx,
        tres_per_node="gres:gpu:1",
        time_limit=60,
        comment=f"dl:deadline={int(NOW) + 7200}",
    )
    assert (
        not d.accepted
        and "already has 4 deadline jobs" in d.message
        and d.code == "ESLURM_ACCOUNTING_POLICY"
    )


def test_unreadable_deadline(cfg) -> None:
    d = run(cfg, time_limit=60, comment="dl:deadline=tomorrowish")
    assert not d.accepted and "'tomorrowish'" in d.message


def test_job_desc_deadline_field_is_used_too(cfg) -> None:
    d = run(cfg, time_limit=60, deadline=int(NOW) + 1800)
    assert not d.accepted and d.rule == "validate.deadline"


def test_deadline_steps_are_tagged_as_shares_of_the_top_value(cfg) -> None:
    d = run(
        cfg, tres_per_node="gres:gpu:1", time_limit=60, comment="dl:deadline_steps=4h=10,6h=5,10h=2"
    )
    tag = parse_tag(d.changes["admin_comment"])
    assert d.accepted and tag.deadline is None
    assert tag.soft_deadlines == (
        (int(NOW) + 4 * 3600, 1.0),
        (int(NOW) + 6 * 3600, 0.5),
        (int(NOW) + 36000, 0.2),
    )


def test_declaring_larger_values_buys_nothing(cfg) -> None:
    small = run(
        cfg, tres_per_node="gres:gpu:1", time_limit=60, comment="dl:deadline_steps=4h=1,6h=0.5"
    )
    large = run(
        cfg,
        tres_per_node="gres:gpu:1",
        time_limit=60,
        comment="dl:deadline_steps=4h=1000000,6h=500000",
    )
    assert (
        parse_tag(small.changes["admin_comment"]).soft_deadlines
        == parse_tag(large.changes["admin_comment"]).soft_deadlines
    )


def test_deadline_steps_with_iso_and_unix_times(cfg) -> None:
    d = run(
        cfg,
        tres_per_node="gres:gpu:1",
        time_limit=60,
        comment=f"dl:deadline_steps=2027-01-15T12:00=3,{int(NOW) + 5 * 3600}=1",
    )
    assert parse_tag(d.changes["admin_comment"]).soft_deadlines == (
        (int(NOW) + 4 * 3600, 1.0),
        (int(NOW) + 5 * 3600, 0.3333),
    )


@pytest.mark.parametrize(
    "steps, words",
    [
        ("4h=10,6h=10", "values must fall"),
        ("4h=5,6h=10", "values must fall"),
        ("6h=10,4h=5", "times must increase"),
        ("4h=10,4h=5", "times must increase"),
        ("4h=0", "above 0"),
        ("4h=10,6h=0", "above 0"),
        ("4h", "'4h' is not WHEN=VALUE"),
        ("soon=10", "cannot read the time 'soon'"),
        (",".join(f"{h}h=" + str(20 - h) for h in range(1, 11)), "at most 8"),
    ],
)
def test_bad_deadline_steps_are_refused_with_what_is_wrong(cfg, steps, words) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=60, comment=f"dl:deadline_steps={steps}")
    assert not d.accepted and words in d.message and "Fix:" in d.message, d.message
    assert all(len(line) <= 200 for line in d.message.splitlines())


def test_deadline_steps_get_the_strict_deadline_caps(cfg) -> None:
    far = run(
        cfg, tres_per_node="gres:gpu:1", time_limit=60, comment="dl:deadline_steps=1d=10,30d=1"
    )
    assert (
        not far.accepted and "at most 7 days" in far.message and "last deadline step" in far.message
    )
    late = run(
        cfg, tres_per_node="gres:gpu:1", time_limit=600, comment="dl:deadline_steps=2h=10,4h=1"
    )
    assert not late.accepted and "runs past the deadline" in late.message
    no_limit = run(cfg, tres_per_node="gres:gpu:1", comment="dl:deadline_steps=2h=10")
    assert not no_limit.accepted and "needs an explicit time limit" in no_limit.message
    quota = run(
        cfg,
        FilterContext(now=NOW, user_deadline_jobs=4),
        tres_per_node="gres:gpu:1",
        time_limit=60,
        comment="dl:deadline_steps=2h=10",
    )
    assert not quota.accepted and "already has 4 deadline jobs" in quota.message
    # an early step the time limit cannot make is kept: the policy aims at the first reachable one
    some = run(
        cfg, tres_per_node="gres:gpu:1", time_limit=180, comment="dl:deadline_steps=2h=10,4h=1"
    )
    assert some.accepted and len(parse_tag(some.changes["admin_comment"]).soft_deadlines) == 2


def test_a_deadline_and_deadline_steps_together_are_refused(cfg) -> None:
    d = run(
        cfg,
        tres_per_node="gres:gpu:1",
        time_limit=60,
        comment=f"dl:deadline={int(NOW) + 7200};deadline_steps=4h=10",
    )
    assert not d.accepted and "not both" in d.message


# --- reshape -----------------------------------------------------------------------------
def test_fewest_nodes_shape() -> None:
    assert fewest_nodes_shape(16, 8, 4) == (2, 8)
    assert fewest_nodes_shape(12, 8, 4) == (2, 6)
    assert fewest_nodes_shape(3, 8, 4) == (1, 3)
    assert fewest_nodes_shape(13, 8, 4) is None
    assert fewest_nodes_shape(40, 8, 4) is None
    assert fewest_nodes_shape(0, 8, 4) is None


def test_gpus_16_becomes_two_full_nodes_under_one_switch(cfg) -> None:
    d = run(cfg, tres_per_job="gres:gpu:16")
    assert d.changes["tres_per_node"] == "gres:gpu:8" and d.changes["tres_per_job"] == ""
    assert d.changes["min_nodes"] == 2 and d.changes["max_nodes"] == 2
    assert d.changes["req_switch"] == 1 and d.changes["wait4switch"] == 600
    assert parse_tag(d.changes["admin_comment"]).shape == "2x8"


def test_typed_gpus_keep_their_type(cfg) -> None:
    d = run(cfg, tres_per_job="gres:gpu:h100:4")
    assert d.changes["tres_per_node"] == "gres:gpu:h100:4" and d.changes["min_nodes"] == 1
    assert "req_switch" not in d.changes


def test_uneven_count_is_left_spread_and_tagged(cfg) -> None:
    d = run(cfg, tres_per_job="gres:gpu:13")
    assert (
        "tres_per_node" not in d.changes and parse_tag(d.changes["admin_comment"]).shape == "spread"
    )
    assert any("spread" in n for n in d.notices)


def test_user_shape_is_kept_and_multi_node_gets_a_switch(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:4", min_nodes=2, max_nodes=2)
    assert "tres_per_node" not in d.changes and d.changes["req_switch"] == 1
    assert parse_tag(d.changes["admin_comment"]).shape == "2x4"


def test_user_switch_request_is_not_overridden(cfg) -> None:
    d = run(cfg, tres_per_job="gres:gpu:16", req_switch=2, wait4switch=60)
    assert "req_switch" not in d.changes


def test_no_switches_without_topology(cfg) -> None:
    data = cfg.model_dump(mode="json")
    data["topology"] = {"source": "none", "switches": []}
    d = run(parse_config(data), tres_per_job="gres:gpu:16")
    assert d.changes["min_nodes"] == 2 and "req_switch" not in d.changes


def test_reshape_off_leaves_the_request(cfg) -> None:
    d = run(with_filter(cfg, reshape=False), tres_per_job="gres:gpu:16")
    assert "tres_per_node" not in d.changes and "min_nodes" not in d.changes


# --- defaults ----------------------------------------------------------------------------
def test_defaults_fill_time_and_requeue_for_a_job_that_declared_a_handler(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", comment="dl:ckpt=1")
    assert d.changes["time_limit"] == 60 and d.changes["requeue"] == 1
    tag = parse_tag(d.changes["admin_comment"])
    assert tag.checkpointable and tag.signal_target == "batch"


def test_a_plain_gpu_job_is_not_checkpointable_and_keeps_its_requeue_setting(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:8")
    assert d.accepted and d.job_class is JobClass.TRAIN
    assert "requeue" not in d.changes
    assert parse_tag(d.changes["admin_comment"]).checkpointable is False


def test_steps_handler_is_tagged_for_a_signal_to_the_steps(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", comment="dl:ckpt=steps", requeue=1)
    tag = parse_tag(d.changes["admin_comment"])
    assert tag.checkpointable and tag.signal_target == "steps"
    assert d.changes["admin_comment"].startswith("sdl1:class=train;ckpt=steps;")


@pytest.mark.parametrize(
    "fields, notice",
    [
        ({"comment": "dl:ckpt=maybe"}, "ignored dl:ckpt=maybe"),
        ({"comment": "dl:ckpt=1", "requeue": 0}, "asks --no-requeue"),
        (
            {"comment": "dl:class=serve;ckpt=1", "time_limit": 30, "user_name": "root"},
            "class serve is never checkpointed",
        ),
    ],
)
def test_a_declaration_that_cannot_hold_is_refused_with_a_notice(cfg, fields, notice) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", **fields)
    assert d.accepted and parse_tag(d.changes["admin_comment"]).checkpointable is False
    assert any(notice in n for n in d.notices), d.notices


def test_defaults_leave_what_the_user_set(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", time_limit=20, requeue=0)
    assert "time_limit" not in d.changes and "requeue" not in d.changes


def test_no_requeue_default_for_non_checkpointable(cfg) -> None:
    d = run(cfg, comment="dl:class=serve", tres_per_node="gres:gpu:1", time_limit=30)
    assert "requeue" not in d.changes


def test_class_partition_is_filled_when_missing(cfg) -> None:
    data = cfg.model_dump(mode="json")
    data["partitions"].append({"name": "debug", "default": False, "max_time_minutes": 120})
    data["node_groups"][0]["partitions"] = ["gpu", "debug"]
    data["classes"]["interactive"]["partition"] = "debug"
    d = run(parse_config(data), has_script=False, tres_per_node="gres:gpu:1", time_limit=30)
    assert d.job_class is JobClass.INTERACTIVE and d.changes["partition"] == "debug"


# --- tag ---------------------------------------------------------------------------------
def test_user_admin_comment_is_replaced_by_the_tag(cfg) -> None:
    forged = "sdl1:class=serve;ckpt=0;gpus=1;shape=any"
    d = run(cfg, admin_comment=forged, tres_per_node="gres:gpu:1", time_limit=30)
    tag = parse_tag(d.changes["admin_comment"])
    assert tag.job_class is JobClass.TRAIN and d.changes["admin_comment"] != forged


def test_forged_tag_is_removed_even_with_tagging_off(cfg) -> None:
    d = run(with_filter(cfg, tag=False), admin_comment="sdl1:class=serve;ckpt=0;gpus=1;shape=any")
    assert d.changes["admin_comment"] == ""


def test_tag_records_the_original_request(cfg) -> None:
    d = run(cfg, tres_per_job="gres:gpu:16")
    assert parse_tag(d.changes["admin_comment"]).original == "job.gpu:16"


def test_summary_is_one_line(cfg) -> None:
    for d in (run(cfg, tres_per_job="gres:gpu:16"), run(cfg, tres_per_node="gres:gpu:nosuchgpu:1")):
        assert "\n" not in d.summary and d.summary.split()[0] in ("accept", "reject")
