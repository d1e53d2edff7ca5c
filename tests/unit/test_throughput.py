"""The throughput model (slurm_dl.core.throughput): evidence, scales, loaders and their errors,
the site config's [throughput] section and `config check`'s per-type table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import ConfigError
from slurm_dl.core.model import Job, JobClass
from slurm_dl.core.throughput import (
    DEFAULT,
    LEARNT,
    MATRIX,
    RunRecord,
    Speed,
    ThroughputModel,
    kinds_of,
    matrix_from_gavel,
    parse_matrix_csv,
)

REPO = Path(__file__).resolve().parents[2]
GAVEL = REPO.parent / "shared" / "traces" / "gavel" / "simulation_throughputs.json"
SPEEDS = {"v100": 2.0, "p100": 1.0, "k80": 0.5}


def model(**kw) -> ThroughputModel:
    return ThroughputModel(
        SPEEDS,
        {
            "resnet": {"v100": 10.0, "p100": 5.0, "k80": 1.0},
            "rec": {"v100": 1.0, "p100": 1.5, "k80": 1.2},
        },
        **kw,
    )


def test_defaults_alone_order_the_types_and_normalise_charges():
    m = ThroughputModel(SPEEDS)
    j = Job(1, num_gpus=2)
    assert m.speed(j, "k80") == Speed(0.5, DEFAULT, 0)
    assert m.best_types(j) == ["v100", "p100", "k80"]
    assert m.best_types(j, ["k80", "p100"]) == ["p100", "k80"]
    assert m.type_speed("v100") == 2.0
    with pytest.raises(ValueError, match="unknown GPU type 'a100'; allowed: v100, p100, k80"):
        m.type_speed("a100")


def test_a_matrix_row_keeps_its_ratios_on_the_site_scale():
    m = model()
    sp = m.speeds(Job(1, model="resnet"))
    assert {s.source for s in sp.values()} == {MATRIX}
    assert sp["v100"].value / sp["k80"].value == pytest.approx(10.0)
    # the row's geometric mean equals the defaults' (2 × 1 × 0.5 = 1)
    assert math.prod(s.value for s in sp.values()) == pytest.approx(1.0)
    assert m.best_types(Job(2, model="rec")) == ["p100", "k80", "v100"]
    assert m.relative(Job(1, model="resnet"))["k80"] == pytest.approx(0.1)


def test_kind_lookup_model_then_class_then_star_then_default():
    m = ThroughputModel(
        SPEEDS,
        {"inference": {"v100": 1, "p100": 1, "k80": 1}, "*": {"v100": 4, "p100": 2, "k80": 1}},
    )
    assert m.speed(Job(1, model="unknown", job_class=JobClass.INFERENCE), "k80").source == MATRIX
    assert m.relative(Job(1, job_class=JobClass.INFERENCE))["k80"] == 1.0
    assert m.relative(Job(1, model="x"))["k80"] == pytest.approx(0.25)  # the * row
    assert ThroughputModel(SPEEDS).speed(Job(1, model="x"), "k80").source == DEFAULT


def test_rows_per_gpu_count_take_the_largest_count_at_or_below_the_job():
    m = ThroughputModel(
        SPEEDS, {"lm@1": {"v100": 2, "p100": 1, "k80": 1}, "lm@4": {"v100": 8, "p100": 1, "k80": 1}}
    )
    assert m.row_of(Job(1, model="lm", num_gpus=1)) == "lm@1"
    assert m.row_of(Job(1, model="lm", num_gpus=3)) == "lm@1"
    assert m.row_of(Job(1, model="lm", num_gpus=16)) == "lm@4"
    assert m.relative(Job(1, model="lm", num_gpus=8))["p100"] == pytest.approx(0.125)


def test_learnt_speedups_need_min_samples_on_two_types_and_use_the_median():
    hist = [RunRecord("u", "train.py", "v100", t) for t in (100, 110, 5000)]  # one outlier
    hist += [("u", "train.py", "k80", t) for t in (400, 420, 440)]
    hist += [("u", "train.py", "p100", 200)] * 2  # too few runs: not learnt
    m = model(min_samples=3).learn(hist)
    j = Job(1, user="u", name="train.py", model="resnet")
    sp = m.speeds(j)
    assert sp["v100"].source == LEARNT and sp["v100"].samples == 3
    assert sp["v100"].value / sp["k80"].value == pytest.approx(420 / 110)  # medians, not means
    assert sp["p100"].source == MATRIX
    assert model(min_samples=4).learn(hist).speed(j, "v100").source == MATRIX
    only_one = model().learn([("u", "x", "v100", 10.0)] * 5)
    assert only_one.speed(Job(1, user="u", name="x"), "v100").source == DEFAULT
    # other users' runs of the same name teach nothing about this one
    assert m.speed(Job(1, user="w", name="train.py", model="resnet"), "v100").source == MATRIX


def test_learn_skips_unknown_types_and_bad_run_times():
    m = model().learn(
        [("u", "n", "a100", 10.0)] * 3
        + [("u", "n", "v100", math.nan)] * 3
        + [("u", "n", "k80", -1.0)] * 3
    )
    assert m.speed(Job(1, user="u", name="n"), "v100").source == DEFAULT


@pytest.mark.parametrize(
    "text,msg",
    [
        ("kind,v100,a100\nx,1,2\n", "unknown GPU types \\['a100'\\]"),
    ],
)
def test_a_model_refuses_a_matrix_with_unknown_types(text, msg):
    with pytest.raises(ValueError, match=msg):
        ThroughputModel(SPEEDS, parse_matrix_csv(text))


@pytest.mark.parametrize(
    "text,msg",
    [
        ("kind,v100,k80\nx,1,0\n", r"m.csv, line 2: x on k80: '0'; allowed: a throughput above 0"),
        ("kind,v100,k80\nx,-2,1\n", r"line 2: x on v100: '-2'"),
        ("kind,v100,k80\nx,nan,1\n", r"line 2: x on v100: 'nan'"),
        ("kind,v100,k80\nx,1,\n", r"line 2: x on k80: ''"),
        ("kind,v100,k80\nx,1\n", r"line 2: 2 cells; the header has 3"),
        ("kind,v100,k80\nx,1,1\nx,2,2\n", r"line 3: kind 'x' given twice"),
        ("kind,v 100\nx,1\n", r"line 1: GPU type 'v 100' is not a type name"),
        ("kind\nx\n", r"line 1: no GPU type columns"),
        ("", r"m.csv: empty"),
    ],
)
def test_matrix_csv_errors_name_the_line_and_cell(text, msg):
    with pytest.raises(ValueError, match=msg):
        parse_matrix_csv(text, "m.csv")


def test_gavel_loader_rows_and_zero_entries():
    data = {
        t: {"('A', 1)": {"null": a}, "('A', 2)": {"null": b}, "('B', 1)": {"null": 1.0}}
        for t, a, b in (("k80", 1.0, 0.0), ("v100", 4.0, 6.0), ("k80_unconsolidated", 1, 1))
    }
    m = matrix_from_gavel(data)
    assert set(m) == {"A@1", "B@1"}  # A on 2 K80s is 0: left out, 2-GPU jobs take A@1
    assert set(m["A@1"]) == {"k80", "v100"}
    assert kinds_of(m) == ["A", "B"]
    tm = ThroughputModel.from_matrix(m)
    assert tm.relative(Job(1, model="A", num_gpus=2))["k80"] == pytest.approx(0.25)
    assert tm.type_speed("v100") == pytest.approx(1.0) and tm.type_speed("k80") == pytest.approx(
        0.5
    )
    with pytest.raises(ValueError, match="no entry"):
        matrix_from_gavel({"k80": {"('A', 1)": {"null": 1}}, "v100": {}})
    with pytest.raises(ValueError, match="not \\('MODEL', N\\)"):
        matrix_from_gavel({"k80": {"A": {"null": 1}}})
    with pytest.raises(ValueError, match="throughput 'x' is not a number"):
        matrix_from_gavel({"k80": {"('A', 1)": {"null": "x"}}})


@pytest.mark.skipif(not GAVEL.is_file(), reason="shared traces not present")
def test_gavel_file_speedups_match_the_published_ranges():
    m = ThroughputModel.from_matrix(matrix_from_gavel(json.loads(GAVEL.read_text())))
    assert m.types == ("k80", "p100", "v100")
    r50 = m.relative(Job(1, model="ResNet-50 (batch size 64)"))
    assert 1 / r50["k80"] == pytest.approx(4.395 / 0.619, rel=1e-3)
    rec = m.best_types(Job(1, model="Recommendation (batch size 1024)"))
    assert rec[0] == "p100" and rec[-1] == "v100"  # V100 is the slowest for it (0.66×)


def _site(tmp_path: Path, matrix_text: str | None, extra: str = "") -> Path:
    text = (REPO / "site-configs" / "university-small.toml").read_text()
    if matrix_text is not None:
        (tmp_path / "speeds.csv").write_text(matrix_text)
        text += '\n[throughput]\nmatrix = "speeds.csv"\n' + extra
    p = tmp_path / "site.toml"
    p.write_text(text)
    return p


def test_site_config_reads_the_matrix_relative_to_the_config(tmp_path):
    cfg = load_config(_site(tmp_path, "kind,a100,v100\nresnet,4,1\n", "min_samples = 5\n"))
    assert cfg.throughput.matrix_rows == {"resnet": {"a100": 4.0, "v100": 1.0}}
    m = ThroughputModel.from_config(cfg)
    assert m.min_samples == 5 and m.type_speed("v100") == 0.5
    assert m.relative(Job(1, model="resnet"))["v100"] == pytest.approx(0.25)
    assert load_config(_site(tmp_path, None)).throughput.matrix_rows is None


@pytest.mark.parametrize(
    "text,msg",
    [
        (
            "kind,a100,h100\nx,1,1\n",
            r"throughput: .*speeds.csv: unknown GPU types \['h100'\]; allowed: \['a100', 'v100'\]",
        ),
        ("kind,a100,v100\nx,1,0\n", r"throughput: .*speeds.csv, line 2: x on v100: '0'"),
    ],
)
def test_site_config_matrix_errors(tmp_path, text, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        load_config(_site(tmp_path, text))
    assert len(e.value.problems) == 1


def test_site_config_min_samples_range(tmp_path):
    with pytest.raises(
        ConfigError, match=r"throughput.min_samples: got 0; allowed: a whole number from 1"
    ):
        load_config(_site(tmp_path, "kind,a100,v100\nx,1,1\n", "min_samples = 0\n"))


def test_config_check_prints_the_per_type_table(tmp_path):
    res = CliRunner().invoke(
        app, ["config", "check", str(_site(tmp_path, "kind,a100,v100\nresnet,4,1\n"))]
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    i = next(
        k for k, line in enumerate(lines) if line.startswith("throughput model (matrix speeds.csv")
    )
    assert lines[i + 1].split() == ["type", "speed", "evidence"]
    assert lines[i + 2].split()[:3] == ["a100", "1", "1"] and "matrix rows" in lines[i + 2]
    assert all(len(line) < 80 for line in lines[i : i + 4])
