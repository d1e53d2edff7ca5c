"""The testbed's pure config rendering: parameters in, slurm.conf / gres.conf / topology.conf out."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.testbed.conf import (
    ClusterParams,
    TestbedLayout,
    cluster_name,
    leaf_switches,
    render_env_exports,
    render_gres_conf,
    render_slurm_conf,
    render_topology_conf,
)

LAYOUT = TestbedLayout(Path("/srv/tb"))


def params(**kw) -> ClusterParams:
    base = dict(
        nodes=4,
        gpus_per_node=8,
        gpu_type="h100",
        ctld_port=20001,
        node_ports=(20011, 20012, 20013, 20014),
    )
    base.update(kw)
    return ClusterParams.one_type(**base)


def conf_keys(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if (
            line
            and not line.startswith("#")
            and not line.startswith(("NodeName=", "PartitionName="))
        ):
            k, _, v = line.partition("=")
            assert k not in out, f"duplicate key {k}"
            out[k] = v
    return out


def test_slurm_conf_has_the_settings_the_testbed_relies_on() -> None:
    keys = conf_keys(render_slurm_conf(LAYOUT, params()))
    assert keys["SlurmctldPort"] == "20001"
    assert keys["AuthType"] == "auth/none" and keys["CredType"] == "cred/none"
    assert keys["AuthInfo"] == "cred_expire=10"
    assert (
        "bf_interval=2" in keys["SchedulerParameters"]
        and "sched_interval=2" in keys["SchedulerParameters"]
    )
    assert (
        keys["SelectType"] == "select/cons_tres"
        and keys["SelectTypeParameters"] == "CR_Core_Memory"
    )
    assert int(keys["DefMemPerCPU"]) * 32 <= 256000
    assert keys["TopologyPlugin"] == "topology/tree" and "TopologyType" not in keys
    assert keys["PriorityType"] == "priority/multifactor"
    assert keys["ProctrackType"] == "proctrack/linuxproc"
    assert keys["SlurmdParameters"] == "config_overrides"
    assert keys["JobCompType"] == "jobcomp/filetxt"
    assert keys["MailProg"] == "/bin/true"
    assert keys["RequeueExit"] == "85"
    assert keys["JobSubmitPlugins"] == "lua"
    # Everything lives under the state directory.
    for k in (
        "StateSaveLocation",
        "SlurmdSpoolDir",
        "SlurmctldLogFile",
        "SlurmdLogFile",
        "JobCompLoc",
    ):
        assert keys[k].startswith("/srv/tb/"), k
    assert "%n" in keys["SlurmdSpoolDir"] and "%n" in keys["SlurmdLogFile"]


def test_one_node_line_per_node_with_its_own_port_and_gres() -> None:
    text = render_slurm_conf(LAYOUT, params())
    nodes = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert len(nodes) == 4
    for i, line in enumerate(nodes, start=1):
        assert f"NodeName=gpu0{i} " in line
        assert f"Port={20010 + i} " in line
        assert "NodeAddr=127.0.0.1" in line and "Gres=gpu:h100:8" in line
    assert "PartitionName=gpu Nodes=gpu[01-04] Default=YES" in text


def test_no_gpus_means_no_gres_and_no_job_submit_when_disabled() -> None:
    text = render_slurm_conf(LAYOUT, params(gpus_per_node=0, job_submit_lua=False))
    assert "Gres=" not in text and "JobSubmitPlugins" not in text
    assert "File=" not in render_gres_conf(LAYOUT, params(gpus_per_node=0))


def test_gres_conf_lists_character_devices_under_the_state_dir() -> None:
    text = render_gres_conf(LAYOUT, params())
    assert "Name=gpu Type=h100 File=/srv/tb/dev/nvidia[0-7]" in text
    assert "AutoDetect=off" in text
    assert "File=/srv/tb/dev/nvidia0" in render_gres_conf(LAYOUT, params(gpus_per_node=1))


def test_topology_two_leaves_under_a_spine() -> None:
    assert render_topology_conf(params()).splitlines()[1:] == [
        "SwitchName=leaf1 Nodes=gpu[01-02]",
        "SwitchName=leaf2 Nodes=gpu[03-04]",
        "SwitchName=spine Switches=leaf[1-2]",
    ]
    assert leaf_switches(["a", "b", "c"]) == [["a", "b"], ["c"]]
    one = render_topology_conf(params(nodes=1, node_ports=(20011,)))
    assert "SwitchName=leaf1 Nodes=gpu01" in one and "Switches=leaf1" in one


def test_extra_conf_lines_are_appended() -> None:
    assert "PreemptType=preempt/none" in render_slurm_conf(
        LAYOUT, params(extra_conf=("PreemptType=preempt/none",))
    )


@pytest.mark.parametrize(
    "bad",
    [
        dict(nodes=0, node_ports=()),
        dict(gpus_per_node=-1),
        dict(gpu_type="h100; rm"),
        dict(node_ports=(1, 2)),
        dict(ctld_port=20011),
    ],
)
def test_bad_params_are_refused(bad) -> None:
    with pytest.raises(ValueError):
        params(**bad)


def test_params_round_trip_and_cluster_names_differ_per_dir() -> None:
    p = params(extra_conf=("X=1",))
    assert ClusterParams.from_dict(p.to_dict()) == p
    assert cluster_name(Path("/a")) != cluster_name(Path("/b"))
    assert len(cluster_name(Path("/a"))) <= 40


def test_env_exports_are_shell_quoted() -> None:
    assert (
        render_env_exports({"SLURM_CONF": "/srv/my tb/etc/slurm.conf"})
        == "export SLURM_CONF='/srv/my tb/etc/slurm.conf'\n"
    )


def test_accounting_switches_storage_to_slurmdbd_and_turns_on_age_and_fairshare() -> None:
    from slurm_dl.testbed.accounting import render_slurmdbd_conf

    p = params(dbd_port=20101, mysql_port=20102)
    keys = conf_keys(render_slurm_conf(LAYOUT, p))
    assert keys["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert keys["AccountingStoragePort"] == "20101"
    assert keys["AccountingStorageTRES"] == "gres/gpu"
    assert keys["PriorityWeightAge"] != "0" and keys["PriorityWeightFairshare"] != "0"
    dbd = conf_keys(render_slurmdbd_conf(LAYOUT, p))
    assert dbd["DbdPort"] == "20101" and dbd["StoragePort"] == "20102"
    assert dbd["StorageType"] == "accounting_storage/mysql" and dbd["AuthType"] == "auth/none"
    assert dbd["LogFile"].startswith("/srv/tb/")
    # Without accounting there is no AccountingStorageTRES (fatal without slurmdbd).
    plain = conf_keys(render_slurm_conf(LAYOUT, params()))
    assert (
        plain["AccountingStorageType"] == "accounting_storage/none"
        and "AccountingStorageTRES" not in plain
    )
    with pytest.raises(ValueError):
        params(dbd_port=20101)
    with pytest.raises(ValueError):
        params(dbd_port=20101, mysql_port=20011)


def test_shard_nodes_offer_shards_on_each_gpus_device_and_the_others_none() -> None:
    p = params(shard_nodes=1, shards_per_gpu=4)
    text = render_slurm_conf(LAYOUT, p)
    assert conf_keys(text)["GresTypes"] == "gpu,shard"
    nodes = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert "Gres=gpu:h100:8,shard:32 " in nodes[0] and all("shard" not in ln for ln in nodes[1:])
    gres = render_gres_conf(LAYOUT, p)
    lines = [ln for ln in gres.splitlines() if "Name=shard" in ln]
    assert lines == [
        f"NodeName=gpu01 Name=shard Count=4 File=/srv/tb/dev/nvidia{i}" for i in range(8)
    ]
    assert ClusterParams.from_dict(p.to_dict()) == p
    assert (
        "GresTypes=gpu\n" in render_slurm_conf(LAYOUT, params())
        and "shard" not in params().to_dict()
    )


@pytest.mark.parametrize(
    "kw, says",
    [
        (dict(shard_nodes=1), "both --shard-nodes N and --shards-per-gpu K"),
        (dict(shard_nodes=5, shards_per_gpu=2), "--shard-nodes: got 5; allowed: 1 to 4"),
        (
            dict(shard_nodes=1, shards_per_gpu=10_000),
            "--shards-per-gpu: got 10000; allowed: 1 to 128",
        ),
        (dict(shard_nodes=1, shards_per_gpu=2, gpus_per_node=0), "must have GPUs"),
    ],
)
def test_bad_shard_shapes_are_refused(kw, says) -> None:
    with pytest.raises(ValueError, match=pytest.importorskip("re").escape(says)):
        params(**kw)
