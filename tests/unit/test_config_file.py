"""One default config path and one absolute default database for every command."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli import config_file
from slurm_dl.cli.config_file import DEFAULT_CONFIG, config_path, find_config, load_config
from slurm_dl.cli.main import app
from slurm_dl.core.config import parse_config
from slurm_dl.core.database_url import DEFAULT_DATABASE_URL, database_url, sqlite_path
from slurm_dl.core.errors import ConfigError
from slurm_dl.testbed.site_toml import with_database_url, with_setting

REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "site-configs" / "testbed.toml"


def test_precedence_flag_then_env_then_default(tmp_path: Path) -> None:
    default = tmp_path / "site.toml"
    default.write_text("")
    env = {"SLURM_DL_CONFIG": "/from/env.toml"}
    assert config_path(Path("/from/flag.toml"), env, default) == Path("/from/flag.toml")
    assert config_path(None, env, default) == Path("/from/env.toml")
    assert config_path(None, {}, default) == default
    assert config_path(None, {"SLURM_DL_CONFIG": ""}, default) == default


def test_no_config_anywhere_names_all_three(tmp_path: Path) -> None:
    missing = tmp_path / "site.toml"
    assert find_config(None, {}, missing) is None
    with pytest.raises(ConfigError) as e:
        config_path(None, {}, missing)
    text = str(e.value)
    assert "--config" in text and "$SLURM_DL_CONFIG" in text and str(missing) in text
    assert DEFAULT_CONFIG == Path("/etc/slurm-dl/site.toml")


def test_default_database_is_absolute_under_the_state_dir() -> None:
    assert DEFAULT_DATABASE_URL == "sqlite:////var/lib/slurm-dl/ledger.db"
    cfg = load_config(TESTBED)
    assert cfg.site.database_url == DEFAULT_DATABASE_URL
    assert database_url(cfg) == DEFAULT_DATABASE_URL
    assert database_url(cfg, "sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert database_url(None) == DEFAULT_DATABASE_URL


@pytest.mark.parametrize(
    "url,path",
    [
        ("sqlite:////var/lib/x.db", "/var/lib/x.db"),
        ("sqlite+pysqlite:////a/b.db?timeout=3", "/a/b.db"),
        ("sqlite:///rel.db", "rel.db"),
        ("sqlite://", ""),
        ("sqlite:///:memory:", ""),
        ("postgresql+psycopg://u@h/db", None),
    ],
)
def test_sqlite_path(url: str, path: str | None) -> None:
    assert sqlite_path(url) == path


def test_config_refuses_a_relative_sqlite_path() -> None:
    base = tomllib.loads(TESTBED.read_text())
    with pytest.raises(ConfigError) as e:
        parse_config({**base, "site": {"name": "x", "database_url": "sqlite:///ledger.db"}})
    assert "site.database_url" in str(e.value) and "absolute" in str(e.value)
    ok = parse_config(
        {**base, "site": {"name": "x", "database_url": "postgresql+psycopg://u@h/db"}}
    )
    assert ok.site.database_url.startswith("postgresql")


def test_with_database_url_sets_or_adds_the_key(tmp_path: Path) -> None:
    text = TESTBED.read_text()
    out = with_database_url(text, "sqlite:////tb/ledger.db")
    assert tomllib.loads(out)["site"] == {
        "name": "testbed",
        "database_url": "sqlite:////tb/ledger.db",
    }
    again = with_database_url(out, "sqlite:////other/l.db")
    assert tomllib.loads(again)["site"]["database_url"] == "sqlite:////other/l.db"
    assert (
        tomllib.loads(with_database_url("x = 1\n", "sqlite://"))["site"]["database_url"]
        == "sqlite://"
    )


def test_with_setting_touches_only_its_own_section() -> None:
    text = TESTBED.read_text()
    out = with_setting(text, "filter", "socket", "/tb/filter.sock")
    doc, before = tomllib.loads(out), tomllib.loads(text)
    assert doc["filter"] == {**before["filter"], "socket": "/tb/filter.sock"}
    assert {k: v for k, v in doc.items() if k != "filter"} == {
        k: v for k, v in before.items() if k != "filter"
    }
    two = '[a]\nx = "1"\n\n[[node_groups]]\nx = "2"\n# x = "3"\n'
    assert tomllib.loads(with_setting(two, "node_groups", "y", "4"))["node_groups"] == [
        {"x": "2", "y": "4"}
    ]
    assert tomllib.loads(with_setting(two, "a", "x", "5")) == {
        "a": {"x": "5"},
        "node_groups": [{"x": "2"}],
    }
    assert tomllib.loads(with_setting(two, "b", "x", "6"))["b"] == {"x": "6"}


def test_commands_use_the_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --config and $SLURM_DL_CONFIG, the CLIs read /etc/slurm-dl/site.toml (patched here)."""
    monkeypatch.delenv("SLURM_DL_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./site-configs to fall back on
    missing = tmp_path / "etc-site.toml"
    monkeypatch.setattr(config_file, "DEFAULT_CONFIG", missing)
    runner = CliRunner()
    for argv in (
        ["filter", "check", "--", "--gpus=1", "-t", "10"],
        ["explain", "1"],
        ["prioritizer", "once"],
    ):
        r = runner.invoke(app, argv)
        assert r.exit_code != 0 and str(missing) in r.output and "$SLURM_DL_CONFIG" in r.output, (
            argv,
            r.output,
        )
        assert "Traceback" not in r.output
    missing.write_text(TESTBED.read_text())
    r = runner.invoke(app, ["filter", "check", "--", "--gpus=1", "-t", "10"])
    assert r.exit_code == 0 and r.output.startswith("accept"), r.output
    monkeypatch.setenv("SLURM_DL_CONFIG", str(tmp_path / "nope.toml"))
    r = runner.invoke(app, ["filter", "check", "--", "--gpus=1", "-t", "10"])
    assert r.exit_code != 0 and "nope.toml" in r.output


def test_testbed_writes_its_site_config_with_the_db_inside(tmp_path: Path) -> None:
    from slurm_dl.testbed import Testbed
    from slurm_dl.testbed.conf import render_env

    tb = Testbed(tmp_path / "tb")
    assert "SLURM_DL_CONFIG" not in render_env(tb.layout)
    written = tb.write_site_config(TESTBED)
    cfg = load_config(written)
    assert cfg.site.database_url == f"sqlite:///{(tmp_path / 'tb').resolve()}/ledger.db"
    assert render_env(tb.layout)["SLURM_DL_CONFIG"] == str(written.resolve())
