"""The filter's share rule on the testbed site config with shards on its h100 node group: a
1-GPU job of a sharing class (or one that asks) becomes one shard with a notice; multi-GPU and
training jobs never; a training job that asks for a shard is refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import JobClass
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cfg():
    data = load_config(REPO / "site-configs" / "testbed.toml").model_dump(mode="json")
    data["sharing"] = {
        "groups": [
            {
                "node_group": data["node_groups"][0]["name"],
                "shards_per_gpu": 8,
                "shard_memory_gb": 10,
            }
        ]
    }
    return parse_config(data)


def run(cfg, **fields):
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
    return decide({**base, **fields}, cfg, FilterContext(now=1_800_000_000.0))


def test_a_one_gpu_interactive_job_becomes_one_shard_and_is_told_how_to_keep_a_gpu(cfg):
    d = run(cfg, has_script=False, time_limit=60, tres_per_job="gres:gpu:1")
    assert d.accepted and d.job_class is JobClass.INTERACTIVE
    assert d.changes["tres_per_node"] == "gres:shard:1" and d.changes["tres_per_job"] == ""
    (note,) = [n for n in d.notices if "shard" in n]
    assert "1 of 8 parts of a h100, 10 GB of its memory" in note and "dl:share=0" in note


def test_the_23_02_spelling_is_kept(cfg):
    d = run(cfg, has_script=False, time_limit=60, tres_per_job="gres/gpu:1")
    assert d.changes["tres_per_node"] == "gres/shard:1"


def test_opting_out_multi_gpu_and_training_keep_whole_gpus(cfg):
    assert "shard" not in run(
        cfg, has_script=False, time_limit=60, tres_per_job="gres:gpu:1", comment="dl:share=0"
    ).changes.get("tres_per_node", "")
    assert "shard" not in run(
        cfg, has_script=False, time_limit=60, tres_per_job="gres:gpu:2"
    ).changes.get("tres_per_node", "")
    d = run(cfg, tres_per_job="gres:gpu:1")
    assert (
        d.accepted
        and d.job_class is JobClass.TRAIN
        and "shard" not in d.changes.get("tres_per_node", "")
    )


def test_a_job_may_ask_to_share(cfg):
    d = run(cfg, tres_per_job="gres:gpu:1", comment="dl:class=sweep;share=1", array_inx="0-1")
    assert (
        d.accepted
        and d.job_class is JobClass.SWEEP
        and d.changes["tres_per_node"] == "gres:shard:1"
    )


@pytest.mark.parametrize(
    "fields",
    [dict(tres_per_node="gres:shard:2"), dict(tres_per_job="gres:gpu:1", comment="dl:share=1")],
)
def test_a_training_job_that_asks_for_a_shard_is_refused_with_the_reason(cfg, fields):
    d = run(cfg, **fields)
    assert not d.accepted and d.rule == "share.train"
    assert "training job cannot run on a GPU shard" in d.message and "--gpus=N" in d.message


def test_no_sharing_section_changes_nothing():
    cfg = load_config(REPO / "site-configs" / "testbed.toml")
    d = run(cfg, has_script=False, time_limit=60, tres_per_job="gres:gpu:1")
    assert d.accepted and "shard" not in d.changes.get("tres_per_node", "")
    assert run(cfg, tres_per_node="gres:shard:2").accepted


@pytest.mark.parametrize(
    "mem, shards", [("10G", 1), ("15G", 2), ("512M", 1), ("60G", 6), ("70G", 7)]
)
def test_the_gpu_memory_a_job_needs_sets_its_shard_count(cfg, mem, shards):
    d = run(cfg, tres_per_job="gres:gpu:1", comment=f"dl:class=inference;ckpt=0;gpu_mem={mem}")
    assert d.accepted and d.changes["tres_per_node"] == f"gres:shard:{shards}"
    (note,) = [n for n in d.notices if "shard" in n]
    assert note == (
        f"slurm-dl: this 1-GPU inference job runs on {shards} GPU shard(s) ({shards} of 8 parts of a h100, "
        f"{shards * 10} GB of its memory for the {mem} it needs). For a whole GPU: --comment=dl:share=0"
    )
    assert d.changes["admin_comment"].startswith("sdl1:class=inference;ckpt=0;gpus=1;"), (
        "a shard counts as a GPU"
    )
    assert f";shards={shards}:8;" in d.changes["admin_comment"], (
        "the tag records the share, not one GPU"
    )


def test_a_job_whose_memory_needs_a_whole_gpu_keeps_one_and_is_told(cfg):
    d = run(cfg, tres_per_job="gres:gpu:1", comment="dl:class=inference;gpu_mem=75G")
    assert d.accepted and "shard" not in d.changes.get("tres_per_node", "")
    assert (
        "slurm-dl: this job keeps a whole GPU: its GPU memory (75G) needs all of one (GPU shards hold less)"
        in d.notices
    )
    assert ";gpus=1;" in d.changes["admin_comment"] and "shards=" not in d.changes["admin_comment"]


def test_a_small_memory_asks_for_shards_but_never_for_training(cfg):
    d = run(cfg, tres_per_job="gres:gpu:1", comment="dl:class=sweep;gpu_mem=8G", array_inx="0-1")
    assert d.changes.get("tres_per_node") == "gres:shard:1", (
        "a class outside [sharing] classes that asks by memory"
    )
    d = run(cfg, tres_per_job="gres:gpu:1", comment="dl:gpu_mem=8G")
    assert d.job_class is JobClass.TRAIN and "shard" not in d.changes.get("tres_per_node", "")
    d = run(cfg, tres_per_job="gres:gpu:1", comment="dl:class=inference;gpu_mem=lots")
    assert not d.accepted and "cannot read dl:gpu_mem='lots'" in d.message, (
        "refused, not read as no need"
    )


def test_the_shard_tag_reads_back_and_a_bad_one_is_no_tag():
    from slurm_dl.core.tags import JobTag, encode_tag, parse_tag

    tag = JobTag(JobClass.INFERENCE, False, 0, "1x1", shards=(3, 8))
    text = encode_tag(tag)
    assert text == "sdl1:class=inference;ckpt=0;gpus=0;shape=1x1;shards=3:8"
    assert parse_tag(text) == tag
    for bad in (
        "shards=0:8",
        "shards=9:8",
        "shards=3:200",
        "shards=3",
        "shards=a:8",
        "shards=3:8:1",
    ):
        assert parse_tag(f"sdl1:class=inference;ckpt=0;gpus=0;shape=1x1;{bad}") is None, bad
    with pytest.raises(ValueError, match="tag shards must be K:S"):
        encode_tag(JobTag(JobClass.INFERENCE, False, 0, "1x1", shards=(9, 8)))
