"""Switch requests are feasible by construction: the fewest leaves that can hold the job, none
when it needs every leaf or the tree is unknown (testbed: 4 nodes under two 2-node leaves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.rules.topology import switches_needed

REPO = Path(__file__).resolve().parents[2]
TREE = (("gpu01", "gpu02"), ("gpu03", "gpu04"))


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "site-configs" / "testbed.toml")


def run(cfg, tree=TREE, **fields):
    job = {
        "user_name": "a",
        "time_limit": 60,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "req_switch": NO_VAL,
        "has_script": True,
        **fields,
    }
    return decide(job, cfg, FilterContext(now=0.0, leaf_nodes=tree))


@pytest.mark.parametrize(
    "nodes, leaves, expected",
    [
        (2, [2, 2], 1),
        (3, [2, 2], None),
        (4, [2, 2], None),
        (3, [4, 2, 2], 1),
        (5, [4, 2, 2], 2),
        (6, [4, 2, 2], 2),
        (8, [4, 2, 2], None),
        (9, [4, 2, 2], None),
        (2, [1, 1, 1, 1], 2),
    ],
)
def test_fewest_leaves_that_hold_the_job(nodes, leaves, expected) -> None:
    tree = tuple(tuple(f"n{i}-{j}" for j in range(size)) for i, size in enumerate(leaves))
    eligible = {n for leaf in tree for n in leaf}
    assert switches_needed(nodes, tree, eligible) == expected


def test_only_nodes_that_can_hold_the_gpus_count() -> None:
    tree = (("a1", "a2", "b1"), ("b2", "b3"))
    assert switches_needed(2, tree, {"b1", "b2", "b3"}) == 1  # leaf 2 holds both
    assert (
        switches_needed(3, tree, {"b1", "b2", "b3"}) is None
    )  # needs both leaves that have b nodes


def test_four_full_nodes_on_the_testbed_get_no_switch_request(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:8", min_nodes=4, max_nodes=4)
    assert d.accepted and "req_switch" not in d.changes
    d = run(cfg, tres_per_job="gres:gpu:32")
    assert d.changes["min_nodes"] == 4 and "req_switch" not in d.changes


def test_two_nodes_fit_one_leaf(cfg) -> None:
    d = run(cfg, tres_per_job="gres:gpu:16")
    assert d.changes["req_switch"] == 1 and d.changes["wait4switch"] == 600


def test_unknown_tree_asks_for_nothing(cfg) -> None:
    assert "req_switch" not in run(cfg, tree=None, tres_per_job="gres:gpu:16").changes


def test_tree_from_the_site_config(cfg) -> None:
    data = cfg.model_dump(mode="json")
    data["topology"] = {
        "source": "config",
        "switches": [
            {"name": "l1", "nodes": "gpu[01-03]"},
            {"name": "l2", "nodes": "gpu04"},
            {"name": "s", "switches": ["l1", "l2"]},
        ],
    }
    c = parse_config(data)
    assert run(c, tree=None, tres_per_job="gres:gpu:24").changes["req_switch"] == 1
    assert "req_switch" not in run(c, tree=None, tres_per_job="gres:gpu:32").changes
