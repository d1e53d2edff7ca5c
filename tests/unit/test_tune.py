"""slurm-dl tune: its pure parts (parameters, candidates, the split, the choice, the proposed
file) and, on a small trace, the command from its flags to the proposal and the report."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.cli.config_file import load_config
from slurm_dl.sim import tune as T

BASE = {
    "gpu_types": [{"name": "gpu", "memory_gb": 80}],
    "node_groups": [{"name": "gpu", "nodes": "n[1-2]", "gpus_per_node": 4, "gpu_type": "gpu"}],
}
TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 4},{i * 60},{300 + 97 * (i % 17)},{'abc'[i % 3]}\n" for i in range(200)
)


@pytest.fixture()
def known():
    return T.known_settings(BASE)


def test_a_param_takes_lists_scalars_and_none(known):
    p = T.parse_param("policy.las.thresholds_gpu_s=3600,36000:100000", known)
    assert p.values == ([3600, 36000], [100000])  # a list setting: one item is a one-item list
    s = T.parse_param("policy.las.starvation_factor=none:4:2.5", known)
    assert s.values == (None, 4, 2.5) and s.raw == ("none", "4", "2.5")


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "policy.las.thresholdz=1",
            "no such setting in the site config;\n  did you mean policy.las.thresholds_gpu_s?",
        ),
        ("policy.las.starvation_factor=", "an empty value"),
        ("policy.las.starvation_factor=1::2", "an empty value"),
        ("policy.las.starvation_factor=2:2", "given twice"),
        ("policy.las.starvation_factor", "write KEY=VALUE"),
    ],
)
def test_a_bad_param_is_named(known, text, words):
    with pytest.raises(T.TuneError) as e:
        T.parse_param(text, known)
    assert words in str(e.value)


@pytest.mark.parametrize(
    "text, words",
    [
        ("policy.las.thresholds_gpu_s=100,10", "strictly increasing"),
        ("policy.las.starvation_factor=-1:2", "starvation_factor=-1: the site config refuses it"),
    ],
)
def test_a_value_the_config_refuses_is_named_before_any_replay(known, text, words):
    with pytest.raises(T.TuneError) as e:
        T.check_candidates(BASE, [T.parse_param(text, known)])
    assert words in str(e.value)


def test_the_grid_is_the_product_with_labels(known):
    params = [
        T.parse_param("policy.las.thresholds_gpu_s=3600,36000:100000,3000000", known),
        T.parse_param("policy.las.starvation_factor=none:4", known),
    ]
    points = T.check_candidates(BASE, params)
    assert len(points) == 4 and len(set(points)) == 4
    assert points[0].label == "thresholds_gpu_s=3600,36000 starvation_factor=none"
    assert points[3].settings == {
        "policy.las.thresholds_gpu_s": [100000, 3000000],
        "policy.las.starvation_factor": 4,
    }
    cfg = T.candidate_config(BASE, params, points[3].values)
    assert (
        list(cfg.policy.las.thresholds_gpu_s) == [100000.0, 3000000.0]
        and cfg.policy.las.starvation_factor == 4
    )


def test_the_split_is_in_time_and_refuses_a_short_history():
    cut, before, after = T.split_time([float(i) for i in range(200)], 0.5)
    assert cut == pytest.approx(99.5) and (before, after) == (100, 100)
    with pytest.raises(T.TuneError, match="too short to split: 30 jobs before the split, 30 after"):
        T.split_time([float(i) for i in range(60)], 0.5)
    with pytest.raises(T.TuneError, match="between 0 and 1"):
        T.split_time([1.0, 2.0], 1.0)


def test_the_fewest_jobs_per_part_is_a_setting_with_one_default() -> None:
    sixty = [float(i) for i in range(60)]
    assert T.split_time(sixty, 0.5, min_jobs=30)[1:] == (30, 30)
    with pytest.raises(T.TuneError, match="each part needs 31 .*a lower --min-jobs"):
        T.split_time(sixty, 0.5, min_jobs=31)
    with pytest.raises(T.TuneError, match=f"each part needs {T.MIN_JOBS_PER_PART} "):
        T.split_time(sixty, 0.5)
    out = CliRunner().invoke(app, ["tune", "--help"], terminal_width=80).output
    flat = " ".join(out.split())
    assert f"at least --min-jobs jobs (default {T.MIN_JOBS_PER_PART})" in flat
    assert "--min-jobs <int range>" in flat and f"[default: {T.MIN_JOBS_PER_PART};" in flat


def test_tune_runs_a_short_history_with_a_lower_min_jobs(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("".join(TRACE.splitlines(keepends=True)[:41]))  # 40 jobs: 20 per part
    args = ["tune", "--trace", str(trace), "--format", "csv", "--nodes", "2"]
    args += ["--param", "policy.las.starvation_factor=none:2", "--no-fairness", "--jobs", "1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1 and "each part needs 50" in r.output, r.output
    r = CliRunner().invoke(app, [*args, "--min-jobs", "20", "--json"])
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["n_in"], json.loads(r.stdout)["n_out"]) == (20, 20)


def test_the_choice_keeps_the_constraints_and_the_grid_order_on_ties():
    a, b, c = (T.Point((i,), f"p{i}", {}) for i in range(3))
    results = {
        a: {"avg_jct_s": 10.0, "max_rho": 2.0},
        b: {"avg_jct_s": 12.0, "max_rho": 1.1},
        c: {"avg_jct_s": 12.0, "max_rho": 1.0},
    }
    best, ranked = T.choose(results, "avg_jct_s", 1)
    assert best is a and ranked == [a, b, c]
    best, _ = T.choose(results, "avg_jct_s", 1, [T.parse_constraint("worst_rho<=1.2")])
    assert best is b
    best, _ = T.choose(results, "avg_jct_s", 1, [T.parse_constraint("worst_rho<0.5")])
    assert best is None
    best, _ = T.choose(
        {a: {"utility_fraction": 0.5}, b: {"utility_fraction": 0.7}}, "utility_fraction", -1
    )
    assert best is b  # a figure to raise


@pytest.mark.parametrize(
    "text, words",
    [
        ("rho<=1", "not a figure"),
        ("worst_rho<=x", "not a number"),
        ("worst_rho", "write FIGURE<=NUMBER"),
    ],
)
def test_a_bad_constraint_is_named(text, words):
    with pytest.raises(T.TuneError, match=words):
        T.parse_constraint(text)


def test_sensitivity_is_the_mean_over_the_other_settings(known):
    params = [
        T.parse_param("policy.las.starvation_factor=2:4", known),
        T.parse_param("policy.fairshare.lease_seconds=600:3600", known),
    ]
    points = T.check_candidates(BASE, params)
    results = {
        p: {"avg_jct_s": float(10 * (i + 1))} for i, p in enumerate(points)
    }  # 10, 20, 30, 40
    sens = T.sensitivity(params, results, "avg_jct_s", 1)
    assert sens["policy.las.starvation_factor"] == [("2", 15.0), ("4", 35.0)]
    assert sens["policy.fairshare.lease_seconds"] == [("600", 20.0), ("3600", 30.0)]


def test_the_proposed_file_keeps_comments_and_changes_only_the_settings():
    text = "# our site\n[policy.las]\n# tuned by hand in 2025\nthresholds_gpu_s = [1, 2]\nstarvation_factor = 3\n"
    out = T.proposed_text(
        text,
        {
            "policy.las.thresholds_gpu_s": (5, 6),
            "policy.las.starvation_factor": None,
            "policy.fairshare.lease_seconds": 600,
        },
    )
    assert "# our site" in out and "# tuned by hand in 2025" in out
    assert "thresholds_gpu_s = [5, 6]" in out and "starvation_factor" not in out
    assert "[policy.fairshare]" in out and "lease_seconds = 600" in out
    diff = T.unified_diff(text, out, "site.toml")
    assert "-thresholds_gpu_s = [1, 2]" in diff and "+thresholds_gpu_s = [5, 6]" in diff


def test_tune_proposes_judges_and_writes_on_a_small_history(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    site = tmp_path / "site.toml"
    site.write_text(
        '# the site\n[[gpu_types]]\nname = "gpu"\nmemory_gb = 80\n\n[[node_groups]]\nname = "gpu"\n'
        'nodes = "n[1-2]"\ngpus_per_node = 4\ngpu_type = "gpu"\n\n[policy.las]\n'
        "thresholds_gpu_s = [60]  # too low: every job demoted at once\n"
    )
    out = tmp_path / "proposed.toml"
    r = CliRunner().invoke(
        app,
        [
            "tune",
            "--trace",
            str(trace),
            "--format",
            "csv",
            "--config",
            str(site),
            "--param",
            "policy.las.thresholds_gpu_s=600:3600,36000",
            "--param",
            "policy.las.starvation_factor=none:2",
            "--jobs",
            "1",
            "--output",
            str(out),
            "--report",
            str(tmp_path / "rep"),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["n_in"], doc["n_out"], len(doc["candidates"])) == (100, 100, 4)
    # the proposal is the best candidate on the earlier part, and is judged on the later one
    best = min(doc["candidates"], key=lambda c: c["in_sample"])
    assert doc["proposal"]["label"] == best["label"]
    assert all(c["out_of_sample"] > 0 for c in doc["candidates"])
    assert doc["proposal_vs_current_out"] == pytest.approx(
        doc["proposal"]["out_of_sample"] / doc["current"]["out_of_sample"]
    )
    cfg = load_config(out)  # the proposal is a valid site config, the site's own plus the change
    want = [float(x) for x in best["settings"]["policy.las.thresholds_gpu_s"]]
    assert list(cfg.policy.las.thresholds_gpu_s) == want and cfg.total_gpus == 8
    assert out.read_text().startswith("# the site") and "# too low" in out.read_text()
    assert doc["current"]["in_sample"] > doc["proposal"]["in_sample"]
    page = (tmp_path / "rep" / "index.html").read_text()
    assert 'id="fig-objective"' in page and page.count('class="fig-sensitivity"') == 2
    assert best["label"] in page and not any(math.isnan(c["in_sample"]) for c in doc["candidates"])


@pytest.mark.parametrize(
    "args, words",
    [
        (["--param", "policy.las.nope=1"], "no such setting"),
        (["--param", "policy.las.starvation_factor=-1"], "refuses it"),
        (
            ["--param", "policy.las.starvation_factor=1", "--objective", "speed"],
            "--objective 'speed'",
        ),
        ([], "give at least one --param"),
    ],
)
def test_bad_input_fails_before_the_trace_is_read(tmp_path, args, words):
    # the trace does not exist: each error must come before it is read
    r = CliRunner().invoke(
        app,
        ["tune", "--trace", str(tmp_path / "none.csv"), "--format", "csv", "--nodes", "2", *args],
    )
    assert r.exit_code != 0 and words in r.output and "Traceback" not in r.output


def test_tune_keeps_the_current_settings_when_no_candidate_beats_them(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    out = tmp_path / "proposed.toml"
    # the lease plays no part in LAS: every candidate ties with the current settings
    r = CliRunner().invoke(
        app,
        [
            "tune",
            "--trace",
            str(trace),
            "--format",
            "csv",
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--param",
            "policy.fairshare.lease_seconds=600:7200",
            "--no-fairness",
            "--jobs",
            "1",
            "--output",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "proposed (*): current" in r.stdout and "nothing to change" in r.stdout
    assert out.read_text() == ""  # no site config given: nothing to add to the defaults
