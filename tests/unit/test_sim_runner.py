"""Replays as tasks: a what-if run in a pool of processes prints exactly what the serial run
prints (rows, JSON), whatever order the workers finish in; a task's error names its policy."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.sim import runner
from slurm_dl.sim.simulate import SimSetup, merge, replays, run_replay, simulate
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.workloads.traces import read_trace

TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 3},{i * 40},{300 + 53 * (i % 17)},{'abc'[i % 3]}\n" for i in range(90)
)


def _args(tmp_path, *more):
    p = tmp_path / "t.csv"
    p.write_text(TRACE)
    return [
        "simulate",
        "--trace",
        str(p),
        "--format",
        "csv",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--policy",
        "fifo",
        "--policy",
        "las",
        "--policy",
        "fairshare",
        *more,
    ]


def test_a_pool_prints_what_the_serial_run_prints(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "SMALL", 0)  # this tiny trace would otherwise run serially
    used = []
    real = runner.run_tasks
    monkeypatch.setattr(
        runner, "run_tasks", lambda *a, **kw: (used.append(kw["workers"]), real(*a, **kw))[1]
    )
    serial = CliRunner().invoke(app, _args(tmp_path, "--jobs", "1", "--json"))
    pooled = CliRunner().invoke(app, _args(tmp_path, "--jobs", "3", "--json"))
    assert serial.exit_code == 0 and pooled.exit_code == 0, pooled.output
    assert used == [1, 3]
    assert pooled.stdout == serial.stdout
    doc = json.loads(pooled.stdout)
    assert list(doc["policies"]) == ["fifo", "las", "fairshare"]
    assert all(isinstance(s["max_rho"], float) for s in doc["policies"].values())
    table = [CliRunner().invoke(app, _args(tmp_path, "--jobs", n)).stdout for n in ("1", "2")]
    assert table[0] == table[1] and "fairshare" in table[0]


def test_merged_tasks_equal_simulate(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(TRACE)
    jobs = read_trace(p, "csv")
    setup = SimSetup(gpus_per_node=2, nodes=2)
    tasks = replays(jobs, setup)
    assert [t.kind for t in tasks] == ["cluster", "alone", "alone", "alone"]
    assert sum(t.jobs for t in tasks) == 2 * len(jobs)
    whole, _ = simulate(jobs, lambda: make_ranker("las"), setup)
    outs = {t: run_replay(jobs, lambda: make_ranker("las"), setup, t) for t in reversed(tasks)}
    merged, _ = merge(setup, [outs[t] for t in tasks])
    assert json.dumps(merged, sort_keys=True) == json.dumps(whole, sort_keys=True)


def test_a_failed_task_is_a_clear_error_in_a_pool(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "SMALL", 0)
    big = TRACE + "999,9,0,100,a\n"
    p = tmp_path / "t.csv"
    p.write_text(big)
    out = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(p),
            "--format",
            "csv",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--policy",
            "fifo",
            "--policy",
            "las",
            "--jobs",
            "2",
        ],
    )
    assert out.exit_code != 0
    assert "too big" in out.output and "Traceback" not in out.output


def test_time_limits_and_options_that_need_via_slurm(tmp_path):
    import pytest

    from slurm_dl.core.errors import SlurmDLError
    from slurm_dl.slurm.sim_array import parse_time_limit

    assert [parse_time_limit(t) for t in (None, "90", "1:30", "1:30:20", "1-0:00")] == [
        60,
        90,
        90,
        91,
        1440,
    ]
    for bad in ("0", "soon", "-5"):
        with pytest.raises(SlurmDLError, match="--time: got"):
            parse_time_limit(bad)
    out = CliRunner().invoke(app, _args(tmp_path, "--partition", "cpu"))
    assert out.exit_code != 0 and "--partition, --time: only with --via-slurm" in out.output
    assert "Traceback" not in out.output


def test_via_slurm_takes_its_partition_and_time_from_the_site_config(tmp_path, monkeypatch):
    # the first --config's [simulate] gives --via-slurm its defaults; the flags override them
    from pathlib import Path

    from slurm_dl.core.errors import SlurmDLError
    from slurm_dl.sim.whatif import plan
    from slurm_dl.testbed.site_toml import with_setting

    seen = []

    def fake(tasks, jobs, recipes, planned, via, *a, **kw):
        seen.append(via)
        raise SlurmDLError("stopped here")

    monkeypatch.setattr(plan, "via_slurm_array", fake)
    text = (Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml").read_text()
    site = tmp_path / "site.toml"
    site.write_text(
        with_setting(
            with_setting(text, "simulate", "partition", "cpu"), "simulate", "time_minutes", 20
        )
    )
    for more, want in (([], ("cpu", 20)), (["--partition", "big", "--time", "1:30"], ("big", 90))):
        out = CliRunner().invoke(app, _args(tmp_path, "--config", str(site), "--via-slurm", *more))
        assert "stopped here" in out.output and "Traceback" not in out.output, out.output
        assert seen[-1] == want
