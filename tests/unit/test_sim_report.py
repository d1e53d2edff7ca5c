"""simulate --report (one self-contained HTML file) and --config given twice (each config's own
restart cost, side by side in the table, the JSON and the report)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.sim.whatif.setup import preemption_cost
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import Job
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.reports.metrics import summarize
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.reports.report import jct_cdf, utilisation_series, wait_by_gpus
from slurm_dl.sim.engine.state import PreemptionCost

ROOT = Path(__file__).resolve().parents[2]
TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 2},{i * 30},{200 + 37 * i},{'ab'[i % 2]}\n" for i in range(30)
)
SHAPE = ["--nodes", "1", "--gpus-per-node", "2"]


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(TRACE)
    return p


def _configs(tmp_path: Path) -> tuple[Path, Path]:
    """The testbed's site config as it is (restart delay: the 30 s default) and a proposal
    that only makes a preemption's restart cost 600 s."""
    text = (ROOT / "site-configs" / "testbed.toml").read_text()
    cur, prop = tmp_path / "current.toml", tmp_path / "proposed.toml"
    cur.write_text(text)
    assert "[preemption]\n" in text
    prop.write_text(
        text.replace("[preemption]\n", "[preemption]\nrestart_delay_seconds = 600\n", 1)
    )
    return cur, prop


class _Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.figure_parts: dict[str, list[str]] = {}
        self.rows: list[list[str]] = []
        self._fig: str | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "figure":
            self._fig = a.get("id")
            self.figure_parts[self._fig] = []
        elif self._fig and tag in ("polyline", "rect") and "data-series" in a:
            self.figure_parts[self._fig].append(tag)
        if tag == "table":
            self._table = a.get("id")
        if tag == "tr" and self._table == "summary-table":
            self.rows.append([])
        if tag in ("td", "th") and self._table == "summary-table":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "figure":
            self._fig = None
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        if tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _parse(html: str) -> _Dom:
    d = _Dom()
    d.feed(html)
    return d


def assert_self_contained(html: str) -> None:
    """Nothing that a browser would fetch: no script, stylesheet link, image, frame, CSS url()."""
    d = _parse(html)
    assert not [t for t, _ in d.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert not [a for _, a in d.tags if "src" in a or "href" in a]
    assert "url(" not in html and "@import" not in html


def test_report_is_one_self_contained_file_with_every_figure_drawn(tmp_path):
    out_dir = tmp_path / "report"
    args = [
        "simulate",
        "--trace",
        str(_trace(tmp_path)),
        "--format",
        "csv",
        *SHAPE,
        "--policy",
        "fifo",
        "--policy",
        "las",
        "--no-fairness",
        "--report",
        str(out_dir),
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out_dir.iterdir()) == ["index.html"]
    html = (out_dir / "index.html").read_text()
    assert_self_contained(html)
    d = _parse(html)
    # every figure drew one mark per run (a line, or bars for each run)
    assert set(d.figure_parts) == {
        "fig-jct-cdf",
        "fig-wait-gpus",
        "fig-queue",
        "fig-util",
        "fig-rho",
    }
    for fig in ("fig-jct-cdf", "fig-queue", "fig-util"):
        assert d.figure_parts[fig] == ["polyline", "polyline"], fig
    assert d.figure_parts["fig-wait-gpus"].count("rect") == 4  # 1 and 2 GPUs, two runs
    # --no-fairness: nothing to draw for rho, and it says so instead of showing a number
    assert (
        d.figure_parts["fig-rho"] == []
        and "Worst finish-time fairness (max ρ): no data to draw." in html
    )
    head, *rows = d.rows
    assert head[:2] == ["policy", "jobs"] and [row[0] for row in rows] == ["fifo", "las"]
    assert all(row[1] == "30" and row[-2:] == ["–", "–"] for row in rows)
    assert "Finish-time fairness (ρ, Jain): not computed (--no-fairness)." in html
    assert "t.csv" in html and "1 node x 2 GPUs (2 GPUs)" in html
    doc = json.loads(CliRunner().invoke(app, args[:-2] + ["--json"]).stdout)
    # the table shows the same figures as --json, in the unit of the trace's span (minutes)
    assert head[2] == "mean JCT min" and "Per account: mean wait (minutes)" in html
    assert rows[0][2] == f"{doc['policies']['fifo']['avg_jct_s'] / 60:.2f}"


def test_report_escapes_names_and_marks_an_interrupted_run(tmp_path, monkeypatch):
    import slurm_dl.sim.simulate as sim

    real, calls = sim.run_replay, []

    def flaky(*a, **kw):  # each policy: its shared run and one run per account
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(sim, "run_replay", flaky)
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE.replace(",a\n", ",<b>x&y</b>\n"))
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--format",
            "csv",
            *SHAPE,
            "--policy",
            "fifo",
            "--policy",
            "sjf",
            "--report",
            str(tmp_path / "rep"),
        ],
    )
    assert r.exit_code == 130
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "<b>x&y</b>" not in html and "&lt;b&gt;x&amp;y&lt;/b&gt;" in html
    assert 'id="interrupted"' in html and "Not run:\nsjf." in html


