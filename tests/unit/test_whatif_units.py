"""The what-if's tables show times in units that fit the history: a 22-minute history in
minutes (not 0.01 h), days of history in hours with the makespan in days; the printed table,
its foot and the HTML report agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.model import Job
from slurm_dl.sim.reports.units import DAYS, HOURS, MINUTES, SECONDS, history_span, units_for


@pytest.mark.parametrize(
    "span_s, time, span",
    [
        (90, SECONDS, SECONDS),
        (5 * 60, SECONDS, MINUTES),
        (22 * 60, MINUTES, MINUTES),
        (3 * 3600, MINUTES, HOURS),
        (86400, HOURS, HOURS),
        (3 * 86400, HOURS, DAYS),
        (90 * 86400, HOURS, DAYS),
    ],
)
def test_the_units_follow_the_span_of_the_history(span_s, time, span) -> None:
    u = units_for(span_s)
    assert (u.time, u.span) == (time, span)


def test_the_span_runs_from_the_first_submission_to_the_last_end() -> None:
    jobs = [Job(job_id=1, submit_time=100.0, duration=50.0), Job(job_id=2, submit_time=120.0)]
    assert history_span(jobs) == 50.0 and history_span([]) == 0.0


def _trace(tmp_path: Path, gap_s: int, run_s: int) -> Path:
    """20 one-GPU jobs, one every ``gap_s`` seconds, each running ``run_s``."""
    p = tmp_path / "t.csv"
    rows = "".join(f"{i},1,{i * gap_s},{run_s},{'ab'[i % 2]}\n" for i in range(20))
    p.write_text("job_id,num_gpus,submit_time,duration,account\n" + rows)
    return p


def _simulate(tmp_path: Path, trace: Path) -> tuple[list[str], str]:
    args = ["simulate", "--trace", str(trace), "--format", "csv", "--nodes", "1"]
    args += ["--gpus-per-node", "4", "--policy", "fifo", "--no-fairness", "--jobs", "1"]
    r = CliRunner().invoke(app, [*args, "--report", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines(), (tmp_path / "rep" / "index.html").read_text()


def test_a_22_minute_history_is_shown_in_minutes(tmp_path: Path) -> None:
    lines, html = _simulate(tmp_path, _trace(tmp_path, 60, 180))  # 19 min + 3 min
    head = next(ln for ln in lines if ln.startswith("policy "))
    assert head.split()[1:6] == ["JCT", "m", "med", "m", "p99"] and "span m" in head
    assert "times in minutes (m)" in lines
    row = next(ln for ln in lines if ln.startswith("fifo "))
    assert row.split()[1] == "3.00" and row.split()[5] == "22.0"  # no wait; 22 minutes
    assert "<th>mean JCT min</th>" in html and "<th>makespan min</th>" in html
    assert re.search(r"<td>3\.00</td>", html) and "lowest mean JCT, 3.00 min" in html
    assert "job completion time (minutes, log scale)" in html
    assert "minutes since the first submission" in html
    assert all(len(ln) <= 80 for ln in lines if not ln.startswith("wrote "))


def test_days_of_history_are_shown_in_hours_with_the_makespan_in_days(tmp_path: Path) -> None:
    lines, html = _simulate(tmp_path, _trace(tmp_path, 4 * 3600, 7200))  # 76 h + 2 h
    head = next(ln for ln in lines if ln.startswith("policy "))
    assert "JCT h" in head and "span d" in head
    assert "times in hours (h), span in days (d)" in lines
    row = next(ln for ln in lines if ln.startswith("fifo "))
    assert row.split()[1] == "2.00" and row.split()[5] == "3.2"
    assert "<th>mean JCT h</th>" in html and "<th>makespan d</th>" in html
    assert "days since the first submission" in html
