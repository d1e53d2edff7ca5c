"""``slurm-dl simulate`` on several GPU types: the options, their errors (one clear line each),
the per-type output, and sacct histories replayed on their recorded types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.sim.workloads.history import gpus_from_tres, read_sacct_text

TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 2},{i * 30},{200 + 37 * i},{'ab'[i % 2]}\n" for i in range(30)
)
SPEEDS = "kind,v100,k80\nresnet,10,1\nrec,1,1.2\n"


@pytest.fixture
def files(tmp_path: Path) -> dict:
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "speeds.csv").write_text(SPEEDS)
    (tmp_path / "fleet.csv").write_text("sn,gpu,model\nn0,2,v100\nn1,4,k80\nn2,0,cpu\n")
    return {
        k: str(tmp_path / n)
        for k, n in (("trace", "t.csv"), ("speeds", "speeds.csv"), ("fleet", "fleet.csv"))
    }


def sim(files, *extra) -> object:
    return CliRunner().invoke(
        app,
        ["simulate", "--trace", files["trace"], "--format", "csv", "--policy", "las", "-q", *extra],
    )


def test_node_types_with_throughputs_replays_with_per_type_figures(files):
    res = sim(
        files,
        "--node-types",
        "v100:1,k80:1",
        "--gpus-per-node",
        "2",
        "--throughputs",
        files["speeds"],
        "--model-seed",
        "3",
        "--json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    s = doc["policies"]["las"]
    assert s["avg_jct_s"] > 0 and set(s["per_type"]) == {"v100", "k80"}
    assert s["per_type"]["v100"]["gpus"] == 2 and 0 < s["per_type"]["v100"]["utilization"] <= 1
    assert "models: 30 of 30 jobs name none" in res.stderr and "--model-seed 3" in res.stderr
    text = sim(
        files,
        "--node-types",
        "v100:1,k80:1",
        "--gpus-per-node",
        "2",
        "--throughputs",
        files["speeds"],
    )
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert any(
        ln.startswith("GPU types: 1 x 2 v100 + 1 x 2 k80 (4 GPUs); type choice aware")
        for ln in lines
    )
    assert any(ln.strip().startswith("busy by type: v100 ") for ln in lines)
    assert all(len(ln) <= 80 for ln in lines)


def test_type_choices_and_a_fleet(files):
    out = {}
    for choice in ("blind", "fastest", "aware"):
        res = sim(
            files,
            "--fleet",
            files["fleet"],
            "--throughputs",
            files["speeds"],
            "--type-choice",
            choice,
            "--json",
        )
        assert res.exit_code == 0, res.output
        out[choice] = json.loads(res.stdout)["policies"]["las"]
    assert set(out["aware"]["per_type"]) == {"v100", "k80"} and out["aware"]["total_gpus"] == 6


def test_same_seed_same_models_and_figures(files):
    args = (
        "--node-types",
        "v100:1,k80:1",
        "--gpus-per-node",
        "2",
        "--throughputs",
        files["speeds"],
        "--json",
    )
    a, b = sim(files, *args), sim(files, *args)
    assert json.loads(a.stdout) == json.loads(b.stdout)


@pytest.mark.parametrize(
    "extra,msg",
    [
        (["--node-types", "v100"], "--node-types: got 'v100': 'v100' is not TYPE:NODES"),
        (
            ["--node-types", "v100:1,k80:1", "--nodes", "2"],
            "--node-types: give it instead of --nodes",
        ),
        (
            ["--node-types", "v100:1", "--fleet", "x.csv"],
            "--node-types: give it or --fleet, not both",
        ),
        (
            ["--node-types", "v100:1,k80:1", "--type-choice", "best"],
            "--type-choice: got 'best'; allowed: blind, fastest, constrained, aware",
        ),
        (
            ["--nodes", "1", "--model-seed", "1"],
            "--model-seed: draws each job's model from --throughputs",
        ),
        (
            ["--nodes", "1", "--type-choice", "aware"],
            "--type-choice: the cluster has one GPU type and node size",
        ),
        (
            ["--node-types", "v100:1,a100:1", "--throughputs", "SPEEDS"],
            "--throughputs: no speeds for GPU type a100; it has k80, v100",
        ),
        (
            ["--node-types", "v100:1,k80:1", "--throughputs", "missing.json"],
            "--throughputs: cannot read missing.json",
        ),
        (["--node-types", "v100:1,k80:1", "--spread"], "--spread: not with several GPU types"),
    ],
)
def test_option_errors_are_one_clear_line(files, extra, msg):
    extra = [files["speeds"] if x == "SPEEDS" else x for x in extra]
    res = sim(files, *extra)
    assert res.exit_code != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and msg in err[0], res.output


def test_fleet_and_throughputs_file_errors(tmp_path, files):
    empty = tmp_path / "empty.csv"
    empty.write_text("sn,gpu,model\nn0,0,cpu\n")
    res = sim(files, "--fleet", str(empty))
    assert res.exit_code != 0 and "no node has a GPU" in res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"k80": {"(\'A\', 1)": {"null": 1.0}},\n "v100": ')
    res = sim(files, "--node-types", "v100:1,k80:1", "--throughputs", str(bad))
    assert res.exit_code != 0 and "--throughputs: " in res.stderr and "not valid JSON" in res.stderr
    zero = tmp_path / "zero.csv"
    zero.write_text("kind,v100,k80\nx,1,0\n")
    res = sim(files, "--node-types", "v100:1,k80:1", "--throughputs", str(zero))
    assert res.exit_code != 0 and "line 2: x on k80: '0'" in res.stderr


SACCT = (
    "|".join(
        (
            "JobID",
            "JobIDRaw",
            "User",
            "Account",
            "Partition",
            "JobName",
            "State",
            "Submit",
            "Start",
            "End",
            "Elapsed",
            "Timelimit",
            "AllocTRES",
            "ReqTRES",
            "AdminComment",
        )
    )
    + "\n"
)


def _row(jid: int, start: int, secs: int, tres: str) -> str:
    t = f"2024-01-01T00:{start:02d}:00"
    end = f"2024-01-01T00:{start + secs // 60:02d}:{secs % 60:02d}"
    return (
        "|".join(
            (
                str(jid),
                str(jid),
                "u",
                "acct",
                "gpu",
                "train",
                "COMPLETED",
                t,
                t,
                end,
                f"00:{secs // 60:02d}:{secs % 60:02d}",
                "01:00:00",
                tres,
                tres,
                "",
            )
        )
        + "\n"
    )


def test_sacct_history_keeps_and_replays_the_recorded_type(tmp_path):
    assert gpus_from_tres("billing=2,cpu=2,gres/gpu:v100=2") == (2, "v100")
    text = (
        SACCT + _row(1, 0, 120, "cpu=1,gres/gpu:k80=1") + _row(2, 0, 120, "cpu=1,gres/gpu:v100=1")
    )
    jobs, _ = read_sacct_text(text, "h.txt")
    assert [j.gpu_type for j in jobs] == ["k80", "v100"]
    p = tmp_path / "h.txt"
    p.write_text(text)
    sp = tmp_path / "s.csv"
    sp.write_text("kind,v100,k80\ntrain,10,1\n")
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(p),
            "--format",
            "sacct",
            "--node-types",
            "v100:1,k80:1",
            "--gpus-per-node",
            "1",
            "--throughputs",
            str(sp),
            "--policy",
            "fifo",
            "-q",
            "--json",
            "--opt-in",
            "none",
        ],
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["policies"]["fifo"]
    assert s["avg_jct_s"] == pytest.approx(
        120
    )  # each on the type it ran on, at its recorded run time
    assert s["per_type"]["k80"]["gpu_hours"] == pytest.approx(120 / 3600)


def test_report_has_the_per_type_table(files, tmp_path):
    out = tmp_path / "rep"
    res = sim(
        files,
        "--node-types",
        "v100:1,k80:1",
        "--gpus-per-node",
        "2",
        "--throughputs",
        files["speeds"],
        "--report",
        str(out),
    )
    assert res.exit_code == 0, res.output
    html = (out / "index.html").read_text()
    assert 'id="type-table"' in html and '<td class="name">k80</td><td>2</td>' in html
    assert "1 x 2 v100 + 1 x 2 k80" in html  # the cluster, with its types
    plain = tmp_path / "plain"
    assert sim(files, "--nodes", "2", "--gpus-per-node", "2", "--report", str(plain)).exit_code == 0
    assert 'id="type-table"' not in (plain / "index.html").read_text()


def test_a_site_config_of_several_types_is_replayed_on_its_node_groups(files):
    cfg = str(Path(__file__).resolve().parents[2] / "site-configs" / "university-small.toml")
    res = sim(files, "--config", cfg, "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["policies"]["las"]
    assert {t: r["gpus"] for t, r in s["per_type"].items()} == {"a100": 64, "v100": 64}
    flat = sim(
        files, "--config", cfg, "--nodes", "2", "--json"
    )  # --nodes: the size given, one type
    assert flat.exit_code == 0, flat.output
    assert "per_type" not in json.loads(flat.stdout)["policies"]["las"]


def test_cluster_from_slurm_with_several_types(files, monkeypatch):
    import slurm_dl.slurm as slurm
    from slurm_dl.core.model import Node, Partition

    class Fake:
        def nodes(self):
            return [
                Node("g1", 2, "v100"),
                Node("g2", 2, "v100"),
                Node("g3", 4, "k80"),
                Node("cpu1", 0),
            ]

        def partitions(self):
            return [Partition("gpu", ("g1", "g2", "g3"))]

    monkeypatch.setattr(slurm, "get_backend", lambda *a, **k: Fake())
    res = sim(
        files,
        "--cluster-from-slurm",
        "--throughputs",
        files["speeds"],
        "--type-choice",
        "fastest",
        "--json",
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["policies"]["las"]
    assert s["total_gpus"] == 8 and {t: r["gpus"] for t, r in s["per_type"].items()} == {
        "v100": 4,
        "k80": 4,
    }
    assert "2 x 2 v100 + 1 x 4 k80 (8 GPUs); type choice fastest" in res.stderr
