"""The files under deploy/: systemd units whose commands the CLI accepts, the environment file
they read (one that shells can source too), alert rules and a dashboard that name only series
the daemons export."""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from slurm_dl.cli.main import app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def unit(path: Path) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # keep key case
    cp.read(path)
    return cp


def test_one_unit_per_daemon() -> None:
    assert [u.name for u in UNITS] == [
        "slurm-dl-filter.service",
        "slurm-dl-gpu-agent.service",
        "slurm-dl-prioritizer.service",
    ]


def test_filter_unit_owns_its_socket_dir_and_starts_before_slurmctld() -> None:
    u = unit(DEPLOY / "systemd" / "slurm-dl-filter.service")
    assert "slurmctld.service" in u["Unit"]["Before"].split()
    assert u["Service"]["RuntimeDirectory"] == "slurm-dl"
    assert "--socket /run/slurm-dl/filter.sock" in u["Service"]["ExecStart"]
    assert "slurmctld.service" in u["Install"]["WantedBy"].split()


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_unit_commands_are_ones_the_cli_accepts(path: Path) -> None:
    u = unit(path)
    argv = shlex.split(u["Service"]["ExecStart"])
    assert argv[0] == "/usr/local/bin/slurm-dl"
    args = [a for a in argv[1:] if not a.startswith("$")]
    sub = [a for a in args if not a.startswith("-")][:2]
    sub = sub[:2] if sub[0] in ("filter", "prioritizer") else sub[:1]
    help_text = CliRunner().invoke(app, [*sub, "--help"], terminal_width=200).output
    for opt in (a for a in args if a.startswith("--")):
        assert opt in help_text, (path.name, opt)
    for opt in ("--log-level", "--log-format"):
        assert opt in help_text, (path.name, opt)
    assert u["Service"]["EnvironmentFile"] == "-/etc/default/slurm-dl"


ENV_FILE = DEPLOY / "systemd" / "slurm-dl.env"
# VAR=word or VAR="words": what systemd's EnvironmentFile= and a shell read alike (no inner
# quotes, expansions or escapes, which the two treat differently)
_PORTABLE = re.compile(r'^[A-Z_][A-Z0-9_]*=(?:[^\s"\'$`\\#]*|"[^"\'$`\\]*")$')


def _assignments(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_environment_file_reads_the_same_in_systemd_and_a_shell() -> None:
    lines = _assignments(ENV_FILE.read_text())
    assert lines and all(_PORTABLE.match(ln) for ln in lines), lines
    # the commented examples too, once uncommented
    examples = [
        ln.lstrip("# ").removeprefix("e.g. ")
        for ln in ENV_FILE.read_text().splitlines()
        if re.match(r"^#\s*(e\.g\. )?[A-Z_]+=", ln)
    ]
    assert examples and all(_PORTABLE.match(ln) for ln in examples), examples


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_a_shell_can_source_the_environment_file() -> None:
    out = subprocess.run(
        ["bash", "-c", 'set -a; . "$1" && env -0', "bash", str(ENV_FILE)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0 and not out.stderr, out.stderr
    env = dict(kv.split("=", 1) for kv in out.stdout.split("\0") if "=" in kv)
    assert env["SLURM_DL_FILTER_ARGS"] == "--log-format text"
    assert env["SLURM_DL_PRIORITIZER_ARGS"] == "--log-format text"
    assert env["SLURM_DL_GPU_AGENT_ARGS"] == ""
    # each unit's ExecStart names only variables the file sets (or leaves to the default)
    for path in UNITS:
        for var in re.findall(r"\$(\w+)", unit(path)["Service"]["ExecStart"]):
            assert var in env, (path.name, var)


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_systemd_parses_the_unit(path: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    bad = [
        line
        for line in out.stderr.splitlines()
        if path.name in line
        and ("Unknown" in line or "Invalid" in line or "Failed to parse" in line)
    ]
    assert not bad, out.stderr


def _exported_names() -> set[str]:
    from jobsubmit.metrics import FilterMetrics
    from prioritizer.metrics import PrioritizerMetrics

    names: set[str] = set()
    for m in (FilterMetrics(), PrioritizerMetrics()):
        for fam in m.registry.collect():
            names.update(s.name for s in fam.samples)
            names.add(fam.name)
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(
                fam.type, ()
            )
            names.update(fam.name + s for s in suffixes)
    return names


def _referenced(expr: str) -> set[str]:
    return set(re.findall(r"\bslurm_dl_[a-z_]+", expr))


def test_alert_rules_name_exported_series() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "slurm-dl-alerts.yml").read_text())
    exported = _exported_names()
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    names = {a["alert"] for a in alerts}
    assert {"SlurmDLPrioritizerNoCycle", "SlurmDLFilterFailingOpen"} <= names
    assert "SlurmDLPrioritizerUpdatesRefused" in names  # Slurm refuses the daemon's changes
    assert {"SlurmDLNoLeader", "SlurmDLTwoLeaders"} <= names  # the leader lease
    assert {"SlurmDLTwoPrioritizers", "SlurmDLGpuAgentFilesStale", "SlurmDLIdleDetectionOff"} <= (
        names
    )  # two daemons acting at once; gpu-agent files too old for idle detection
    for a in alerts:
        missing = _referenced(a["expr"]) - exported
        assert not missing, (a["alert"], missing)
        assert a["annotations"]["summary"] and a["labels"]["severity"]


def test_dashboard_names_exported_series() -> None:
    dash = json.loads((DEPLOY / "grafana" / "slurm-dl-dashboard.json").read_text())
    exported = _exported_names()
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    for e in exprs:
        assert not (_referenced(e) - exported), e


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_units_are_hardened(path: Path) -> None:
    """systemd's own measure of what a unit may do (0 locked down … 10 unrestricted); before the
    hardening: filter and prioritizer 8.6, gpu-agent 9.2. The gpu-agent keeps its devices."""
    out = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout + out.stderr)
    if m is None and "offline" in out.stderr:
        pytest.skip("this systemd-analyze cannot judge a unit file offline (systemd < 250)")
    assert m, out.stdout + out.stderr
    bound = 3.0 if "gpu-agent" in path.name else 2.0
    assert float(m.group(1)) <= bound, out.stdout


def test_units_documentation_is_installed_where_they_point() -> None:
    admins = (DEPLOY.parent / "docs" / "admins.md").read_text()
    assert "install -D -m 0644 -t /usr/share/doc/slurm-dl docs/*.md" in admins
    for path in UNITS:
        for target in unit(path)["Unit"]["Documentation"].split():
            assert target.startswith("file:///usr/share/doc/slurm-dl/"), (path.name, target)
            assert (DEPLOY.parent / "docs" / target.rsplit("/", 1)[1]).is_file(), (
                path.name,
                target,
            )


def test_filter_unit_is_ready_when_its_socket_listens() -> None:
    u = unit(DEPLOY / "systemd" / "slurm-dl-filter.service")
    assert u["Service"]["Type"] == "notify" and u["Service"]["NotifyAccess"] == "main"
