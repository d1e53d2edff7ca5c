"""The filter's rules on 23.02+ job descriptions, where TRES strings say ``gres/gpu`` (24.11, 26.05)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "site-configs" / "testbed.toml")


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
        **fields,
    }
    return decide(base, cfg, FilterContext(now=1_800_000_000.0))


@pytest.mark.parametrize("prefix", ["gres:", "gres/"])
def test_gpus_16_is_reshaped_in_the_spelling_the_job_came_with(cfg, prefix: str) -> None:
    d = run(cfg, tres_per_job=f"{prefix}gpu:16")
    assert d.changes["tres_per_node"] == f"{prefix}gpu:8" and d.changes["tres_per_job"] == ""
    assert d.changes["min_nodes"] == 2 and d.changes["max_nodes"] == 2


@pytest.mark.parametrize("prefix", ["gres:", "gres/"])
def test_unknown_gpu_type_is_rejected_on_every_release(cfg, prefix: str) -> None:
    assert not run(cfg, tres_per_job=f"{prefix}gpu:nosuchgpu:1").accepted


def test_cpus_per_gpu_limit_reads_the_new_spelling(cfg) -> None:
    d = run(cfg, tres_per_node="gres/gpu:1", cpus_per_tres="gres/gpu:8", time_limit=30)
    assert not d.accepted and "--cpus-per-gpu=8" in d.message


def test_gpus_per_task_in_the_tres_form_counts() -> None:
    from slurm_dl.core.rules.request import parse_gpu_tres

    assert [(a.gpu_type, a.count) for a in parse_gpu_tres("gres/gpu=4")[0]] == [(None, 4)]
    assert [(a.gpu_type, a.count) for a in parse_gpu_tres("cpu=2,gres/gpu:h100=2")[0]] == [
        ("h100", 2)
    ]