def _sim(policy: str, cost=PreemptionCost()):
    jobs = [
        Job(
            job_id=i,
            num_gpus=1 + i % 3,
            submit_time=i * 40.0,
            duration=300.0 + 50 * i,
            account="ab"[i % 2],
        )
        for i in range(24)
    ]
    res = run_cluster(jobs, ClusterSpec("c", 1, 4), make_ranker(policy), cost)
    return [res]


def test_figures_match_the_summary():
    results = _sim("fifo")
    s = summarize(results)
    xs, ys = jct_cdf(results)
    assert (
        ys[-1] == 1.0
        and all(b >= a for a, b in zip(xs, xs[1:]))
        and all(b >= a for a, b in zip(ys, ys[1:]))
    )
    assert xs[-1] == pytest.approx(max(sj.end_time - sj.submit for sj in results[0].jobs) / 3600)
    t0 = min(sj.submit for sj in results[0].jobs)
    t1 = max(sj.end_time for sj in results[0].jobs)
    _, util = utilisation_series(results, t0, t1, bins=50)
    # no preemption: exact, and its mean over the run is the summary's utilisation
    assert all(0.0 <= u <= 1.0 for u in util)
    assert sum(util) / len(util) == pytest.approx(s["utilization"], rel=1e-9)
    waits = wait_by_gpus(results)
    assert list(waits) == ["1", "2", "3-4"] and sum(n for n, _ in waits.values()) == 24
    ones = [sj.queue_s for sj in results[0].jobs if sj.gpus == 1]
    assert waits["1"][1] == pytest.approx(sum(ones) / len(ones) / 3600)


def test_preemption_cost_comes_from_the_site_config_unless_given(tmp_path):
    cur, prop = _configs(tmp_path)
    assert preemption_cost(None, None, load_config(cur)) == PreemptionCost(30.0, None)
    assert preemption_cost(None, None, load_config(prop)) == PreemptionCost(600.0, None)
    assert preemption_cost("helios", 900.0, load_config(prop)) == PreemptionCost(None, 900.0)
    assert preemption_cost(None, 900.0, load_config(prop)) == PreemptionCost(600.0, 900.0)
    from slurm_dl.core.config import cluster_only, parse_config

    # no --config: the default config's restart delay, as a site that sets none deploys
    assert preemption_cost(None, None, parse_config(cluster_only())) == PreemptionCost(30.0, None)


