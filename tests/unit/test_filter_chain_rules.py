"""`filter install` chains a site's own job_submit.lua (both decide, a rejection by either stands),
keeps a byte-exact backup, refuses what it cannot chain without --force; `filter uninstall`
restores job_submit.lua and slurm.conf byte for byte. The Lua part runs under lua5.1."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobsubmit.chain import BACKUP, CONF_BACKUP, SITE_COPY, ChainError
from jobsubmit.install import install, uninstall
from slurm_dl.cli.main import app
from slurm_dl.cli.config_file import load_config
from test_filter_lua import desc, lua_ready, service_socket  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"
runner = CliRunner()

SITE = b"""-- the site's rules\r\nfunction slurm_job_submit(job_desc, part_list, submit_uid)\r
    if job_desc.account == "banned" then
        slurm.log_user("site: account banned may not submit")
        return slurm.ESLURM_INVALID_ACCOUNT
    end
    if job_desc.partition == nil then job_desc.partition = "routed" end
    counter = (counter or 0) + 1
    return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    if job_desc.name == "nope" then return slurm.ERROR end
    return slurm.SUCCESS
end
"""
CONF = b"ClusterName=x\r\nSlurmUser=root\nJobSubmitPlugins=require_timelimit\n"


@pytest.fixture
def site_dir(tmp_path):
    d = tmp_path / "etc"
    d.mkdir()
    (d / "slurm.conf").write_bytes(CONF)
    (d / "job_submit.lua").write_bytes(SITE)
    os.chmod(d / "job_submit.lua", 0o640)
    return d


def test_install_chains_keeps_a_byte_exact_backup_and_uninstall_restores_everything(
    site_dir,
) -> None:
    result = install(load_config(CONFIG), site_dir, "/run/x.sock")
    assert (site_dir / BACKUP).read_bytes() == SITE and (site_dir / SITE_COPY).read_bytes() == SITE
    assert oct((site_dir / BACKUP).stat().st_mode & 0o777) == "0o640"
    shim = (site_dir / "job_submit.lua").read_text()
    assert f'SITE_SCRIPT = "{(site_dir / SITE_COPY).resolve()}"' in shim
    assert any("chained" in n for n in result.notes)
    assert b"require_timelimit,lua" in (site_dir / "slurm.conf").read_bytes()
    install(
        load_config(CONFIG), site_dir, "/run/x.sock"
    )  # a re-install keeps the chain and the backup
    assert (site_dir / BACKUP).read_bytes() == SITE and "job_submit_site.lua" in (
        site_dir / "job_submit.lua"
    ).read_text()
    actions = uninstall(site_dir).actions
    assert (site_dir / "job_submit.lua").read_bytes() == SITE
    assert (site_dir / "slurm.conf").read_bytes() == CONF
    assert not (site_dir / BACKUP).exists() and not (site_dir / SITE_COPY).exists()
    assert not (site_dir / CONF_BACKUP).exists() and len(actions) == 3


def test_install_without_a_site_script_and_uninstall_removes_the_shim(tmp_path) -> None:
    (tmp_path / "slurm.conf").write_bytes(CONF)
    install(load_config(CONFIG), tmp_path, "/run/x.sock")
    assert 'SITE_SCRIPT = ""' in (tmp_path / "job_submit.lua").read_text()
    uninstall(tmp_path)
    assert (
        not (tmp_path / "job_submit.lua").exists()
        and (tmp_path / "slurm.conf").read_bytes() == CONF
    )


@pytest.mark.parametrize(
    "script, why",
    [
        (b"function other() end\n", "no slurm_job_submit"),
        (b"function slurm_job_submit() setfenv(1, {}) end\n", "setfenv"),
        (b"function slurm_job_submit( oops\n", "cannot parse"),
    ],
)
def test_unchainable_site_script_is_refused_without_force(tmp_path, script, why) -> None:
    (tmp_path / "slurm.conf").write_bytes(CONF)
    (tmp_path / "job_submit.lua").write_bytes(script)
    if why == "cannot parse" and lua_ready() is not None:
        pytest.skip("luac5.1 is not installed")
    with pytest.raises(ChainError, match=why):
        install(load_config(CONFIG), tmp_path, "/run/x.sock")
    assert (tmp_path / "job_submit.lua").read_bytes() == script and (
        tmp_path / "slurm.conf"
    ).read_bytes() == CONF
    result = install(load_config(CONFIG), tmp_path, "/run/x.sock", force=True)
    assert any("NOT chained" in n for n in result.notes)
    assert (tmp_path / BACKUP).read_bytes() == script and not (tmp_path / SITE_COPY).exists()
    uninstall(tmp_path)
    assert (tmp_path / "job_submit.lua").read_bytes() == script


def test_uninstall_leaves_a_slurm_conf_edited_since_unless_forced(site_dir) -> None:
    install(load_config(CONFIG), site_dir, "/run/x.sock")
    with open(site_dir / "slurm.conf", "ab") as f:
        f.write(b"MaxJobCount=5000\n")
    with pytest.raises(ChainError, match="changed since"):
        uninstall(site_dir)
    assert (site_dir / "job_submit.lua").read_bytes() != SITE  # nothing was touched
    uninstall(site_dir, force=True)
    assert (site_dir / "slurm.conf").read_bytes() == CONF and (
        site_dir / "job_submit.lua"
    ).read_bytes() == SITE


EDITED = SITE.replace(b'"routed"', b'"routed-v2"')


def test_uninstall_refuses_over_an_edited_site_script_and_says_which_and_what_to_do(
    site_dir,
) -> None:
    install(load_config(CONFIG), site_dir, "/run/x.sock")
    shim = (site_dir / "job_submit.lua").read_bytes()
    (site_dir / SITE_COPY).write_bytes(EDITED)  # the site keeps working on its chained script
    with pytest.raises(ChainError) as e:
        uninstall(site_dir)
    msg = str(e.value)
    assert SITE_COPY in msg and "edited since" in msg and "--force" in msg and BACKUP in msg
    assert "slurm.conf:" not in msg and "\n" not in msg
    # nothing was touched
    assert (site_dir / "job_submit.lua").read_bytes() == shim and (
        site_dir / SITE_COPY
    ).read_bytes() == EDITED
    assert (site_dir / BACKUP).read_bytes() == SITE and (site_dir / CONF_BACKUP).exists()
    shim_mtime = int((site_dir / "job_submit.lua").stat().st_mtime)
    actions = uninstall(site_dir, force=True).actions
    # the site's edits win; the older copy stays for whoever wants it; slurm.conf comes back too
    assert (site_dir / "job_submit.lua").read_bytes() == EDITED and (
        site_dir / BACKUP
    ).read_bytes() == SITE
    assert oct((site_dir / "job_submit.lua").stat().st_mode & 0o777) == "0o640"
    assert int((site_dir / "job_submit.lua").stat().st_mtime) > shim_mtime  # slurmctld re-reads it
    assert not (site_dir / SITE_COPY).exists() and (site_dir / "slurm.conf").read_bytes() == CONF
    assert any("edited" in a and BACKUP in a for a in actions)


def test_uninstall_refuses_when_the_backup_of_a_chained_script_is_gone(site_dir) -> None:
    install(load_config(CONFIG), site_dir, "/run/x.sock")
    (site_dir / BACKUP).unlink()
    with pytest.raises(ChainError, match=SITE_COPY):
        uninstall(site_dir)  # it would remove the shim and drop the site's script altogether
    uninstall(site_dir, force=True)
    assert (site_dir / "job_submit.lua").read_bytes() == SITE and not (
        site_dir / SITE_COPY
    ).exists()


def test_uninstall_names_both_edited_files_at_once(site_dir) -> None:
    install(load_config(CONFIG), site_dir, "/run/x.sock")
    (site_dir / SITE_COPY).write_bytes(EDITED)
    with open(site_dir / "slurm.conf", "ab") as f:
        f.write(b"MaxJobCount=5000\n")
    with pytest.raises(ChainError) as e:
        uninstall(site_dir)
    assert "slurm.conf: changed since" in str(e.value) and f"{SITE_COPY}: the site's script" in str(
        e.value
    )


def test_cli_uninstall_over_an_edited_site_script_is_one_error_line_and_force_says_what_it_did(
    site_dir,
) -> None:
    install(load_config(CONFIG), site_dir, "/run/x.sock")
    (site_dir / SITE_COPY).write_bytes(EDITED)
    r = runner.invoke(app, ["filter", "uninstall", "--slurm-conf-dir", str(site_dir)])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1 and SITE_COPY in r.output
    r = runner.invoke(app, ["filter", "uninstall", "--slurm-conf-dir", str(site_dir), "--force"])
    assert r.exit_code == 0 and f"edited {SITE_COPY} is now job_submit.lua" in r.output
    assert (site_dir / "job_submit.lua").read_bytes() == EDITED


def test_uninstall_refuses_a_script_that_is_not_ours(site_dir) -> None:
    with pytest.raises(ChainError, match="not slurm-dl's shim"):
        uninstall(site_dir)
    assert (site_dir / "job_submit.lua").read_bytes() == SITE


def test_cli_install_and_uninstall_speak_in_one_error_line(site_dir, tmp_path) -> None:
    (tmp_path / "bad.conf").mkdir()
    r = runner.invoke(app, ["filter", "uninstall", "--slurm-conf-dir", str(site_dir)])
    assert (
        r.exit_code != 0
        and r.output.strip().startswith("error:")
        and len(r.output.strip().splitlines()) == 1
    )
    r = runner.invoke(
        app,
        [
            "filter",
            "install",
            "--config",
            str(CONFIG),
            "--slurm-conf-dir",
            str(site_dir),
            "--socket",
            "/run/x.sock",
            "--json",
        ],
    )
    assert r.exit_code == 0 and any("chained" in n for n in json.loads(r.output)["notes"])
    r = runner.invoke(app, ["filter", "uninstall", "--slurm-conf-dir", str(site_dir)])
    assert r.exit_code == 0 and "restored" in r.output


def test_non_utf8_slurm_conf_is_one_error(tmp_path) -> None:
    (tmp_path / "slurm.conf").write_bytes(b"ClusterName=\xff\n")
    r = runner.invoke(
        app, ["filter", "install", "--config", str(CONFIG), "--slurm-conf-dir", str(tmp_path)]
    )
    assert r.exit_code != 0 and "not UTF-8" in r.output and "Traceback" not in r.output


HARNESS = r"""
local cjson = require "cjson"
local user, info = {}, {}
slurm = {
    SUCCESS = 0, ERROR = -1, ESLURM_INVALID_ACCOUNT = 2045, ESLURM_ACCESS_DENIED = 2002,
    ESLURM_INVALID_TIME_LIMIT = 2051,
    log_user = function(fmt, ...) table.insert(user, string.format(fmt, ...)) end,
    log_info = function(fmt, ...) table.insert(info, string.format(fmt, ...)) end,
    log_error = function(fmt, ...) table.insert(info, string.format(fmt, ...)) end,
}
dofile(arg[1])
local f = assert(io.open(arg[2])); local c = cjson.decode(f:read("*a")); f:close()
local out = {}
for i, job in ipairs(c.jobs) do
    local rc = slurm_job_submit(job, {}, 1000)
    out[i] = { rc = rc, partition = job.partition }
