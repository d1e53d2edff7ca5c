"""The GPU types a job accepts, recorded in its tag: what the prioritizer may steer it within."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.gpu_types import feature_types
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def mixed():
    return load_config(
        REPO / "site-configs" / "testbed-mixed.toml"
    )  # h100 x 16 (80 GB), v100 x 16 (32 GB)


def run(cfg, **fields):
    desc = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 60,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "has_script": True,
        **fields,
    }
    return decide(desc, cfg, FilterContext(now=NOW))


def types_of(d):
    assert d.accepted, d.message
    return parse_tag(d.changes["admin_comment"]).gpu_types


@pytest.mark.parametrize(
    "fields, types",
    [
        ({"tres_per_job": "gres:gpu:4"}, ("h100", "v100")),  # names no type: any that fits
        ({"tres_per_job": "gres:gpu:v100:4"}, ("v100",)),  # names one: keeps it
        ({"tres_per_node": "gres:gpu:h100:2"}, ("h100",)),
        ({"tres_per_job": "gres:gpu:4", "features": "h100|v100"}, ("h100", "v100")),
        ({"tres_per_job": "gres:gpu:4", "features": "[gpu_v100]&ib"}, ("v100",)),
        ({"tres_per_job": "gres:gpu:4", "partition": "v100"}, ("v100",)),
        ({"tres_per_job": "gres:gpu:4", "partition": "h100,v100"}, ("h100", "v100")),
        ({"tres_per_job": "gres:gpu:4", "partition": "gpu"}, ("h100", "v100")),
        ({"tres_per_job": "gres:gpu:4", "comment": "dl:gpu_mem=40G"}, ("h100",)),  # v100 has 32 GB
        ({"tres_per_job": "gres:gpu:4", "comment": "dl:gpu_mem=16G"}, ("h100", "v100")),
    ],
)
def test_accepted_types(mixed, fields, types) -> None:
    assert types_of(run(mixed, **fields)) == types


def test_a_job_no_type_fits_is_refused_with_why(mixed) -> None:
    d = run(mixed, tres_per_job="gres:gpu:4", partition="v100", comment="dl:gpu_mem=40G")
    assert not d.accepted and d.rule == "validate.gpu_types"
    assert (
        "v100: 32 GB per GPU, the job needs 40 GB" in d.message
        and "h100: not in partition v100" in d.message
    )


def test_a_single_type_site_records_no_types() -> None:
    cfg = load_config(REPO / "site-configs" / "testbed.toml")
    assert types_of(run(cfg, tres_per_job="gres:gpu:4")) is None


def test_features_that_name_no_type_constrain_nothing() -> None:
    assert feature_types("ib&bigmem", ["h100", "v100"]) == set()
    assert feature_types("H100|X", ["h100", "v100"]) == {"h100"}


def test_dlsubmit_writes_the_types_a_job_accepts_and_the_filter_reads_them(mixed) -> None:
    from slurm_dl.core.rules.sbatch_args import parse_sbatch_args
    from slurm_dl.dlsubmit.render import JobSpec, RenderError, render

    job = render(JobSpec(kind="train", command=("x",), gpus=2, gpu_type="h100,v100"), mixed)
    assert "--constraint=h100|v100" in job.directives and "--gpus-per-node=2" in job.directives
    desc = parse_sbatch_args(job.filter_args())
    assert types_of(decide(desc, mixed, FilterContext(now=NOW))) == ("h100", "v100")
    big = render(JobSpec(kind="train", command=("x",), gpus=2, gpu_mem="40G"), mixed)
    assert "--gpus-per-node=h100:2" in big.directives  # only h100 has 40 GB
    with pytest.raises(RenderError, match="no GPU type here has that much"):
        render(JobSpec(kind="train", command=("x",), gpus=2, gpu_mem="100G"), mixed)
    with pytest.raises(RenderError, match="this site has h100, v100"):
        render(JobSpec(kind="train", command=("x",), gpus=2, gpu_type="h100,a100"), mixed)


def test_a_job_accepting_several_types_starts_out_on_its_fastest(mixed) -> None:
    d = run(mixed, tres_per_job="gres:gpu:2")
    assert (
        d.changes["partition"] == "h100"
    )  # h100 3.0x, v100 1.0x: the per-type partition is the lever
    d = run(mixed, tres_per_job="gres:gpu:2", partition="gpu")
    assert d.changes["partition"] == "h100"
    d = run(mixed, tres_per_job="gres:gpu:v100:2")  # names a type: never steered
    assert "partition" not in d.changes and "features" not in d.changes


def test_a_job_only_all_types_together_can_hold_spans_them_unsteered(mixed) -> None:
    d = run(mixed, tres_per_job="gres:gpu:24")  # 16 h100 + 16 v100: no one type has 24
    assert d.accepted and any("spans types" in n for n in d.notices)
    assert parse_tag(d.changes["admin_comment"]).gpu_types is None and "partition" not in d.changes


def test_a_deadline_job_on_types_of_different_speeds_is_told_its_limit_is_not_scaled(
    mixed,
) -> None:
    d = run(mixed, tres_per_job="gres:gpu:2", comment="dl:deadline=6h")
    note = next(n for n in d.notices if "not scaled" in n)
    assert "60 min" in note and "3.0 h on v100" in note and "--gres=gpu:h100:N" in note
    assert "/" not in note.replace("--gres=gpu:h100:N", "")  # no source paths, only words
    named = run(mixed, tres_per_job="gres:gpu:h100:2", comment="dl:deadline=6h")
    assert not any("not scaled" in n for n in named.notices)  # one type: nothing to scale
    plain = run(mixed, tres_per_job="gres:gpu:2")
    assert not any("not scaled" in n for n in plain.notices)  # no deadline: no warning