def test_two_configs_side_by_side_each_with_its_own_restart_cost(tmp_path):
    cur, prop = _configs(tmp_path)
    args = [
        "simulate",
        "--trace",
        str(_trace(tmp_path)),
        "--format",
        "csv",
        *SHAPE,
        "--config",
        str(cur),
        "--config",
        str(prop),
        "--policy",
        "fifo",
        "--policy",
        "las",
    ]
    r = CliRunner().invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert list(doc["configs"]) == ["current.toml", "proposed.toml"]
    assert doc["configs"]["current.toml"]["preemption_cost"] == "30 s"
    assert doc["configs"]["proposed.toml"]["preemption_cost"] == "600 s"
    c, p = (doc["configs"][k]["policies"] for k in ("current.toml", "proposed.toml"))
    assert list(c) == list(p) == ["fifo", "las"]
    # FIFO never preempts: the restart cost changes nothing; LAS preempts and pays it
    assert c["fifo"]["avg_jct_s"] == p["fifo"]["avg_jct_s"]
    assert c["las"]["preemptions"] > 0 and p["las"]["avg_jct_s"] > c["las"]["avg_jct_s"]
    text = CliRunner().invoke(app, args + ["--report", str(tmp_path / "rep")])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines if not ln.startswith("wrote "))  # the path is tmp_path
    assert "  current.toml: 1 node x 2 GPUs (2 GPUs), preemption cost 30 s" in lines
    assert "  proposed.toml: 1 node x 2 GPUs (2 GPUs), preemption cost 600 s" in lines
    i = lines.index("fifo")
    assert [ln.split()[0] for ln in lines[i + 1 : i + 3]] == ["current.toml", "proposed.toml"]
    j = lines.index("las")
    las_rows = {ln.split()[0]: ln.split()[1] for ln in lines[j + 1 : j + 3]}
    assert las_rows == {  # the trace spans under 2 hours: minutes
        "current.toml": f"{c['las']['avg_jct_s'] / 60:.2f}",
        "proposed.toml": f"{p['las']['avg_jct_s'] / 60:.2f}",
    }
    html = (tmp_path / "rep" / "index.html").read_text()
    assert_self_contained(html)
    head, *rows = _parse(html).rows
    assert head[:3] == ["policy", "config", "jobs"]
    assert [r[:2] for r in rows] == [
        ["fifo", "current.toml"],
        ["fifo", "proposed.toml"],
        ["las", "current.toml"],
        ["las", "proposed.toml"],
    ]
    assert re.search(
        r"<td class=\"name\">proposed.toml</td><td class=\"name\">[^<]*</td>"
        r"<td class=\"name\">600 s</td>",
        html,
    )
    # what the admin came for: each config against the current one, and the best rows with why
    las_jct = f"{(p['las']['avg_jct_s'] - c['las']['avg_jct_s']) / c['las']['avg_jct_s']:+.1%}"
    assert re.search(r'<h2 id="changes">Each config against current.toml</h2>', html)
    assert re.search(
        r'<td class="name">las</td><td class="name">proposed.toml</td>\s*<td>'
        + re.escape(las_jct)
        + "</td>",
        html,
    ), las_jct
    assert re.search(
        r'<td class="name">fifo</td><td class="name">proposed.toml</td>\s*<td>\+0\.0%</td>', html
    )
    fastest = min(
        ((k, pol) for k, d in (("current.toml", c), ("proposed.toml", p)) for pol in d),
        key=lambda x: (
            {"current.toml": c, "proposed.toml": p}[x[0]][x[1]]["avg_jct_s"],
            f"{x[1]} @ {x[0]}",
        ),
    )
    assert f"<li><b>{fastest[1]} @ {fastest[0]}</b>: lowest mean JCT" in html


