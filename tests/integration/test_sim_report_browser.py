"""simulate's HTML report in a real browser: headless Chromium (the Debian package, installed by
scripts/setup.sh) opens index.html from a file:// URL with the network cut off; the rendered DOM
holds every figure with one mark per run and no console message; a screenshot (kept in the
test's directory) shows the charts' colours.

No Slurm needed. Skips only where Chromium is not installed — except under CI (``CI`` set),
where that is a failure, as for the live tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.sim.reports.svgchart import PALETTE

ROOT = Path(__file__).resolve().parents[2]
TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 2},{i * 30},{200 + 37 * i},{'abc'[i % 3]}\n" for i in range(30)
)
FIGURES = ("fig-jct-cdf", "fig-wait-gpus", "fig-queue", "fig-util", "fig-rho")


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe:
        return exe
    reason = "chromium is not installed (scripts/setup.sh installs the Debian package)"
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser test, but: {reason}", pytrace=False)
    pytest.skip(reason)


def _browse(exe: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--disable-gpu",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--disable-crash-reporter",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing outside the file can load
        "--enable-logging=stderr",
        "--v=0",
    ]
    if os.geteuid() == 0:
        flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    return subprocess.run(
        [exe, *flags, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HOME": str(tmp_path)},
    )


def _report(tmp_path: Path) -> Path:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    text = (ROOT / "site-configs" / "testbed.toml").read_text()
    (tmp_path / "current.toml").write_text(text)
    (tmp_path / "proposed.toml").write_text(
        text.replace("[preemption]\n", "[preemption]\nrestart_delay_seconds = 600\n")
    )
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--format",
            "csv",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--config",
            str(tmp_path / "current.toml"),
            "--config",
            str(tmp_path / "proposed.toml"),
            "--policy",
            "fifo",
            "--policy",
            "las",
            "--report",
            str(tmp_path / "report"),
        ],
    )
    assert r.exit_code == 0, r.output
    return tmp_path / "report" / "index.html"


def test_report_renders_in_headless_chromium(tmp_path):
    from html.parser import HTMLParser

    exe = _chromium()
    page = _report(tmp_path)
    url = page.resolve().as_uri()
    assert url.startswith("file:///")
    dom = _browse(exe, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console

    class Marks(HTMLParser):
        def __init__(self):
            super().__init__()
            self.fig, self.marks, self.rows, self.external = None, {}, 0, []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "figure":
                self.fig = a.get("id")
                self.marks[self.fig] = set()
            elif self.fig and "data-series" in a:
                self.marks[self.fig].add(a["data-series"])
            if tag == "tr" and a.get("class") == "run":
                self.rows += 1
            if "src" in a or "href" in a or tag in ("script", "link"):
                self.external.append((tag, a))

        def handle_endtag(self, tag):
            if tag == "figure":
                self.fig = None

    m = Marks()
    m.feed(dom.stdout)
    runs = {f"{p} @ {c}" for p in ("fifo", "las") for c in ("current.toml", "proposed.toml")}
    assert m.rows == 4 and not m.external
    assert set(m.marks) == set(FIGURES)
    for fig in FIGURES:  # every figure drew a mark for every run
        assert m.marks[fig] == runs, fig

    shot = tmp_path / "report.png"
    r = _browse(exe, tmp_path, "--window-size=1280,3000", f"--screenshot={shot}", url)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1280, 3000)
        rgb = img.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50  # text, tables and charts, not a blank page
    background = max(colours)[0]
    assert background < 0.97 * 1280 * 3000
    counts = {c: n for n, c in colours}
    for hexcol in PALETTE[:4]:  # each run's colour is on screen (lines and bars)
        want = tuple(int(hexcol[i : i + 2], 16) for i in (1, 3, 5))
        assert counts.get(want, 0) > 100, f"colour {hexcol} hardly drawn"
    print(f"screenshot: {shot}")


def test_tune_report_renders_every_figure_in_headless_chromium(tmp_path):
    from html.parser import HTMLParser

    exe = _chromium()
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,num_gpus,submit_time,duration,account\n"
        + "".join(
            f"{i},{1 + i % 4},{i * 60},{300 + 97 * (i % 17)},{'abc'[i % 3]}\n" for i in range(120)
        )
    )
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
            "policy.las.thresholds_gpu_s=600:3600,36000",
            "--param",
            "policy.las.starvation_factor=none:2",
            "--jobs",
            "1",
            "--report",
            str(tmp_path / "report"),
        ],
    )
    assert r.exit_code == 0, r.output
    url = (tmp_path / "report" / "index.html").resolve().as_uri()
    dom = _browse(exe, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]

    class Figures(HTMLParser):
        def __init__(self):
            super().__init__()
            self.fig, self.marks, self.external = None, [], []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "figure":
                self.fig = a.get("id") or a.get("class")
                self.marks.append([self.fig, set()])
            elif self.fig and "data-series" in a:
                self.marks[-1][1].add(a["data-series"])
            if "src" in a or "href" in a or tag in ("script", "link"):
                self.external.append((tag, a))

        def handle_endtag(self, tag):
            if tag == "figure":
                self.fig = None

    f = Figures()
    f.feed(dom.stdout)
    figs = dict((name, marks) for name, marks in f.marks if name != "fig-sensitivity")
    assert [n for n, _ in f.marks].count("fig-sensitivity") == 2 and not f.external
    assert figs["fig-objective"] == {"tuned on (earlier part)", "judged on (later part)"}
    assert figs["fig-accounts"] == {"current", "proposed"}
    assert all(m == {"tuned on"} for n, m in f.marks if n == "fig-sensitivity")
    assert 'id="proposal"' in dom.stdout
