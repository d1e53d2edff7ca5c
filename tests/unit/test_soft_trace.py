"""The synthetic soft-deadline trace: classes redrawn, seeded, Chronus' step shape."""

from __future__ import annotations

import csv

import pytest

from slurm_dl.sim.workloads.soft_trace import soft_deadline_rows, write_soft_deadline_trace
from slurm_dl.sim.workloads.traces import read_trace

HEAD = "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,expect_time_list,expect_value_list,best_effort,job_type\n"


def _source(tmp_path, n: int = 400):
    p = tmp_path / "src.csv"
    rows = [
        f"{i},vc_a,1,{i},10,vgg16,{60 + i},1,{120 + 2 * i},10,0,strict"
        if i % 2 == 0
        else f"{i},vc_b,2,{i},10,resnet50,{30 + i},1,{i},10,1,best"
        for i in range(n)
    ]
    p.write_text(HEAD + "\n".join(rows) + "\n")
    return p


def test_classes_are_redrawn_in_the_asked_shares_and_seeded(tmp_path) -> None:
    src = _source(tmp_path)
    rows = soft_deadline_rows(src, seed=3)
    assert rows == soft_deadline_rows(src, seed=3) != soft_deadline_rows(src, seed=4)
    share = {
        k: sum(r["job_type"] == k for r in rows) / len(rows) for k in ("soft", "strict", "best")
    }
    assert share["soft"] == pytest.approx(0.6, abs=0.08)
    assert share["strict"] == pytest.approx(0.3, abs=0.08)
    assert share["best"] == pytest.approx(0.1, abs=0.05)
    for r in rows:
        if r["job_type"] == "soft":
            t = [int(x) for x in r["expect_time_list"].split("-")]
            assert t == sorted(t) and len(t) == 3 and r["expect_value_list"] == "10-5-2"
        assert r["best_effort"] == ("1" if r["job_type"] == "best" else "0")


def test_written_trace_reads_back_with_soft_steps(tmp_path) -> None:
    out = write_soft_deadline_trace(_source(tmp_path), tmp_path / "soft.csv", seed=0)
    with open(out, newline="") as f:
        assert len(list(csv.DictReader(f))) == 400
    jobs = read_trace(out, "chronus")
    assert any(len(j.soft_deadlines) == 3 for j in jobs)


def test_a_source_without_strict_jobs_is_refused_clearly(tmp_path) -> None:
    p = tmp_path / "src.csv"
    p.write_text(HEAD + "0,vc_a,1,0,10,vgg16,60,1,0,10,1,best\n")
    with pytest.raises(ValueError, match="no strict jobs"):
        soft_deadline_rows(p)