def test_config_labels_tell_same_named_files_apart_and_refuse_one_file_twice(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    text = (ROOT / "site-configs" / "testbed.toml").read_text()
    for d in ("a", "b"):
        (tmp_path / d / "site.toml").write_text(text)
    base = [
        "simulate",
        "--trace",
        str(_trace(tmp_path)),
        "--format",
        "csv",
        *SHAPE,
        "--policy",
        "fifo",
        "--json",
    ]
    r = CliRunner().invoke(
        app,
        base
        + [
            "--config",
            str(tmp_path / "a" / "site.toml"),
            "--config",
            str(tmp_path / "b" / "site.toml"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert list(json.loads(r.stdout)["configs"]) == ["a/site.toml", "b/site.toml"]
    r = CliRunner().invoke(app, base + ["--config", str(tmp_path / "a" / "site.toml")] * 2)
    assert r.exit_code != 0 and "error: --config: the same file is given twice" in r.output


def test_history_import_is_described_in_80_columns_and_in_the_report(tmp_path):
    def job(jid, state="COMPLETED", start=1010, gpus=2, account="phys"):
        return {
            "job_id": jid,
            "account": account,
            "user": "ann",
            "partition": "gpu",
            "name": "train",
            "state": {"current": state, "reason": "None"},
            "time": {
                "submission": 1000 + jid,
                "start": start + jid if start else 0,
                "end": 1200 + 7 * jid if state != "PENDING" else 0,
                "elapsed": 100,
                "limit": 60,
            },
            "tres": {
                "allocated": [{"type": "gres", "name": "gpu", "count": gpus}] if start else [],
                "requested": [{"type": "gres", "name": "gpu", "count": gpus}],
            },
            "steps": [{"step": {"name": "batch"}}, {"step": {"name": "extern"}}],
            "array": {"job_id": 0, "task_id": None},
        }

    doc = {
        "jobs": [job(i, gpus=1 + i % 2, account="ab"[i % 2]) for i in range(1, 13)]
        + [job(50, state="CANCELLED", start=0), job(51, state="PENDING", start=0), job(52, gpus=0)]
    }
    hist = tmp_path / "history.json"
    hist.write_text(json.dumps(doc))
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(hist),
            "--format",
            "sacct-json",
            *SHAPE,
            "--policy",
            "fifo",
            "--report",
            str(tmp_path / "rep"),
        ],
    )
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines if not ln.startswith("wrote ")), lines
    said = " ".join(ln.strip() for ln in lines[:3])
    assert said.startswith(
        "history.json: 12 jobs replayed from 15 records; 30 steps folded into their jobs;"
    )
    assert "1 CPU-only dropped" in said
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "12 jobs replayed from 15 records" in html and "<dd>sacct-json</dd>" in html
    # the history's own figures beside the replay, and each replayed start's distance from it
    assert '<tr class="recorded"><td class="name">recorded</td>' in html
    assert "<th>start error median / p90 s</th>" in html and 'id="recorded-note"' in html


def test_a_report_that_cannot_be_written_fails_before_the_replay(tmp_path):
    (tmp_path / "taken").write_text("")
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(_trace(tmp_path)),
            "--format",
            "csv",
            *SHAPE,
            "--report",
            str(tmp_path / "taken"),
        ],
    )
    assert r.exit_code == 1
    assert [ln for ln in r.output.splitlines() if ln] == [
        f"error: --report: cannot write {tmp_path / 'taken'}: File exists"
    ]


def test_policy_site_replays_each_configs_own_mix(tmp_path):
    cur, prop = _configs(tmp_path)
    text = prop.read_text()
    assert 'mix = "combined"' in text
    prop.write_text(text.replace('mix = "combined"', 'mix = "las"', 1))
    base = [
        "simulate",
        "--trace",
        str(_trace(tmp_path)),
        "--format",
        "csv",
        *SHAPE,
        "--no-fairness",
    ]
    r = CliRunner().invoke(
        app, base + ["--config", str(cur), "--config", str(prop), "--policy", "site", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)["configs"]
    assert list(doc["current.toml"]["policies"]) == ["site: combined"]
    assert list(doc["proposed.toml"]["policies"]) == ["site: las"]
    alone = CliRunner().invoke(app, base + ["--config", str(prop), "--policy", "las", "--json"])
    assert (
        json.loads(alone.stdout)["policies"]["las"] == doc["proposed.toml"]["policies"]["site: las"]
    )
    text = CliRunner().invoke(
        app, base + ["--config", str(cur), "--config", str(prop), "--policy", "site"]
    )
    lines = text.stdout.splitlines()
    i = lines.index("site: current.toml = combined, proposed.toml = las")
    assert [ln.split()[0] for ln in lines[i + 1 : i + 3]] == ["current.toml", "proposed.toml"]
    # without --config: the default config's mix, as a site that sets none deploys
    r = CliRunner().invoke(app, base + ["--policy", "site", "--json"])
    assert r.exit_code == 0, r.output
    assert list(json.loads(r.stdout)["policies"]) == ["site: combined"]
