"""Pure parsers on output recorded from the live testbed (tests/fixtures/slurm/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_dl.core.errors import SlurmError
from slurm_dl.core.model import JobState
from slurm_dl.slurm.parse import (
    GpuRequest,
    parse_gpu_request,
    parse_gres_detail,
    parse_partitions,
    parse_sinfo_json,
    parse_squeue_json,
    parse_topology,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def load(name: str):
    text = (FIX / name).read_text()
    return json.loads(text) if name.endswith(".json") else text


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("gres:gpu:h100:2", GpuRequest(2, "h100")),
        ("gres:gpu:3", GpuRequest(3, None)),
        ("gres:gpu:8", GpuRequest(8, None)),
        ("gpu:a100:4", GpuRequest(4, "a100")),
        ("gres/gpu:h100=2", GpuRequest(2, "h100")),
        ("gres/gpu=5", GpuRequest(5, None)),
        ("gres:gpu", GpuRequest(1, None)),
        ("gres:nic:1,gres:gpu:h100:2", GpuRequest(2, "h100")),
        ("", None),
        (None, None),
        ("gres:nic:1", None),
    ],
)
def test_gpu_request(spec, expected):
    assert parse_gpu_request(spec) == expected


def test_gres_detail_sums_nodes_and_keeps_type():
    assert parse_gres_detail(["gpu:h100:8(IDX:0-7)", "gpu:h100:8(IDX:0-7)"]) == (16, "h100")
    assert parse_gres_detail(["gpu:h100:2(IDX:0,3),nic:1"]) == (2, "h100")
    assert parse_gres_detail([]) == (0, None)


def test_squeue_jobs_recorded():
    jobs = {j.job_id: j for j in parse_squeue_json(load("squeue.json"))}
    assert sorted(jobs) == [1, 2, 3, 4, 5, 6]

    requeued = jobs[1]  # --gpus=3, requeued once, comment and admin_comment set
    assert requeued.state is JobState.PENDING and requeued.restarts == 1
    assert (requeued.num_gpus, requeued.gpus_per_node, requeued.num_nodes) == (3, None, None)
    assert requeued.comment == "hello world" and requeued.admin_comment == "slurmdl:v1:x"
    assert requeued.time_limit == 30 * 60 and requeued.start_time is None and requeued.nodes == ()
    assert requeued.priority == 1003 and requeued.user == "root" and requeued.partition == "gpu"

    ddp = jobs[2]  # -N2 --gpus-per-node=8, running
    assert ddp.state is JobState.RUNNING
    assert (ddp.num_gpus, ddp.gpus_per_node, ddp.num_nodes, ddp.gpu_type) == (16, 8, 2, "h100")
    assert ddp.nodes == ("gpu03", "gpu04")
    assert ddp.start_time == 1795226594.0 and ddp.submit_time == 1795226593.0

    held = jobs[3]  # --gres=gpu:h100:2 -H --nice=50
    assert held.state_reason == "JobHeldUser" and held.priority == 0 and held.nice == 50
    assert (held.num_gpus, held.gpus_per_node, held.gpu_type) == (2, 2, "h100")

    later = jobs[4]  # --begin=now+3600 --deadline=now+7200
    assert later.state_reason == "BeginTime"
    assert later.deadline == 1795233793.0 and later.eligible_time == 1795230193.0

    big = jobs[5]  # --gpus=16, running on two nodes: the allocation gives the GPU type
    assert (big.num_gpus, big.num_nodes, big.gpu_type, big.nodes) == (
        16,
        2,
        "h100",
        ("gpu01", "gpu02"),
    )
    assert jobs[6].state_reason == "Resources" and jobs[6].num_gpus == 1


def test_squeue_filters_finished_jobs_client_side():
    doc = load("squeue_finished.json")
    active = parse_squeue_json(doc)
    assert sorted(j.job_id for j in active) == [1, 2, 4, 5]
    cancelled = parse_squeue_json(doc, states=[JobState.CANCELLED])
    assert sorted(j.job_id for j in cancelled) == [3, 6]
    running = parse_squeue_json(doc, states=[JobState.RUNNING])
    assert [j.job_id for j in running] == [2, 5]


def test_squeue_errors_raise_slurm_error():
    with pytest.raises(SlurmError, match="squeue --json: boom"):
        parse_squeue_json({"errors": [{"error": "boom"}], "jobs": []})


def test_unset_numbers_are_none():
    doc = {
        "jobs": [
            {
                "job_id": 9,
                "job_state": "PENDING",
                "time_limit": 4294967294,
                "deadline": 0,
                "nice": None,
                "priority": 4294967294,
                "restart_cnt": None,
                "node_count": 4294967294,
            }
        ]
    }
    (job,) = parse_squeue_json(doc)
    assert (
        job.time_limit is None
        and job.deadline is None
        and job.priority == 0
        and job.num_nodes is None
    )


def test_sinfo_nodes_with_gres_used_and_switch():
    topo = parse_topology(load("topology.txt"))
    nodes = {n.name: n for n in parse_sinfo_json(load("sinfo.json"), topo)}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert all(n.gpus == 8 and n.gpu_type == "h100" and n.cpus == 32 for n in nodes.values())
    # recorded with jobs 2 and 5 holding all 32 GPUs ("gpu:h100:8(IDX:0-7)" on every node)
    assert all(n.gpus_used == 8 and n.gpus_free == 0 for n in nodes.values())
    assert nodes["gpu01"].switch == "leaf1" and nodes["gpu04"].switch == "leaf2"
    assert nodes["gpu01"].state == "MIXED" and nodes["gpu01"].available


def test_partly_used_node():
    doc = {
        "nodes": [
            {
                "name": "n1",
                "gres": "gpu:h100:8",
                "gres_used": "gpu:h100:3(IDX:0-2)",
                "state": "mixed",
            }
        ]
    }
    (node,) = parse_sinfo_json(doc)
    assert (node.gpus, node.gpus_used, node.gpus_free, node.switch) == (8, 3, 5, None)


def test_down_node_is_unavailable():
    doc = {
        "nodes": [
            {
                "name": "n1",
                "gres": "gpu:a100:4",
                "gres_used": "gpu:a100:0(IDX:N/A)",
                "state": "idle",
                "state_flags": ["DRAIN"],
            }
        ]
    }
    (node,) = parse_sinfo_json(doc)
    assert (
        node.gpus == 4 and not node.available and node.gpus_free == 0 and node.state == "IDLE+DRAIN"
    )


def test_topology_leaves_and_spine():
    topo = parse_topology(load("topology.txt"))
    by = {s.name: s for s in topo.switches}
    assert by["leaf1"].nodes == ("gpu01", "gpu02") and by["leaf2"].nodes == ("gpu03", "gpu04")
    assert by["spine"].switches == ("leaf1", "leaf2") and by["spine"].nodes == ()
    assert topo.leaf_of()["gpu03"] == "leaf2"
    assert parse_topology("").empty


def test_partitions():
    (part,) = parse_partitions(load("partitions.txt"))
    assert part.name == "gpu" and part.default and part.state == "UP"
    assert part.nodes == ("gpu01", "gpu02", "gpu03", "gpu04") and part.max_time_s is None
    (short,) = parse_partitions(
        "PartitionName=debug Default=NO MaxTime=1-02:00:00 Nodes=a[1-2] State=UP"
    )
    assert short.max_time_s == 26 * 3600 and not short.default


def test_pyslurm_job_maps_through_the_same_parser():
    """PyslurmBackend's attribute mapping (pure; pyslurm itself is not imported)."""
    from types import SimpleNamespace

    from slurm_dl.slurm.parse import job_from_squeue
    from slurm_dl.slurm.pyslurm_backend import job_record_from_pyslurm

    fake_job = SimpleNamespace(
        id=7,
        user_name="ann",
        account="vision",
        name="r50",
        partition="gpu",
        state="RUNNING",
        state_reason="None",
        num_nodes=2,
        gres_per_node={"gpu:h100": 8},
        allocated_nodes="gpu[01-02]",
        time_limit=60,
        submit_time=100,
        eligible_time=100,
        start_time=110,
        deadline=None,
        requeue_count=2,
        priority=1500,
        nice=0,
        comment="c",
        admin_comment="a",
        get_resource_layout_per_node=lambda: {
            "gpu01": {"gres": {"gpu:h100": {"count": 8, "indexes": "0-7"}}},
            "gpu02": {"gres": {"gpu:h100": 8}},
        },
    )
    job = job_from_squeue(job_record_from_pyslurm(fake_job))
    assert (job.job_id, job.user, job.account, job.state, job.restarts) == (
        7,
        "ann",
        "vision",
        JobState.RUNNING,
        2,
    )
    assert (job.num_gpus, job.gpus_per_node, job.num_nodes, job.gpu_type) == (16, 8, 2, "h100")
    assert job.nodes == ("gpu01", "gpu02") and job.time_limit == 3600 and job.start_time == 110
