"""`slurm-dl filter install` and `filter check`: the rendered shim, slurm.conf handling, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobsubmit.install import (
    SHIM_TEMPLATE,
    FilterInstallError,
    install,
    render_shim,
    with_lua_plugin,
)
from slurm_dl.cli.main import app
from slurm_dl.cli.config_file import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"
runner = CliRunner()


def test_render_fills_every_placeholder() -> None:
    text = render_shim(SHIM_TEMPLATE.read_text(), "/run/x.sock", 150, "reject")
    assert (
        '"/run/x.sock"' in text
        and "TIMEOUT_S = 0.150" in text
        and 'FAILURE_MODE = "reject"' in text
    )
    assert "@" not in "".join(
        line for line in text.splitlines() if not line.lstrip().startswith("--")
    )


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"timeout_ms": 500}, "1..200"),
        ({"failure_mode": "maybe"}, "accept"),
        ({"socket_path": 'a"b'}, "Lua string"),
    ],
)
def test_render_refuses_bad_values(kwargs, text) -> None:
    args = {"socket_path": "/s", "timeout_ms": 100, "failure_mode": "accept", **kwargs}
    with pytest.raises(FilterInstallError, match=text):
        render_shim(SHIM_TEMPLATE.read_text(), **args)


def test_plugin_line_appended_when_missing() -> None:
    text, change = with_lua_plugin("ClusterName=x\n")
    assert text == "ClusterName=x\nJobSubmitPlugins=lua\n" and "appended" in change


def test_lua_added_to_other_plugins() -> None:
    text, change = with_lua_plugin("JobSubmitPlugins=require_timelimit # site\nX=1\n")
    assert "JobSubmitPlugins=require_timelimit,lua # site" in text and "added lua" in change


def test_nothing_changes_when_lua_is_there() -> None:
    for conf in ("JobSubmitPlugins=lua\n", "jobsubmitplugins = pbs,job_submit/lua\n"):
        assert with_lua_plugin(conf) == (conf, None)


def test_install_writes_shim_and_fixes_slurm_conf(tmp_path) -> None:
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    (tmp_path / "slurm.conf").chmod(0o640)
    result = install(load_config(CONFIG), tmp_path, "/tmp/f.sock")
    assert '"/tmp/f.sock"' in result.shim.read_text()
    assert "JobSubmitPlugins=lua" in (tmp_path / "slurm.conf").read_text()
    assert (tmp_path / "slurm.conf.bak-slurm-dl").read_text() == "ClusterName=x\n"
    assert (tmp_path / "slurm.conf").stat().st_mode & 0o777 == 0o640


def test_install_without_editing_refuses_and_says_why(tmp_path) -> None:
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    with pytest.raises(FilterInstallError, match="JobSubmitPlugins does not include lua"):
        install(load_config(CONFIG), tmp_path, None, edit_slurm_conf=False)
    assert not (tmp_path / "job_submit.lua").exists()


def test_install_cli_reports_a_missing_slurm_conf_in_one_line(tmp_path) -> None:
    r = runner.invoke(
        app, ["filter", "install", "--config", str(CONFIG), "--slurm-conf-dir", str(tmp_path)]
    )
    assert r.exit_code == 1 and "cannot read slurm.conf" in r.output and "Traceback" not in r.output


def test_install_cli_json(tmp_path) -> None:
    (tmp_path / "slurm.conf").write_text("JobSubmitPlugins=lua\n")
    r = runner.invoke(
        app,
        [
            "filter",
            "install",
            "--config",
            str(CONFIG),
            "--slurm-conf-dir",
            str(tmp_path),
            "--socket",
            "/tmp/s.sock",
            "--json",
        ],
    )
    assert r.exit_code == 0 and json.loads(r.output)["slurm_conf_change"] is None


def test_check_cli_shows_the_reshape() -> None:
    r = runner.invoke(
        app, ["filter", "check", "--config", str(CONFIG), "--", "--gpus=16", "-t", "30"]
    )
    assert (
        r.exit_code == 0 and "accept (class train)" in r.output and "set min_nodes = 2" in r.output
    )


def test_check_cli_rejection_exits_2_with_the_message() -> None:
    r = runner.invoke(
        app, ["filter", "check", "--config", str(CONFIG), "--json", "--", "--gres=gpu:nosuchgpu:1"]
    )
    assert r.exit_code == 2
    out = json.loads(r.output)
    assert out["decision"]["action"] == "reject" and "nosuchgpu" in out["decision"]["message"]
    assert out["job"]["tres_per_node"] == "gres:gpu:nosuchgpu:1"


def test_check_cli_bad_argument_is_one_line() -> None:
    r = runner.invoke(app, ["filter", "check", "--config", str(CONFIG), "--", "--frobnicate"])
    assert r.exit_code == 1 and "unknown sbatch option '--frobnicate'" in r.output


def test_check_cli_bad_config_is_one_message(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("gpu_types = 3\n")
    r = runner.invoke(app, ["filter", "check", "--config", str(bad), "--", "--gpus=1"])
    assert r.exit_code == 1 and "invalid site configuration" in r.output


def test_check_cli_warns_that_live_slurm_hides_sbatch_deadline() -> None:
    r = runner.invoke(
        app, ["filter", "check", "--config", str(CONFIG), "--", "--deadline=now+3hours", "-t", "60"]
    )
    assert (
        r.exit_code == 0
        and "dl:deadline=" in r.output
        and "deadline=" in r.output.split("admin_comment")[1]
    )


def test_shim_sends_every_field_the_rules_read() -> None:
    """The Lua READ_FIELDS list and the rules' JOB_DESC_FIELDS stay in step."""
    import re

    from slurm_dl.core.rules import JOB_DESC_FIELDS

    block = re.search(r"READ_FIELDS = \{(.*?)\}", SHIM_TEMPLATE.read_text(), re.S).group(1)
    lua_fields = set(re.findall(r'"(\w+)"', block))
    # has_script, script_head and het_leader_tag are computed by the shim; deadline is not
    # visible to job_submit.lua in 22.05.
    assert lua_fields == set(JOB_DESC_FIELDS) - {
        "has_script",
        "deadline",
        "het_leader_tag",
        "script_head",
    }


def test_admins_who_may_change_a_gpu_request_later_are_root_and_slurm_user():
    from jobsubmit.install import slurm_user_uids

    assert slurm_user_uids("ClusterName=x\n") == (0,)
    assert slurm_user_uids("SlurmUser=root\n") == (0,)
    assert slurm_user_uids("SlurmUser=nobody\n") == (0, 65534)
    assert slurm_user_uids("SlurmUser=no-such-user-here\n") == (0,)
    text = render_shim(SHIM_TEMPLATE.read_text(), "/run/x.sock", 150, "accept", (0, 64030))
    assert "local ADMIN_UIDS = { 0, 64030 }" in text and "@" not in text.split("local have_unix")[0]
