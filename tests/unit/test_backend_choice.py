"""``[slurm] backend`` and ``--backend``: one setting picks the Slurm backend of the filter
service, the prioritizer, doctor and explain, each built through ``get_backend``; a pyslurm that
cannot run here is an error that names the releases and how to build it (no traceback)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

import slurm_dl.slurm as slurm_edge
from slurm_dl.cli.backend_opt import backend_name
from slurm_dl.cli.main import app
from slurm_dl.core.config import parse_config
from slurm_dl.core.doctor import Facts, diagnose
from slurm_dl.core.errors import ConfigError, SlurmNotInstalledError
from slurm_dl.slurm.pyslurm_backend import not_installed, pyslurm_tag, release_mismatch

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"
PART = {
    "gpu_types": [{"name": "h100"}],
    "node_groups": [{"name": "g", "nodes": "gpu[01-02]", "gpus_per_node": 8, "gpu_type": "h100"}],
}
NO_PYSLURM = importlib.util.find_spec("pyslurm") is None


def test_the_default_is_cli_and_pyslurm_is_chosen_in_the_slurm_section():
    assert parse_config(PART).slurm.backend == "cli"
    assert parse_config({**PART, "slurm": {"backend": "pyslurm"}}).slurm.backend == "pyslurm"


def test_an_unknown_backend_is_refused_with_the_allowed_names():
    with pytest.raises(ConfigError) as e:
        parse_config({**PART, "slurm": {"backend": "slurmrestd"}})
    assert "slurm.backend" in str(e.value) and "'cli'" in str(e.value)
    assert "'pyslurm'" in str(e.value)


def test_the_flag_overrides_the_config():
    cfg = parse_config({**PART, "slurm": {"backend": "pyslurm"}})
    assert backend_name(cfg, None) == "pyslurm"
    assert backend_name(cfg, "cli") == "cli"
    assert backend_name(None, None) == "cli"


def test_the_errors_name_both_releases_and_how_to_build():
    assert pyslurm_tag("22.05") == "22.5" and pyslurm_tag("24.11") == "24.11"
    text = not_installed("22.05")
    assert text.startswith("pyslurm is not installed (Slurm here is 22.05):")
    assert "build pyslurm 22.5.x" in text and "'Slurm backend'" in text
    assert "--backend cli" in text
    assert "Slurm did not answer" in not_installed(None)
    mismatch = release_mismatch("24.11.0", "22.05")
    assert "pyslurm 24.11.0 is installed, built for Slurm 24.11" in mismatch
    assert "Slurm here is 22.05" in mismatch
    for t in (text, mismatch, not_installed(None), release_mismatch(None, "26.05")):
        first, *rest = t.splitlines()
        assert len("error: pyslurm backend: " + first) <= 80  # as the command prints it
        assert all(len(line) <= 80 for line in rest)


class Recorded(SlurmNotInstalledError):
    pass


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, dict]]:
    """get_backend, recording what each front-end asks for; a pyslurm one then stops the
    command with the error a missing pyslurm gives (so no Slurm is needed, and the clean exit
    is checked too)."""
    calls: list[tuple[str, dict]] = []

    real = slurm_edge.get_backend

    def record(name: str = "cli", env=None, **options):
        calls.append((name, options))
        if name == "cli":
            return real(name, env, **options)
        raise Recorded("pyslurm backend: recorded")

    monkeypatch.setattr(slurm_edge, "get_backend", record)
    return calls


def _run(args: list[str]):
    result = CliRunner().invoke(app, args)
    assert "Traceback" not in result.output, result.output
    return result


def test_prioritizer_builds_through_get_backend(recorded, tmp_path):
    db = f"sqlite:///{tmp_path / 'p.db'}"
    for cmd in (["once", "--dry-run"], ["run", "--max-cycles", "1"]):
        r = _run(
            ["prioritizer", *cmd, "-c", str(CONFIG), "--db", db, "--init", "--backend", "pyslurm"]
        )
        assert r.exit_code == 1 and "error: pyslurm backend: recorded" in r.output
    assert [n for n, _ in recorded] == ["pyslurm", "pyslurm"]
    assert all(o == {"topology_ttl_s": 60.0} for _, o in recorded)


def test_prioritizer_reads_the_config_without_the_flag(recorded, tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text(CONFIG.read_text() + '\n[slurm]\nbackend = "pyslurm"\n')
    r = _run(
        ["prioritizer", "once", "-c", str(cfg), "--db", f"sqlite:///{tmp_path / 'p.db'}", "--init"]
    )
    assert r.exit_code == 1 and recorded[0][0] == "pyslurm"


def test_filter_service_builds_through_get_backend(recorded, tmp_path):
    r = _run(
        [
            "filter",
            "serve",
            "-c",
            str(CONFIG),
            "--socket",
            str(tmp_path / "s"),
            "--backend",
            "pyslurm",
        ]
    )
    assert r.exit_code == 1 and recorded == [("pyslurm", {"topology_ttl_s": 60.0})]
    assert not (tmp_path / "s").exists()


def test_explain_builds_through_get_backend(recorded, tmp_path):
    r = _run(
        [
            "explain",
            "7",
            "-c",
            str(CONFIG),
            "--db",
            f"sqlite:///{tmp_path / 'e.db'}",
            "--backend",
            "pyslurm",
        ]
    )
    assert r.exit_code == 1 and recorded[0][0] == "pyslurm"


def test_doctor_builds_through_get_backend_and_says_which(recorded, monkeypatch):
    import slurm_dl.cli.doctor_cmd as doctor_cmd

    monkeypatch.setattr(doctor_cmd, "_slurm", lambda f: setattr(f, "slurm_release", "22.05"))
    facts = doctor_cmd.gather(CONFIG, "sqlite:////nonexistent/x.db", None, None, "pyslurm")
    # pyslurm failed: the rest of doctor's reads go through the cli backend (recorded too)
    assert [n for n, _ in recorded] == ["pyslurm", "cli"]
    assert facts.backend == "pyslurm" and facts.backend_error == "recorded"
    found = {x.check: x for x in diagnose(facts)}["Slurm backend"]
    assert found.status == "fail" and found.detail == "pyslurm: recorded"


def test_doctor_says_which_backend_runs():
    ok = Facts(config_path="site.toml", slurm_release="22.05", backend="pyslurm")
    ok.backend_detail = "22.5.3"
    found = {x.check: x for x in diagnose(ok)}["Slurm backend"]
    assert found.status == "ok" and found.detail.startswith("pyslurm 22.5.3")
    cli = {x.check: x for x in diagnose(Facts(config_path="site.toml"))}["Slurm backend"]
    assert cli.status == "ok" and cli.detail.startswith("cli")


def test_a_bad_flag_is_a_usage_error():
    r = _run(["prioritizer", "once", "-c", str(CONFIG), "--backend", "rest"])
    assert r.exit_code == 2 and "allowed: cli, pyslurm" in r.output


@pytest.mark.skipif(not NO_PYSLURM, reason="pyslurm is installed here")
def test_a_missing_pyslurm_stops_the_daemon_with_the_fix(tmp_path):
    """The real guard, no stand-in: this machine's Python has no pyslurm."""
    db = f"sqlite:///{tmp_path / 'p.db'}"
    r = _run(
        ["prioritizer", "once", "-c", str(CONFIG), "--db", db, "--init", "--backend", "pyslurm"]
    )
    assert r.exit_code == 1
    assert "error: pyslurm backend: pyslurm is not installed" in r.output
    assert "\n  build " in r.output or "no pyslurm exists" in r.output
