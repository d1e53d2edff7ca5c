"""GPU utilisation in traces (column, join file, parse errors) and ``slurm-dl simulate --idle-policy``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.errors import TraceError
from slurm_dl.sim.workloads.traces import attach_utilisation, read_trace, read_utilisation
from slurm_dl.sim.workloads.utilisation import UTIL_TAG, profiles_of

H = 3600


@pytest.fixture()
def util_trace(tmp_path):
    """One GPU, FIFO: job 1 idles for the last 3 h of 5 h; job 2 queues behind it; job 3 has no utilisation."""
    p = tmp_path / "util.csv"
    p.write_text(
        "job_id,submit_time,duration,num_gpus,account,gpu_util\n"
        f"1,0,{5 * H},1,a,0:90;{2 * H}:0\n"
        f"2,10,{H},1,b,75\n"
        f"3,20,{H},1,b,\n"
    )
    return p


def test_csv_column_is_read_and_empty_means_unknown(util_trace):
    jobs = read_trace(util_trace, "csv")
    assert [j.tags.get(UTIL_TAG) for j in jobs] == [f"0:90;{2 * H}:0", "75", None]
    assert profiles_of(jobs)[0] == ((0.0, 90.0), (2 * H, 0.0))


def test_other_formats_pass_the_column_through(tmp_path):
    p = tmp_path / "philly.csv"
    p.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster,gpu_util\n"
        "2017-10-09 07:01:55,66.0,1,66.0,vc1,0:80;30:0\n"
        "2017-10-09 07:02:55,66.0,1,66.0,vc1,\n"
    )
    jobs = read_trace(p, "philly")
    assert [j.tags.get(UTIL_TAG) for j in jobs] == ["0:80;30:0", None]


def test_a_bad_value_names_the_file_line_column_and_value(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("submit_time,duration,num_gpus,gpu_util\n0,100,1,50\n5,100,1,0:85;oops\n")
    with pytest.raises(TraceError) as e:
        read_trace(p, "csv")
    msg = str(e.value)
    assert f"{p}:3:" in msg and "'gpu_util'" in msg and "0:85;oops" in msg


def test_join_file_by_job_id(util_trace, tmp_path):
    f = tmp_path / "util_join.csv"
    f.write_text("job_id,gpu_util\n3,0\n99,50\n")
    jobs = read_trace(util_trace, "csv")
    by_id = read_utilisation(f)
    assert by_id == {3: "0", 99: "50"}
    assert attach_utilisation(jobs, by_id) == 1 and jobs[2].tags[UTIL_TAG] == "0"
    f.write_text("job_id,gpu_util\n3,0\n3,5\n")
    with pytest.raises(TraceError, match=r":3: column 'job_id': 3 appears twice"):
        read_utilisation(f)
    f.write_text("job_id,gpu_util\n3,200\n")
    with pytest.raises(TraceError, match=r":2: column 'gpu_util': '200'"):
        read_utilisation(f)
    f.write_text("job,util\n")
    with pytest.raises(TraceError, match="missing column"):
        read_utilisation(f)


def _sim(*args):
    return CliRunner().invoke(
        app,
        [
            "simulate",
            "--format",
            "csv",
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            "--policy",
            "fifo",
            *args,
        ],
    )


def test_cli_idle_block_from_the_column(util_trace):
    r = _sim("--trace", str(util_trace), "--idle-policy", "--idle-action", "cancel", "--json")
    assert r.exit_code == 0, r.output
    idle = json.loads(r.output)["policies"]["fifo"]["idle"]
    assert idle["synthetic"] is False and "gpu_util" in idle["source"]
    assert idle["policy"]["idle_action"] == "cancel" and idle["jobs_with_utilisation"] == 2
    assert idle["idle_gpu_hours"] == 3.0 and idle["reclaimed_gpu_hours"] == 1.5
    assert (idle["jobs_flagged"], idle["jobs_cancelled"]) == (1, 1)
    other = idle["other_jobs"]  # jobs 2 and 3 start 1.5 h earlier
    assert (
        other["jobs"] == 2 and other["avg_queue_s_before"] - other["avg_queue_s_after"] == 1.5 * H
    )
    # the per-job verdicts, in run time
    report = util_trace.parent / "verdicts.csv"
    r = _sim(
        "--trace",
        str(util_trace),
        "--idle-action",
        "cancel",
        "--idle-report",
        str(report),
        "--json",
    )
    assert r.exit_code == 0, r.output
    rows = report.read_text().splitlines()
    assert rows[0].startswith(
        "job_id,account,num_gpus,duration_s,verdict,enforced,warned_at_s,acted_at_s"
    )
    assert rows[1:] == [
        f"1,a,1,{5 * H:.1f},cancel,1,{3 * H:.1f},{3.5 * H:.1f},3.0,1.5",
        f"2,b,1,{H:.1f},ok,0,,,0.0,0.0",
    ]
    # the table says the same in words
    r = _sim("--trace", str(util_trace), "--idle-policy", "--idle-action", "cancel")
    assert r.exit_code == 0 and "reclaimed 1.5 GPU-h" in r.output and "SYNTHETIC" not in r.output


def test_cli_default_config_reports_only(util_trace):
    idle = json.loads(_sim("--trace", str(util_trace), "--idle-policy", "--json").output)[
        "policies"
    ]["fifo"]["idle"]
    assert idle["policy"]["idle_action"] == "report" and idle["jobs_flagged"] == 1
    assert idle["reclaimed_gpu_hours"] == 0 and idle["other_jobs"]["avg_jct_change"] == 0.0


def test_cli_synthetic_is_labelled(tmp_path):
    p = tmp_path / "plain.csv"
    p.write_text(
        "submit_time,duration,num_gpus\n" + "".join(f"{i * 60},{4 * H + i},1\n" for i in range(30))
    )
    r = _sim("--trace", str(p), "--synthetic-idle", "0.5:3", "--idle-action", "cancel", "--json")
    assert r.exit_code == 0, r.output
    idle = json.loads(r.output)["policies"]["fifo"]["idle"]
    assert idle["synthetic"] is True and idle["source"].startswith("SYNTHETIC")
    assert idle["jobs_with_utilisation"] > 0
    r = _sim("--trace", str(p), "--synthetic-idle", "0.5:3")
    assert r.exit_code == 0 and "SYNTHETIC" in r.output


def test_cli_errors_are_one_line(tmp_path, util_trace):
    p = tmp_path / "plain.csv"
    p.write_text("submit_time,duration,num_gpus\n0,100,1\n")
    r = _sim("--trace", str(p), "--idle-policy")
    assert (
        r.exit_code != 0
        and "no job has GPU utilisation" in r.output
        and "Traceback" not in r.output
    )
    r = _sim("--trace", str(util_trace), "--idle-action", "nuke")
    assert r.exit_code != 0 and "--idle-action: got 'nuke'" in r.output
    r = _sim("--trace", str(util_trace), "--synthetic-idle", "2")
    assert r.exit_code != 0 and "outside 0-1" in r.output


def test_cli_reads_the_telemetry_section_of_the_config(util_trace, repo_root, tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        (repo_root / "site-configs" / "testbed.toml").read_text()
        + '\n[telemetry]\nidle_minutes = 30\nwarn_grace_minutes = 0\nidle_action = "cancel"\n'
    )
    r = _sim(
        "--trace", str(util_trace), "--config", str(cfg), "--idle-policy", "--no-fairness", "--json"
    )
    assert r.exit_code == 0, r.output
    idle = json.loads(r.output)["policies"]["fifo"]["idle"]
    assert idle["policy"]["idle_minutes"] == 30 and idle["policy"]["idle_action"] == "cancel"
    assert idle["reclaimed_gpu_hours"] == 2.5  # idle from 2 h, cancelled at 2.5 h of a 5 h run
