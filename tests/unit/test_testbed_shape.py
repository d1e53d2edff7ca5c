"""A testbed of several GPU types: the --gpus spec, the rendered slurm.conf / gres.conf /
topology.conf, the site config that describes the same cluster, and the one-type testbed unchanged."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core import errors
from slurm_dl.core.hostlist import expand_hostlist
from slurm_dl.testbed import Testbed
from slurm_dl.testbed.conf import (
    ClusterParams,
    TestbedLayout,
    render_gres_conf,
    render_slurm_conf,
    render_topology_conf,
)
from slurm_dl.testbed.shape import GpuGroup, describe, parse_gpus, spec_of
from slurm_dl.testbed.site_shape import with_shape

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "site-configs" / "testbed.toml"
SHIPPED_MIXED = REPO / "site-configs" / "testbed-mixed.toml"
LAYOUT = TestbedLayout(Path("/srv/tb"))
H100_V100 = (GpuGroup("h100", 2, 8), GpuGroup("v100", 2, 8))


def mixed(spec: str = "h100:2x8,v100:2x8", **kw) -> ClusterParams:
    groups = parse_gpus(spec)
    count = sum(g.nodes for g in groups)
    return ClusterParams(groups, 20001, tuple(range(20011, 20011 + count)), **kw)


# -- the spec -----------------------------------------------------------------------------------
def test_spec_parses_into_groups_in_order() -> None:
    assert parse_gpus("h100:2x8,v100:2x8") == H100_V100
    assert parse_gpus(" a100:1x8 , v100:1X4 ") == (GpuGroup("a100", 1, 8), GpuGroup("v100", 1, 4))
    assert parse_gpus("l40s:3x4") == (GpuGroup("l40s", 3, 4),)
    assert spec_of(H100_V100) == "h100:2x8,v100:2x8"
    assert describe(H100_V100) == "4 nodes (2 x 8 h100, 2 x 8 v100 GPUs)"
    assert describe((GpuGroup("h100", 4, 8),)) == "4 nodes x 8 h100 GPUs"


@pytest.mark.parametrize(
    "spec, words",
    [
        ("h100:2", ["bad GPU group 'h100:2'", "TYPE:NODESxGPUS"]),
        ("h100=2x8", ["bad GPU group"]),
        ("h100:2x8,", ["empty GPU group"]),
        ("", ["empty GPU spec"]),
        ("h100:0x8", ["h100:0x8", "at least 1 node"]),
        ("h100:2x0,v100:1x8", ["h100:2x0", "1..64"]),
        ("h100:1x65", ["1..64", "65"]),
        ("h100:2x8,v100:1x4,H100:1x8", ["H100", "twice"]),
        ("h100:300x8,v100:300x8", ["600 nodes", "at most 512"]),
        ("h-100:1x8", ["'h-100'", "plain name"]),
        ("gpu:1x8,v100:1x8", ["'gpu'", "default partition"]),
    ],
)
def test_bad_specs_are_one_clear_line(spec: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        parse_gpus(spec)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_testbed_takes_a_spec_or_groups_and_keeps_the_one_type_arguments(tmp_path: Path) -> None:
    assert Testbed(tmp_path, gpus="h100:2x8,v100:2x8").groups == H100_V100
    assert Testbed(tmp_path, gpus=list(H100_V100)).groups == H100_V100
    assert Testbed(tmp_path).groups == (GpuGroup("h100", 4, 8),)
    assert Testbed(tmp_path, nodes=1, gpus_per_node=2, gpu_type="a100").groups == (
        GpuGroup("a100", 1, 2),
    )
    assert Testbed(tmp_path, nodes=2, gpus_per_node=0).groups == (
        GpuGroup("h100", 2, 0),
    )  # CPU-only, as before
    with pytest.raises(errors.TestbedError, match="either as gpus or as nodes"):
        Testbed(tmp_path, nodes=2, gpus="h100:2x8")
    with pytest.raises(errors.TestbedError, match="twice"):
        Testbed(tmp_path, gpus=[GpuGroup("h100", 1, 8), GpuGroup("h100", 1, 4)])
    with pytest.raises(errors.TestbedError, match="1..64"):
        Testbed(tmp_path, gpus=[GpuGroup("h100", 1, 8), GpuGroup("v100", 1, 0)])


# -- Slurm's files ------------------------------------------------------------------------------
def test_mixed_slurm_conf_has_typed_gres_a_feature_and_a_partition_per_type() -> None:
    text = render_slurm_conf(LAYOUT, mixed("a100:1x8,v100:2x4"))
    nodes = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert nodes == [
        "NodeName=gpu01 NodeHostname=gpu01 NodeAddr=127.0.0.1 Port=20011 CPUs=32 RealMemory=256000 "
        "Features=a100 Gres=gpu:a100:8 State=UNKNOWN",
        "NodeName=gpu02 NodeHostname=gpu02 NodeAddr=127.0.0.1 Port=20012 CPUs=32 RealMemory=256000 "
        "Features=v100 Gres=gpu:v100:4 State=UNKNOWN",
        "NodeName=gpu03 NodeHostname=gpu03 NodeAddr=127.0.0.1 Port=20013 CPUs=32 RealMemory=256000 "
        "Features=v100 Gres=gpu:v100:4 State=UNKNOWN",
    ]
    assert [ln for ln in text.splitlines() if ln.startswith("PartitionName=")] == [
        "PartitionName=gpu Nodes=gpu[01-03] Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=a100 Nodes=gpu01 MaxTime=INFINITE State=UP",
        "PartitionName=v100 Nodes=gpu[02-03] MaxTime=INFINITE State=UP",
    ]
    assert "GresTypes=gpu" in text


def test_mixed_gres_conf_names_each_groups_nodes_and_type() -> None:
    lines = render_gres_conf(LAYOUT, mixed("a100:1x8,v100:2x4")).splitlines()
    assert "AutoDetect=off" in lines
    assert lines[-2:] == [
        "NodeName=gpu01 Name=gpu Type=a100 File=/srv/tb/dev/nvidia[0-7]",
        "NodeName=gpu[02-03] Name=gpu Type=v100 File=/srv/tb/dev/nvidia[0-3]",
    ]


def test_mixed_topology_has_one_leaf_per_type() -> None:
    assert render_topology_conf(mixed("h100:2x8,v100:1x4,l40s:3x4")).splitlines()[1:] == [
        "SwitchName=leaf1 Nodes=gpu[01-02]",
        "SwitchName=leaf2 Nodes=gpu03",
        "SwitchName=leaf3 Nodes=gpu[04-06]",
        "SwitchName=spine Switches=leaf[1-3]",
    ]


def test_one_group_is_the_classic_testbed_file_for_file() -> None:
    one = ClusterParams(parse_gpus("h100:4x8"), 20001, (20011, 20012, 20013, 20014))
    assert one == ClusterParams.one_type(
        4, 8, "h100", ctld_port=20001, node_ports=(20011, 20012, 20013, 20014)
    )
    text = render_slurm_conf(LAYOUT, one)
    assert "Features=" not in text and text.count("PartitionName=") == 1
    assert "NodeName=" not in render_gres_conf(LAYOUT, one)
    assert render_topology_conf(one).splitlines()[0] == "# Two leaf switches under one spine."
    # testbed.json keeps its keys
    assert {"nodes", "gpus_per_node", "gpu_type"} <= set(
        one.to_dict()
    ) and "groups" not in one.to_dict()


def test_mixed_params_round_trip() -> None:
    p = mixed("a100:1x8,v100:2x4", dbd_port=20101, mysql_port=20102, slurm="24.11")
    d = p.to_dict()
    assert d["groups"] == [
        {"gpu_type": "a100", "nodes": 1, "gpus_per_node": 8},
        {"gpu_type": "v100", "nodes": 2, "gpus_per_node": 4},
    ]
    assert ClusterParams.from_dict(d) == p
    assert p.nodes == 3 and p.max_gpus_per_node == 8 and p.node_names == ["gpu01", "gpu02", "gpu03"]
    with pytest.raises(ValueError, match="one port per node"):
        ClusterParams(parse_gpus("a100:1x8,v100:2x4"), 20001, (20011, 20012))


# -- the site config ----------------------------------------------------------------------------
def _partitions_in(slurm_conf: str) -> dict[str, list[str]]:
    found = re.findall(r"^PartitionName=(\S+) Nodes=(\S+)", slurm_conf, re.MULTILINE)
    return {name: expand_hostlist(nodes) for name, nodes in found}


@pytest.mark.parametrize(
    "spec", ["h100:2x8,v100:2x8", "a100:1x8,v100:1x4", "h100:1x8,a100:2x4,l40s:1x4,t4:1x2"]
)
def test_site_config_describes_the_same_cluster_as_slurm_conf(spec: str) -> None:
    params = mixed(spec)
    cfg = parse_config(
        tomllib.loads(
            with_shape(TEMPLATE.read_text(), params.groups, source="t", cpus=32, memory_gb=250)
        ),
        "site.toml",
    )
    slurm = _partitions_in(render_slurm_conf(LAYOUT, params))
    assert [p.name for p in cfg.partitions] == list(slurm) and cfg.default_partition == "gpu"
    for part, nodes in slurm.items():
        assert (
            sorted(n for g in cfg.node_groups if part in g.partitions for n in g.node_names)
            == nodes
        )
    assert [(g.gpu_type, len(g.node_names), g.gpus_per_node) for g in cfg.node_groups] == [
        (g.gpu_type, g.nodes, g.gpus_per_node) for g in params.groups
    ]
    assert [t.name for t in cfg.gpu_types] == [g.gpu_type for g in params.groups]
    assert all(g.cpus == 32 and g.memory_gb == 250 for g in cfg.node_groups)


def test_speeds_are_the_documented_placeholders() -> None:
    cfg = load_config(SHIPPED_MIXED)
    assert {t.name: t.speed for t in cfg.gpu_types} == {"h100": 3.0, "v100": 1.0}
    text = with_shape(
        TEMPLATE.read_text(),
        parse_gpus("a100:1x8,l40s:1x4,x9:1x1"),
        source="t",
        cpus=32,
        memory_gb=250,
    )
    speeds = {t.name: t.speed for t in parse_config(tomllib.loads(text), "s").gpu_types}
    assert speeds == {"a100": 2.0, "l40s": 1.5, "x9": 1.0}
    assert "PLACEHOLDERS" in text


def test_shipped_mixed_example_is_what_up_writes_and_keeps_the_testbed_policy() -> None:
    assert SHIPPED_MIXED.read_text() == with_shape(
        TEMPLATE.read_text(), H100_V100, source="site-configs/testbed.toml", cpus=32, memory_gb=250
    )
    mixed_cfg, plain = load_config(SHIPPED_MIXED), load_config(TEMPLATE)
    assert mixed_cfg.total_gpus == 32 and mixed_cfg.gpu_type_names == ["h100", "v100"]
    assert mixed_cfg.policy == plain.policy and mixed_cfg.classes == plain.classes
    assert mixed_cfg.preemption == plain.preemption and mixed_cfg.filter == plain.filter


def test_write_site_config_describes_a_mixed_testbed_and_leaves_a_one_type_one_as_is(
    tmp_path: Path,
) -> None:
    tb = Testbed(tmp_path / "m", gpus="a100:1x8,v100:1x4")
    text = tb.write_site_config(TEMPLATE, own_shape=True).read_text()
    cfg = load_config(tb.layout.site_config)
    assert cfg.gpu_type_names == ["a100", "v100"] and cfg.site.database_url == tb.layout.ledger_url
    assert cfg.filter.socket == str(tb.layout.filter_socket)
    assert "Written from site-configs/testbed.toml" in text
    one = Testbed(tmp_path / "o", nodes=1, gpus_per_node=2)
    plain = one.write_site_config(TEMPLATE, own_shape=True).read_text()
    assert plain.splitlines()[:5] == TEMPLATE.read_text().splitlines()[:5]
    assert load_config(one.layout.site_config).gpu_type_names == ["h100"]
    # without own_shape the template's tables stay, mixed or not
    again = Testbed(tmp_path / "n", gpus="a100:1x8,v100:1x4")
    assert load_config(again.write_site_config(TEMPLATE)).gpu_type_names == ["h100"]


# -- the command --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, words",
    [
        (["--gpus", "h100:2"], ["--gpus", "bad GPU group"]),
        (["--gpus", "h100:2x8,h100:1x8"], ["--gpus", "twice"]),
        (["--gpus", "h100:2x8", "--nodes", "2"], ["--gpus", "--nodes"]),
    ],
)
def test_cli_up_refuses_a_bad_spec_in_one_line(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    r = CliRunner().invoke(app, ["testbed", "up", "--dir", str(tmp_path / "tb"), *args])
    out = r.output.strip()
    assert r.exit_code == 1 and out.startswith("error:") and len(out.splitlines()) == 1, out
    assert all(w in out for w in words), out
    assert not (tmp_path / "tb").exists()


def test_over_99_nodes_get_three_digit_names_in_one_range():
    from slurm_dl.testbed.conf import ClusterParams, TestbedLayout, render_slurm_conf
    from pathlib import Path

    params = ClusterParams.one_type(
        256, 8, "h100", ctld_port=19999, node_ports=tuple(range(20000, 20256))
    )
    assert params.node_names[0] == "gpu001" and params.node_names[-1] == "gpu256"
    text = render_slurm_conf(TestbedLayout(Path("/srv/tb")), params)
    assert "PartitionName=gpu Nodes=gpu[001-256] Default=YES" in text
    assert "MaxJobCount=128000" in text and "MaxArraySize=100001" in text
    small = ClusterParams.one_type(
        99, 8, "h100", ctld_port=19999, node_ports=tuple(range(20000, 20099))
    )
    assert small.node_names[-1] == "gpu99"
    small_text = render_slurm_conf(TestbedLayout(Path("/srv/tb")), small)
    assert "MaxJobCount=50000" in small_text and "MaxArraySize=10001" in small_text


def test_three_digit_names_shorten_the_longest_state_dir():
    import pytest as _pytest
    from slurm_dl.core.errors import TestbedError
    from slurm_dl.testbed import Testbed

    long_dir = "/tmp/" + "d" * 63  # 68 characters: fits two-digit names, not three
    Testbed(long_dir, nodes=4)
    with _pytest.raises(TestbedError, match="at most 67"):
        Testbed(long_dir, nodes=256)
