"""simulate's output: rows as policies finish, "–"/null for what was not computed, Ctrl-C keeps
what finished, JSON without NaN/Infinity, and the progress bar only on a terminal."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.cli.simulate_cmd import finite
from slurm_dl.sim.whatif.progress import Progress

TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 2},{i * 30},{200 + 37 * i},{'ab'[i % 2]}\n" for i in range(30)
)


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(TRACE)
    return p


def test_no_fairness_shows_dashes_and_nulls_never_numbers(tmp_path):
    args = [
        "simulate",
        "--trace",
        str(_trace(tmp_path)),
        "--format",
        "csv",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--policy",
        "fifo",
        "--policy",
        "las",
        "--no-fairness",
    ]
    out = CliRunner().invoke(app, args + ["--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    for s in doc["policies"].values():
        assert s["jain_rho"] is None and s["max_rho"] is None
        assert all(a["rho"] is None for a in s["per_account"].values())
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    rows = [ln for ln in text.stdout.splitlines() if ln.startswith(("fifo ", "las "))]
    assert len(rows) == 2 and all(r.split()[-2:] == ["–", "–"] for r in rows)
    assert all(len(ln) <= 80 for ln in text.stdout.splitlines())
    with_fair = json.loads(CliRunner().invoke(app, args[:-1] + ["--json"]).stdout)
    assert all(isinstance(s["max_rho"], float) for s in with_fair["policies"].values())


def test_interrupt_keeps_the_finished_policies(tmp_path, monkeypatch):
    import slurm_dl.sim.simulate as sim

    real = sim.run_replay
    calls = []

    def flaky(*a, **kw):  # each policy: its shared run and one run per account (a, b)
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(sim, "run_replay", flaky)
    args = [
        "simulate",
        "--trace",
        str(_trace(tmp_path)),
        "--format",
        "csv",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--policy",
        "fifo",
        "--policy",
        "las",
        "--policy",
        "sjf",
        "--json",
        "--plot",
        str(tmp_path / "plots"),
    ]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 130
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert list(doc["policies"]) == ["fifo"] and doc["interrupted"] is True
    assert doc["policies_not_run"] == ["las", "sjf"]
    assert (tmp_path / "plots" / "jct_cdf.png").is_file()


def test_json_has_no_nan_or_infinity():
    doc = finite({"a": math.inf, "b": [1.0, math.nan, {"c": -math.inf}], "d": 2})
    assert doc == {"a": None, "b": [1.0, None, {"c": None}], "d": 2}
    json.dumps(doc, allow_nan=False)


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_only_on_a_terminal_and_after_a_while():
    quiet = io.StringIO()
    p = Progress(quiet, after_s=0.0, every_s=0.0)
    p.begin("las", 100, 0.0, 86400.0 * 10)
    p.update(86400.0 * 5, 50)
    assert quiet.getvalue() == ""
    tty = _Tty()
    p = Progress(tty, after_s=0.0, every_s=0.0)
    p.begin("las", 100, 0.0, 86400.0 * 10)
    p.update(86400.0 * 5, 50)
    line = tty.getvalue()
    assert "las: day 5/10, 50/100 jobs" in line and "ETA" in line and len(line.strip("\r")) <= 79
    late = Progress(_Tty(), after_s=60.0)
    late.begin("fifo", 10, 0.0, 1.0)
    late.update(0.5, 5)
    assert late.stream.getvalue() == ""


def test_cluster_from_slurm_reads_the_nodes_through_the_backend(tmp_path, monkeypatch):
    import slurm_dl.slurm as slurm
    from slurm_dl.core.model import Node, Partition

    class Fake:
        def nodes(self):
            return [Node("g1", 4, "h100"), Node("g2", 4, "h100"), Node("cpu1", 0)]

        def partitions(self):
            return [Partition("gpu", ("g1", "g2"))]

    monkeypatch.setattr(slurm, "get_backend", lambda *a, **k: Fake())
    args = [
        "simulate",
        "--trace",
        str(_trace(tmp_path)),
        "--format",
        "csv",
        "--cluster-from-slurm",
        "--policy",
        "fifo",
        "--json",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["policies"]["fifo"]["total_gpus"] == 8
    assert "2 GPU nodes, 8 GPUs (h100); partitions: gpu" in r.stderr


def test_jobs_too_big_for_the_cluster_are_named_and_counted(tmp_path):
    p = tmp_path / "big.csv"
    p.write_text("job_id,num_gpus,submit_time,duration\n1,1,0,10\n2,16,1,10\n3,9,2,10\n")
    r = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--format", "csv", "--nodes", "1"])
    assert r.exit_code != 0
    assert "error: 2 jobs too big for 'shared' (8 GPUs): 2, 3 (max 16)" in r.output
