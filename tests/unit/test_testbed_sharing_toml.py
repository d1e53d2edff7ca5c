"""`slurm-dl testbed up --shard-nodes N --shards-per-gpu K` writes a site.toml whose
``[sharing]`` names a node group of exactly the shard nodes, so the filter routes shard jobs
there, and which describes the same cluster as the slurm.conf and gres.conf it runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.config_file import load_config
from slurm_dl.cli.main import app
from slurm_dl.core.cluster_match import compare, parse_slurm_cluster
from slurm_dl.core.config import parse_config
from slurm_dl.testbed import Testbed
from slurm_dl.testbed.conf import ClusterParams, TestbedLayout, render_gres_conf, render_slurm_conf
from slurm_dl.testbed.shape import parse_gpus
from slurm_dl.testbed.site_shape import with_shape

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "site-configs" / "testbed.toml"
LAYOUT = TestbedLayout(Path("/srv/tb"))


def _site(spec: str, shard_nodes: int, shards_per_gpu: int):
    text = with_shape(
        TEMPLATE.read_text(),
        parse_gpus(spec),
        source="t",
        cpus=32,
        memory_gb=250,
        shard_nodes=shard_nodes,
        shards_per_gpu=shards_per_gpu,
    )
    return text, parse_config(tomllib.loads(text), "site.toml")


@pytest.mark.parametrize(
    "spec, shard_nodes, groups",
    [
        ("h100:2x4", 1, {"h100-shards": ["gpu01"], "h100": ["gpu02"]}),
        ("h100:3x4", 3, {"h100-shards": ["gpu01", "gpu02", "gpu03"]}),
        (
            "h100:1x8,v100:2x4",
            2,
            {"h100-shards": ["gpu01"], "v100-shards": ["gpu02"], "v100": ["gpu03"]},
        ),
    ],
)
def test_the_shard_nodes_are_a_sharing_node_group_of_their_own(
    spec: str, shard_nodes: int, groups: dict
) -> None:
    text, cfg = _site(spec, shard_nodes, 8)
    assert {g.name: g.node_names for g in cfg.node_groups} == groups
    shared = [g for g in groups if g.endswith("-shards")]
    assert [(g.node_group, g.shards_per_gpu) for g in cfg.sharing.groups] == [
        (g, 8) for g in shared
    ]
    assert text.count("\n[sharing]\n") == 1 and cfg.sharing.classes  # the default classes
    # the same cluster as the testbed's slurm.conf and gres.conf (shards included)
    params = ClusterParams(
        parse_gpus(spec),
        20001,
        tuple(range(20011, 20011 + sum(len(n) for n in groups.values()))),
        shard_nodes=shard_nodes,
        shards_per_gpu=8,
    )
    conf, gres = render_slurm_conf(LAYOUT, params), render_gres_conf(LAYOUT, params)
    assert "shard" in gres
    assert compare(cfg, parse_slurm_cluster(conf, gres)) == []


def test_a_template_sharing_table_is_replaced_not_doubled() -> None:
    template = TEMPLATE.read_text() + (
        '\n[sharing]\nclasses = ["inference"]\n\n[[sharing.groups]]\nnode_group = "h100"\n'
        "shards_per_gpu = 2\n"
    )
    text = with_shape(
        template, parse_gpus("h100:2x4"), source="t", cpus=32, memory_gb=250, shard_nodes=1,
        shards_per_gpu=4,
    )  # fmt: skip
    cfg = parse_config(tomllib.loads(text), "s")
    assert [(g.node_group, g.shards_per_gpu) for g in cfg.sharing.groups] == [("h100-shards", 4)]


def _filter_check(config: Path, *args: str):
    return CliRunner().invoke(app, ["filter", "check", "--config", str(config), "--", *args])


def test_up_with_shard_nodes_writes_a_site_toml_that_routes_shard_jobs(tmp_path: Path) -> None:
    tb = Testbed(tmp_path / "tb", nodes=2, gpus_per_node=4, shard_nodes=1, shards_per_gpu=8)
    site = tb.write_site_config(TEMPLATE, own_shape=True)
    cfg = load_config(site)
    assert [(g.node_group, g.shards_per_gpu) for g in cfg.sharing.groups] == [("h100-shards", 8)]
    assert {g.name: g.node_names for g in cfg.node_groups} == {
        "h100-shards": ["gpu01"],
        "h100": ["gpu02"],
    }
    assert cfg.site.database_url == tb.layout.ledger_url
    assert "--shard-nodes 1 --shards-per-gpu 8" in site.read_text()
    # with this file the filter sends a small inference job to a shard and tags shard jobs
    # as such; with the template (no [sharing]) it does neither
    small = ("--gpus=1", "-t", "10", "--comment=dl:class=inference;dl:gpu_mem=10G")
    ok = _filter_check(site, *small)
    assert ok.exit_code == 0 and "set tres_per_node = 'gres:shard:1'" in ok.output, ok.output
    tagged = _filter_check(site, "--gres=shard:1", "-t", "10", "--comment=dl:class=inference")
    assert tagged.exit_code == 0 and "shards=1:8" in tagged.output, tagged.output
    plain = _filter_check(TEMPLATE, *small)
    assert plain.exit_code == 0 and "'gres:gpu:1'" in plain.output, plain.output
