"""The site config against slurm.conf and gres.conf: every difference named with its fix, and
the testbed's own configs (rendered by the testbed's code) matching the site configs it uses."""

from __future__ import annotations

import tomllib
from pathlib import Path

from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.cluster_match import cluster_of, compare, parse_slurm_cluster
from slurm_dl.core.model import Node, Partition
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.config import parse_config as _parse
from slurm_dl.testbed.conf import (
    DEFAULT_CPUS_PER_NODE,
    DEFAULT_MEMORY_MB_PER_NODE,
    ClusterParams,
    TestbedLayout,
    render_gres_conf,
    render_slurm_conf,
)
from slurm_dl.testbed.shape import GpuGroup
from slurm_dl.testbed.site_shape import with_shape

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = TestbedLayout(Path("/srv/tb"))


def parse_config(text: str):
    return _parse(tomllib.loads(text))


def rendered_testbed(groups) -> tuple[str, str]:
    n = sum(g.nodes for g in groups)
    p = ClusterParams(
        groups=tuple(groups), ctld_port=20001, node_ports=tuple(range(20011, 20011 + n))
    )
    return render_slurm_conf(LAYOUT, p), render_gres_conf(LAYOUT, p)


def test_the_testbeds_own_site_configs_match_its_slurm_conf() -> None:
    conf, gres = rendered_testbed([GpuGroup("h100", 4, 8)])
    assert (
        compare(
            load_config(ROOT / "site-configs" / "testbed.toml"), parse_slurm_cluster(conf, gres)
        )
        == []
    )
    groups = [GpuGroup("h100", 2, 8), GpuGroup("v100", 2, 8)]
    conf, gres = rendered_testbed(groups)
    site = with_shape(
        (ROOT / "site-configs" / "testbed.toml").read_text(),
        groups,
        source="testbed.toml",
        cpus=DEFAULT_CPUS_PER_NODE,
        memory_gb=DEFAULT_MEMORY_MB_PER_NODE // 1024,
    )
    assert compare(parse_config(site), parse_slurm_cluster(conf, gres)) == []


def test_university_small_against_the_testbed_names_each_difference(tmp_path: Path) -> None:
    conf, gres = rendered_testbed([GpuGroup("h100", 4, 8)])
    (tmp_path / "slurm.conf").write_text(conf)
    (tmp_path / "gres.conf").write_text(gres)
    r = CliRunner().invoke(
        app,
        [
            "config",
            "check",
            str(ROOT / "site-configs" / "university-small.toml"),
            "--slurm-conf",
            str(tmp_path / "slurm.conf"),
        ],
    )
    assert r.exit_code == 1, r.output
    out = r.stdout
    assert "7 difference(s)" in out, out
    for expected in (
        "node group 'a100-4': nodes a100n[01-16] are not in slurm.conf",
        "node group 'v100-8': nodes v100n[01-08] are not in slurm.conf",
        "GPU nodes gpu[01-04] (8 x h100 each) are in no node group",
        'nodes = "gpu[01-04]", gpus_per_node = 8,',
        "GPU type 'a100': no node in slurm.conf",
        "GPU type 'v100'",
        "GPUs in all: 128 here, 32 in slurm.conf",
        "partition 'debug': not in slurm.conf (it has: gpu)",
    ):
        assert expected in out.replace("\n  ", " ").replace("\n    ", " "), (expected, out)
    assert all(len(line) < 80 for line in out.splitlines() if "/" not in line), out  # but paths
    ok = CliRunner().invoke(
        app,
        [
            "config",
            "check",
            str(ROOT / "site-configs" / "testbed.toml"),
            "--slurm-conf",
            str(tmp_path / "slurm.conf"),
        ],
    )
    assert ok.exit_code == 0 and ": OK" in ok.stdout and "matches" in ok.stdout, ok.output


SLURM_CONF = """
NodeName=DEFAULT CPUs=64 RealMemory=515000
NodeName=a[01-02] Gres=gpu:a100:4
NodeName=a03 Gres=gpu:a100:8 CPUs=32 # a bigger box
NodeName=b[01-02] Gres=gpu:2 \\
  CPUs=40 RealMemory=393216
NodeName=cpu01 CPUs=128
PartitionName=DEFAULT State=UP
PartitionName=gpu Nodes=a[01-03],b[01-02] Default=YES MaxTime=3-00:00:00
PartitionName=debug Nodes=b01 MaxTime=60
PartitionName=all Nodes=ALL MaxTime=UNLIMITED
"""
GRES_CONF = "NodeName=b[01-02] Name=gpu Type=v100 File=/dev/nvidia[0-1]\n"