end
local m = slurm_job_modify({ name = "nope" }, { job_id = 1 }, {}, 1000)
print(cjson.encode({ submits = out, modify = m, user = user, info = info, counter = counter or cjson.null }))
"""


@pytest.mark.skipif(lua_ready() is not None, reason=str(lua_ready()))
def test_both_scripts_decide_under_lua(site_dir, tmp_path, service_socket) -> None:
    install(load_config(CONFIG), site_dir, str(service_socket))
    (tmp_path / "h.lua").write_text(HARNESS)
    jobs = [
        desc(account="banned", tres_per_node="gres:gpu:1"),  # the site refuses
        desc(tres_per_node="gres:gpu:nosuchgpu:1", partition="gpu"),  # slurm-dl refuses
        desc(tres_per_node="gres:gpu:1"),
    ]  # both accept; site routes
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": jobs}))
    out = subprocess.run(
        [
            "lua5.1",
            str(tmp_path / "h.lua"),
            str(site_dir / "job_submit.lua"),
            str(tmp_path / "jobs.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert [s["rc"] for s in r["submits"]] == [2045, 2072, 0]
    assert "site: account banned may not submit" in r["user"]
    assert r["submits"][2]["partition"] == "routed"
    assert r["modify"] == -1  # the site's modify rule stands too
    assert r["counter"] is None  # the site's globals live in its own table, not ours


def test_each_swap_of_job_submit_lua_is_newer_to_slurmctld_even_within_one_second(site_dir) -> None:
    # slurmctld re-reads the script only when its whole-second mtime is greater than the one it
    # loaded; install and uninstall in the same second must still both be seen.
    lua = site_dir / "job_submit.lua"
    site_written = int(lua.stat().st_mtime)
    install(load_config(CONFIG), site_dir, "/run/x.sock")
    shim_mtime = int(lua.stat().st_mtime)
    assert shim_mtime > site_written
    uninstall(site_dir)
    assert lua.read_bytes() == SITE and int(lua.stat().st_mtime) > shim_mtime
