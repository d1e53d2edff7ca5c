"""Trace readers: the first rows of the real public traces, and bad rows named by file and line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from slurm_dl.core.errors import TraceError
from slurm_dl.sim.workloads.traces import parse_time, read_cluster_sizes, read_trace


def head(src: Path, dst: Path, n: int) -> Path:
    with src.open() as fh:
        dst.write_text("".join(itertools.islice(fh, n + 1)))
    return dst


def test_philly_first_rows(shared_traces, tmp_path):
    jobs = read_trace(
        head(shared_traces / "philly" / "philly.csv", tmp_path / "p.csv", 50), "philly"
    )
    assert len(jobs) == 50
    first = jobs[0]
    assert first.account == "11cb48" and first.num_gpus == 1 and first.duration == 66.0
    assert first.submit_time == parse_time("2017-10-09 07:01:55")


def test_philly_window_keeps_start_inclusive_end_exclusive(shared_traces, tmp_path):
    p = head(shared_traces / "philly" / "philly.csv", tmp_path / "p.csv", 200)
    everything = read_trace(p, "philly")
    t = sorted(j.submit_time for j in everything)[100]
    inside = read_trace(p, "philly", start=t, end=None)
    assert all(j.submit_time >= t for j in inside)
    before = read_trace(p, "philly", start=None, end=t)
    assert len(inside) + len(before) == len(everything)


def test_chronus_times_are_minutes_and_strict_jobs_get_deadlines(shared_traces, tmp_path):
    jobs = read_trace(
        head(shared_traces / "chronus" / "trace_job_Philly_SLO.csv", tmp_path / "c.csv", 20),
        "chronus",
    )
    j = jobs[0]  # 0,vc_103959,4,12198,6910,resnet101,211,8,282,10,0,strict
    assert j.submit_time == 12198 * 60 and j.duration == 211 * 60
    assert j.deadline == (12198 + 282) * 60
    assert j.account == "vc_103959" and j.name == "resnet101" and j.tags["job_type"] == "strict"


def test_chronus_best_effort_jobs_have_no_deadline(shared_traces):
    from slurm_dl.sim.workloads.traces import iter_trace

    best = next(
        j
        for j in iter_trace(shared_traces / "chronus" / "trace_job_Philly_MIX1.csv", "chronus")
        if j.tags["job_type"] == "best"
    )
    assert best.deadline is None


def test_tiresias_format(shared_traces):
    jobs = read_trace(shared_traces / "tiresias" / "60_job.csv", "tiresias")
    assert len(jobs) == 60
    assert (jobs[1].num_gpus, jobs[1].submit_time, jobs[1].duration) == (8, 30.0, 147.0)


def test_vc_sizes(shared_traces):
    sizes = read_cluster_sizes(shared_traces / "philly" / "vc_sizes.csv")
    assert len(sizes) == 11 and sizes["6214e9"] == 64


def test_plain_csv_and_bad_row_names_file_and_line(tmp_path):
    good = tmp_path / "t.csv"
    good.write_text(
        "submit_time,duration,num_gpus,account,deadline\n0,10,1,x,\n2017-10-01 00:00:10,5,2,y,100\n"
    )
    jobs = read_trace(good, "csv")
    assert (
        [j.account for j in jobs] == ["x", "y"]
        and jobs[0].deadline is None
        and jobs[1].deadline == 100
    )
    bad = tmp_path / "bad.csv"
    bad.write_text("submit_time,duration,num_gpus\n0,10,1\n5,ten,1\n")
    with pytest.raises(TraceError, match=r"bad\.csv:3: column 'duration'"):
        read_trace(bad, "csv")
    with pytest.raises(TraceError, match="missing column"):
        read_trace(bad, "philly")
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(bad, "nope")


@pytest.mark.parametrize(
    "text, fmt",
    [
        ("JobID|JobIDRaw|User|Account|Submit|Start|End|State\n1|1|u|a|x|x|x|COMPLETED\n", "sacct"),
        ('{"meta": {}, "jobs": []}\n', "sacct-json"),
        (
            "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,expect_time_list,"
            "expect_value_list,best_effort,job_type\n",
            "chronus",
        ),
    ],
)
def test_a_file_in_another_format_gets_the_format_that_reads_it(tmp_path, text, fmt):
    f = tmp_path / "t.txt"
    f.write_text(text)
    with pytest.raises(TraceError, match=f"it looks like --format {fmt}$"):
        read_trace(f, "philly")
