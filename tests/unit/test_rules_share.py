"""The filter's share rule on the testbed site config with shards on its h100 node group: a
1-GPU job of a sharing class (or one that asks) becomes one shard with a notice; multi-GPU and
training jobs never; a training job that asks for a shard is refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.config import load_config, parse_config
from slurm_dl.core.model import JobClass
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cfg():
    data = load_config(REPO / "site-configs" / "testbed.toml").model_dump(mode="json")
    data["sharing"] = {"groups": [{"node_group": data["node_groups"][0]["name"], "shards_per_gpu": 8,
                                   "shard_memory_gb": 10}]}
    return parse_config(data)


def run(cfg, **fields):
    base = {"user_name": "alice", "user_id": 1000, "time_limit": NO_VAL, "min_nodes": NO_VAL, "max_nodes": NO_VAL,
            "requeue": NO_VAL16, "req_switch": NO_VAL, "wait4switch": NO_VAL, "has_script": True}
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
    assert "shard" not in run(cfg, has_script=False, time_limit=60, tres_per_job="gres:gpu:1",
                              comment="dl:share=0").changes.get("tres_per_node", "")
    assert "shard" not in run(cfg, has_script=False, time_limit=60, tres_per_job="gres:gpu:2").changes.get("tres_per_node", "")
    d = run(cfg, tres_per_job="gres:gpu:1")
    assert d.accepted and d.job_class is JobClass.TRAIN and "shard" not in d.changes.get("tres_per_node", "")


def test_a_job_may_ask_to_share(cfg):
    d = run(cfg, tres_per_job="gres:gpu:1", comment="dl:class=sweep;share=1", array_inx="0-1")
    assert d.accepted and d.job_class is JobClass.SWEEP and d.changes["tres_per_node"] == "gres:shard:1"


@pytest.mark.parametrize("fields", [dict(tres_per_node="gres:shard:2"),
                                    dict(tres_per_job="gres:gpu:1", comment="dl:share=1")])
def test_a_training_job_that_asks_for_a_shard_is_refused_with_the_reason(cfg, fields):
    d = run(cfg, **fields)
    assert not d.accepted and d.rule == "share.train"
    assert "training job cannot run on a GPU shard" in d.message and "--gpus=N" in d.message


def test_no_sharing_section_changes_nothing():
    cfg = load_config(REPO / "site-configs" / "testbed.toml")
    d = run(cfg, has_script=False, time_limit=60, tres_per_job="gres:gpu:1")
    assert d.accepted and "shard" not in d.changes.get("tres_per_node", "")
    assert run(cfg, tres_per_node="gres:shard:2").accepted
