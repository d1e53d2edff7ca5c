"""Elastic jobs in the filter: sizes checked, tagged by the filter only (testbed: 4 x 8 h100)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.elastic_sizes import ElasticSizes, fits_nodes, node_shape, parse_sizes
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.tags import JobTag, encode_tag, parse_tag
from slurm_dl.core.model import JobClass

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "site-configs" / "testbed.toml")


def run(cfg, **fields):
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 600,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "req_switch": NO_VAL,
        "wait4switch": NO_VAL,
        "has_script": True,
        "tres_per_job": "gres:gpu:32",
        "script_head": "#!/bin/bash\n#SBATCH --signal=B:USR2@90\ntrap 'exit 0' USR2\nsleep 1\n",
    }
    base.update(fields)
    if "comment" in fields and "dl:ckpt" not in fields["comment"]:
        base["comment"] = "dl:ckpt=1 " + fields["comment"]
    return decide(base, cfg, FilterContext(now=NOW))


def tag_of(decision):
    return parse_tag(decision.changes["admin_comment"])


@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        ("8-32", ElasticSizes(8, 32)),
        ("8,16,32", ElasticSizes(8, 32, (8, 16, 32))),
        ("8+16+32", ElasticSizes(8, 32, (8, 16, 32))),
        (" 1-4 ", ElasticSizes(1, 4)),
    ],
)
def test_sizes_parse(text: str, sizes: ElasticSizes) -> None:
    assert parse_sizes(text) == sizes


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0-8", "at least 1"),
        ("32-8", "below the maximum"),
        ("8-8", "below the maximum"),
        ("16,8,32", "8 comes after 16; sort"),
        ("8,8,16", "8 is given twice"),
        ("0,8", "at least 1"),
        ("8", "at least two sizes"),
        ("eight-32", "'eight-32'"),
        ("8-32,64", "'8-32,64'"),
        ("", "write a range"),
    ],
)
def test_bad_sizes_name_the_bad_value(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_sizes(text)
    assert says in str(info.value)


def test_node_shapes() -> None:
    assert [g for g in range(1, 40) if fits_nodes(g, 8, 4)] == [*range(1, 9), 16, 24, 32]
    assert node_shape(24, 8) == (3, 8) and node_shape(4, 8) == (1, 4)
    assert ElasticSizes(8, 32).sizes(lambda g: fits_nodes(g, 8, 4)) == (8, 16, 24, 32)


def test_a_range_at_its_maximum_is_tagged(cfg) -> None:
    d = run(cfg, comment="dl:elastic=8-32")
    assert d.accepted, d.message
    assert tag_of(d).elastic == ElasticSizes(8, 32)
    assert "elastic=8-32" in d.changes["admin_comment"]


def test_a_set_is_tagged_with_plus(cfg) -> None:
    d = run(cfg, comment="dl:elastic=8,16,32")
    assert d.accepted, d.message
    assert "elastic=8+16+32" in d.changes["admin_comment"]
    assert tag_of(d).elastic.choices == (8, 16, 32)


@pytest.mark.parametrize(
    ("comment", "fields", "says"),
    [
        ("dl:elastic=8-16", {}, "asks for 32 GPUs; submit it at its maximum, 16"),
        ("dl:elastic=12-32", {}, "12 GPUs fit no node shape"),
        ("dl:elastic=8,12,32", {}, "12 GPUs fit no node shape"),
        ("dl:elastic=8-40", {"tres_per_job": "gres:gpu:40"}, ""),
        ("dl:elastic=32-8", {}, "minimum 32 must be below the maximum 8"),
        ("dl:elastic=8,16,32 dl:elastic=8-32", {}, "given 2 times"),
        ("dl:elastic=8-32 dl:ckpt=0", {}, "checkpoint"),
    ],
)
def test_nonsense_is_refused_with_the_value(cfg, comment, fields, says) -> None:
    d = run(cfg, comment=comment, **fields)
    assert not d.accepted
    assert says in d.message, d.message
    assert "dl:elastic=" in d.message or d.rule != "elastic"


def test_a_forged_admin_comment_makes_no_job_elastic(cfg) -> None:
    forged = encode_tag(JobTag(JobClass.TRAIN, True, 32, "4x8", elastic=ElasticSizes(8, 32)))
    d = run(cfg, admin_comment=forged)
    assert d.accepted, d.message
    assert tag_of(d).elastic is None


def test_rigid_jobs_carry_no_elastic_key(cfg) -> None:
    d = run(cfg)
    assert d.accepted and "elastic" not in d.changes["admin_comment"]


def test_tag_round_trip_and_bad_tag_values() -> None:
    tag = JobTag(JobClass.TRAIN, True, 32, "4x8", elastic=ElasticSizes(8, 32, (8, 16, 32)))
    assert parse_tag(encode_tag(tag)) == tag
    text = encode_tag(tag)
    assert parse_tag(text.replace("elastic=8+16+32", "elastic=32-8")) is None
    assert parse_tag(text.replace("elastic=8+16+32", "elastic=16+8")) is None