SITE = """
[site]
name = "t"
[[gpu_types]]
name = "a100"
[[gpu_types]]
name = "v100"
[[gpu_types]]
name = "k80"
[[partitions]]
name = "gpu"
default = true
max_time_minutes = 5000
[[partitions]]
name = "debug"
[[node_groups]]
name = "a"
nodes = "a[01-03]"
gpus_per_node = 4
gpu_type = "a100"
cpus = 64
memory_gb = 503
partitions = ["gpu"]
[[node_groups]]
name = "b"
nodes = "b[01-02]"
gpus_per_node = 2
gpu_type = "v100"
cpus = 40
memory_gb = 384
partitions = ["gpu", "debug"]
[[node_groups]]
name = "k"
nodes = "k01"
gpus_per_node = 4
gpu_type = "k80"
cpus = 8
memory_gb = 64
"""


def test_each_kind_of_difference_with_its_fix() -> None:
    cluster = parse_slurm_cluster(SLURM_CONF, GRES_CONF)
    assert (
        cluster.nodes["b01"].gpu_type == "v100" and cluster.nodes["b02"].cpus == 40
    )  # gres.conf, DEFAULT
    assert cluster.nodes["a03"].cpus == 32 and cluster.nodes["a01"].memory_mb == 515000
    assert cluster.partitions["all"].nodes == ["a01", "a02", "a03", "b01", "b02", "cpu01"]
    diffs = {d.line(): d.fix for d in compare(parse_config(SITE), cluster)}
    expected = {
        "node group 'a': GPUs per node 4 here, 8 in slurm.conf (a03)": "set gpus_per_node = 8",
        "node group 'a': CPUs 64 here, 32 in slurm.conf (a03)": "set cpus = 32",
        "node group 'b': in partition 'debug' here, but debug in slurm.conf does not hold b02": "PartitionName=debug",
        "node group 'k': nodes k01 are not in slurm.conf": "NodeName hosts",
        "GPU type 'k80': no node in slurm.conf has it (its types: a100, v100)": "remove the entry",
        "GPUs in all: 24 here, 24 in slurm.conf": None,
        "partition 'gpu': max_time_minutes = 5000 here, MaxTime is 4320 min in slurm.conf: jobs the filter "
        "admits wait forever": "set max_time_minutes = 4320",
        "partition 'debug': no time limit here, MaxTime is 60 min in slurm.conf: longer jobs the filter admits "
        "wait forever": "set max_time_minutes = 60",
    }
    for line, fix in expected.items():
        if fix is None:
            assert line not in diffs, diffs
            continue
        assert line in diffs and fix in diffs[line], (line, diffs)
    assert len(diffs) == 7, diffs  # the memory (503 GiB = 515000 MB, within rounding) matches


def test_doctor_reports_each_difference_as_a_problem() -> None:
    from slurm_dl.core.doctor import Facts, diagnose

    diffs = compare(parse_config(SITE), parse_slurm_cluster(SLURM_CONF, GRES_CONF))
    findings = [
        x
        for x in diagnose(Facts(config_path="x", cluster_diffs=diffs))
        if x.check == "site config vs Slurm"
    ]
    assert [(x.status, x.detail, x.fix) for x in findings] == [
        ("fail", d.line(), d.fix) for d in diffs
    ]
    ok = [
        x
        for x in diagnose(Facts(config_path="x", cluster_diffs=[]))
        if x.check == "site config vs Slurm"
    ]
    assert [x.status for x in ok] == ["ok"]


# what the backend reads of the live cluster (sinfo / scontrol): its nodes and partitions
LIVE_NODES = [
    Node("gpu01", 8, "h100", cpus=32, memory_mb=256000, partitions=("h100", "gpu")),
    Node("gpu05", 4, "v100", cpus=32, memory_mb=256000, partitions=("v100", "gpu")),
    Node("cpu01", 0, None, cpus=64, memory_mb=128000, partitions=("cpu",)),
]
LIVE_PARTITIONS = [
    Partition("h100", ("gpu01",)),
    Partition("gpu", ("gpu01", "gpu05"), max_time_s=172800.0, default=True),
    Partition("v100", ("gpu05",)),
    Partition("cpu", ("cpu01",)),
]


def test_the_live_cluster_from_sinfo() -> None:
    live = cluster_of(LIVE_NODES, LIVE_PARTITIONS)
    assert (live.nodes["gpu01"].gpus, live.nodes["gpu01"].gpu_type) == (8, "h100")
    assert live.nodes["cpu01"].gpus == 0 and live.partitions["gpu"].default
    assert (
        live.partitions["gpu"].max_time_minutes == 2880
        and live.partitions["h100"].max_time_minutes is None
    )
    assert sorted(live.nodes["gpu05"].partitions) == ["gpu", "v100"]
    diffs = [
        d.line()
        for d in compare(load_config(ROOT / "site-configs" / "testbed.toml"), live, "sinfo")
    ]
    assert "node group 'h100': nodes gpu[02-04] are not in sinfo" in diffs, diffs
    assert (
        "sinfo: GPU nodes gpu05 (4 x v100 each) are in no node group: jobs there are not ranked as they run"
        in diffs
    ), diffs
