"""Every way Slurm accepts a GPU request counts, and the per-GPU CPU / memory caps hold whatever
option asks for CPUs or memory (testbed config: 4 nodes x 8 h100, 32 CPUs and 250 GB each, caps
4 CPUs / 31 GB per GPU). Job descriptions use the encodings slurmctld 22.05 gave job_submit.lua."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.rules import FilterContext, JobRequest, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.rules.sbatch_args import SbatchArgsError, parse_sbatch_args
from slurm_dl.slurm.parse import gpus_in_tres, job_from_squeue
from slurm_dl.core.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "site-configs" / "testbed.toml")


def job(**fields):
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 60,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "num_tasks": NO_VAL,
        "ntasks_per_node": NO_VAL16,
        "sockets_per_node": NO_VAL16,
        "cpus_per_task": NO_VAL16,
        "min_cpus": 1,
        "pn_min_cpus": NO_VAL16,
        "shared": NO_VAL16,
        "has_script": True,
    }
    base.update(fields)
    return base


def decide_args(cfg, *args: str):
    return decide(
        parse_sbatch_args(list(args), user_name="alice", user_id=1000),
        cfg,
        FilterContext(now=NOW, leaf_nodes=(("gpu01", "gpu02"), ("gpu03", "gpu04"))),
    )


@pytest.mark.parametrize(
    "fields, gpus",
    [
        (
            {"tres_per_task": "gres:gpu:4", "num_tasks": 2, "min_cpus": 2},
            8,
        ),  # -n 2 --gpus-per-task=4
        (
            {
                "tres_per_task": "gres:gpu:2",
                "num_tasks": 2,
                "ntasks_per_node": 2,
                "min_nodes": 1,
                "max_nodes": 1,
            },
            4,
        ),
        ({"tres_per_task": "gres:gpu:1", "ntasks_per_node": 4, "min_nodes": 2, "max_nodes": 2}, 8),
        ({"tres_per_socket": "gres:gpu:2", "sockets_per_node": 2}, 4),  # --gpus-per-socket
        (
            {
                "tres_per_socket": "gres:gpu:2",
                "sockets_per_node": 2,
                "min_nodes": 2,
                "max_nodes": 2,
            },
            8,
        ),
        ({"tres_per_node": "gres:gpu:2", "min_nodes": 2, "max_nodes": 2, "num_tasks": 4}, 4),
        ({"tres_per_job": "gres:gpu:3"}, 3),
    ],
)
def test_total_gpus_from_every_form(fields, gpus) -> None:
    assert JobRequest.from_job_desc(job(**fields)).total_gpus == gpus


def test_gpus_per_task_job_is_tagged_with_all_its_gpus(cfg) -> None:
    d = decide(
        job(tres_per_task="gres:gpu:4", num_tasks=2, min_cpus=2), cfg, FilterContext(now=NOW)
    )
    assert d.accepted
    tag = parse_tag(d.changes["admin_comment"])
    assert tag.gpus == 8 and tag.shape == "spread" and "task.gpu:4" in tag.original


def test_gpus_per_task_with_tasks_per_node_gets_its_shape(cfg) -> None:
    d = decide_args(cfg, "-N2", "--ntasks-per-node=4", "--gpus-per-task=2", "-t", "60")
    assert d.accepted and parse_tag(d.changes["admin_comment"]).shape == "2x8"
    assert d.changes["req_switch"] == 1


def test_per_task_gpus_over_a_node_are_refused(cfg) -> None:
    d = decide_args(cfg, "-n", "4", "--ntasks-per-node=4", "--gpus-per-task=4", "-t", "60")
    assert not d.accepted and d.rule == "validate.gpus_per_node"
    assert "16 GPUs per node" in d.message and "Fix:" in d.message


def test_per_task_gpus_count_against_the_job_cap(cfg) -> None:
    d = decide_args(cfg, "-n", "9", "--gpus-per-task=4", "-t", "60")  # 36 GPUs, the cluster has 32
    assert not d.accepted and "36" in d.message


def test_unknown_type_in_gpus_per_task_is_refused(cfg) -> None:
    d = decide_args(cfg, "-n", "2", "--gpus-per-task=a100:1", "-t", "60")
    assert not d.accepted and d.rule == "validate.gpu_type"


def test_negative_gpu_count_is_refused(cfg) -> None:
    d = decide_args(cfg, "--gpus=-1", "-t", "60")  # sbatch passes gres:gpu:-1 on to slurmctld
    assert not d.accepted and d.rule == "validate.gpu_count" and "Fix:" in d.message


@pytest.mark.parametrize(
    "args, rule, words",
    [
        (
            ["--gpus=1", "--cpus-per-task=32"],
            "validate.cpus_per_gpu",
            ["32 CPUs", "--cpus-per-task=32", "at most 4"],
        ),
        (["--gpus=1", "-n", "8"], "validate.cpus_per_gpu", ["8 CPUs"]),
        (["--gpus=1", "-n", "2", "-c", "4"], "validate.cpus_per_gpu", ["8 CPUs", "x 2 tasks"]),
        (["--gpus=1", "--mincpus=16"], "validate.cpus_per_gpu", ["16 CPUs", "--mincpus=16"]),
        (
            ["--gpus=1", "--exclusive"],
            "validate.exclusive",
            ["--exclusive", "32 CPUs", "drop --exclusive"],
        ),
        (["--gpus=1", "--mem=240G"], "validate.mem_per_gpu", ["--mem=", "31744M"]),
        (["--gpus=1", "--mem=0"], "validate.mem_per_gpu", ["--mem=0"]),
        (["--gpus=1", "-c", "4", "--mem-per-cpu=10G"], "validate.mem_per_gpu", ["--mem-per-cpu"]),
        (["--gpus=1", "--cpus-per-task=32", "--mem=240G"], "validate.cpus_per_gpu", ["32 CPUs"]),
    ],
)
def test_cpu_and_memory_caps_hold_whatever_option_asks(cfg, args, rule, words) -> None:
    d = decide_args(cfg, *args, "-t", "60")
    assert not d.accepted and d.rule == rule, d
    assert all(w in d.message for w in words), d.message
    assert "Fix:" in d.message


@pytest.mark.parametrize(
    "args",
    [
        ["--gpus=8", "--exclusive"],
        ["--gpus=2", "-c", "4", "-n", "2"],
        ["--gpus=1", "--mem=31G"],
        ["-N2", "--gpus-per-node=8", "--exclusive"],
        ["--gpus=1", "-c", "4"],
        ["-n", "2", "--gpus-per-task=1", "-c", "4"],
    ],
)
def test_requests_within_the_caps_pass(cfg, args) -> None:
    d = decide_args(cfg, *args, "-t", "60")
    assert d.accepted, d.message


def test_filter_check_reads_task_socket_cpu_and_memory_options() -> None:
    d = parse_sbatch_args(
        [
            "-n",
            "2",
            "--gpus-per-task=4",
            "-c",
            "3",
            "--mem=2G",
            "--exclusive",
            "-q",
            "high",
            "--gpus-per-socket=1",
            "--sockets-per-node=2",
            "--ntasks-per-node=2",
        ]
    )
    assert d["num_tasks"] == 2 and d["tres_per_task"] == "gres:gpu:4" and d["cpus_per_task"] == 3
    assert d["min_cpus"] == 6 and d["pn_min_cpus"] == 3 and d["min_mem_per_node"] == 2048
    assert d["shared"] == 0 and d["qos"] == "high" and d["tres_per_socket"] == "gres:gpu:1"
    assert d["sockets_per_node"] == 2 and d["ntasks_per_node"] == 2
    assert parse_sbatch_args(["-t", "0"])["time_limit"] == 0xFFFFFFFF  # sbatch: 0 is no limit


@pytest.mark.parametrize(
    "args, text",
    [
        (["--gpus-per-socket=2"], "--sockets-per-node"),
        (["-n", "0"], "1 or more"),
        (["-c", "0"], "1 or more"),
        (["--mem=2G", "--mem-per-cpu=1G"], "exclude"),
        (["-N", "3-2"], "maximum"),
        (["--gpus=x"], "COUNT"),
    ],
)
def test_filter_check_refuses_what_sbatch_refuses(args, text) -> None:
    with pytest.raises(SbatchArgsError, match=text):
        parse_sbatch_args(args)


def test_squeue_counts_gpus_per_task_and_socket_and_prefers_alloc_tres() -> None:
    base = {
        "job_id": 5,
        "job_state": "PENDING",
        "tres_per_task": "gres:gpu:4",
        "tasks": 2,
        "node_count": 1,
    }
    assert job_from_squeue(base).num_gpus == 8
    sock = {
        "job_id": 6,
        "job_state": "PENDING",
        "tres_per_socket": "gres:gpu:h100:2",
        "sockets_per_node": 2,
        "node_count": 2,
    }
    j = job_from_squeue(sock)
    assert j.num_gpus == 8 and j.gpu_type == "h100"
    running = {
        **base,
        "job_state": "RUNNING",
        "gres_detail": ["gpu:h100:8(IDX:0-7)"],
        "tres_alloc_str": "cpu=2,mem=16000M,node=1,billing=2",
    }
    assert job_from_squeue(running).num_gpus == 8
    running["tres_alloc_str"] = "cpu=2,mem=16000M,node=1,billing=2,gres/gpu=8,gres/gpu:h100=8"
    running["gres_detail"] = []
    assert job_from_squeue(running).num_gpus == 8
    assert gpus_in_tres("cpu=1,gres/gpu:h100=2,gres/gpu=2") == 2 and gpus_in_tres("cpu=1") is None


def test_squeue_format_reader_sees_per_task_gpus_and_the_allocation() -> None:
    from slurm_dl.slurm.squeue_format import FIELDS, SEP, parse_squeue_format

    values = {
        "job_id": "7",
        "job_state": "RUNNING",
        "user_name": "u",
        "tres_per_task": "gres:gpu:4",
        "tasks": "2",
        "node_count": "1",
        "tres_alloc_str": "cpu=2,mem=16000M,node=1,billing=2",
        "nodes": "gpu01",
    }
    line = SEP.join(values.get(key, "") for _, key in FIELDS) + SEP
    assert parse_squeue_format(line)[0].num_gpus == 8
    values["tres_alloc_str"] += ",gres/gpu=8"
    values["tres_per_task"] = ""
    line = SEP.join(values.get(key, "") for _, key in FIELDS) + SEP
    assert parse_squeue_format(line)[0].num_gpus == 8
