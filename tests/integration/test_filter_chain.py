"""`slurm-dl filter install` next to a site's own job_submit.lua on a live testbed: the site's rule
keeps working, ours too; `filter uninstall` restores job_submit.lua and slurm.conf byte for byte."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from slurm_dl.core.tags import parse_tag
from slurm_dl.testbed import Testbed, job_fields
from test_filter import CONFIG, REPO, FilterProcess, require_testbed_support

SITE = b"""-- a site's own rules (account check and partition routing)\r
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.account == "banned" then
        slurm.log_user("site policy: account banned may not submit")
        return slurm.ESLURM_INVALID_ACCOUNT
    end
    if job_desc.comment == nil then job_desc.comment = "routed-by-site" end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
"""


def sbatch(tb: Testbed, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "-t", "5", *args, "--wrap", "true"],
        env=tb.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slurm_dl.cli.main", "filter", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def job_of(out: subprocess.CompletedProcess) -> int:
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def site_testbed(make_testbed, tmp_path) -> tuple[Testbed, Path, Path, bytes, FilterProcess]:
    """A testbed running the site's own job_submit.lua, and a filter service started (not installed)."""
    require_testbed_support()
    tb = make_testbed(nodes=1, gpus_per_node=8, gpu_type="h100")
    tb.up()
    lua = Path(tb.conf_dir) / "job_submit.lua"
    conf = Path(tb.conf_dir) / "slurm.conf"
    time.sleep(1.1)  # slurmctld re-reads the script when its mtime is newer than the last load
    lua.write_bytes(SITE)
    service = FilterProcess(tmp_path / "f.sock", tmp_path / "f.log", tb.env())
    service.start()
    return tb, lua, conf, conf.read_bytes(), service


def test_site_rule_and_ours_both_hold_and_uninstall_restores(make_testbed, tmp_path) -> None:
    tb, lua, conf, conf_before, service = site_testbed(make_testbed, tmp_path)
    try:
        out = sbatch(tb, "-A", "banned")
        assert out.returncode != 0 and "site policy: account banned" in out.stderr
        inst = cli(
            "install",
            "--config",
            str(CONFIG),
            "--slurm-conf-dir",
            str(tb.conf_dir),
            "--socket",
            str(service.sock),
        )
        assert inst.returncode == 0 and "chained" in inst.stdout, inst.stderr
        out = sbatch(tb, "-A", "banned", "--gres=gpu:1")
        assert (
            out.returncode != 0 and "site policy: account banned" in out.stderr
        )  # the site's rule
        out = sbatch(tb, "--gres=gpu:nosuchgpu:1")
        assert out.returncode != 0 and "nosuchgpu" in out.stderr and "Fix:" in out.stderr  # ours
        fields = job_fields(job_of(sbatch(tb, "--gres=gpu:1")), tb.env())
        assert fields["Comment"] == "routed-by-site"  # the site's change
        assert parse_tag(fields["AdminComment"]) is not None  # and our tag
        out = cli("uninstall", "--slurm-conf-dir", str(tb.conf_dir))
        assert out.returncode == 0, out.stderr
        assert lua.read_bytes() == SITE and conf.read_bytes() == conf_before
        after = job_fields(job_of(sbatch(tb, "--gres=gpu:1")), tb.env())
        assert (
            after["Comment"] == "routed-by-site"
            and parse_tag(after.get("AdminComment", "")) is None
        )
        out = sbatch(tb, "-A", "banned")
        assert out.returncode != 0 and "site policy: account banned" in out.stderr
    finally:
        service.stop()


def test_install_adds_the_plugin_and_uninstall_takes_slurm_conf_back(
    make_testbed, tmp_path
) -> None:
    require_testbed_support()
    tb = make_testbed(nodes=1, gpus_per_node=8, gpu_type="h100", job_submit_lua=False)
    tb.up()
    conf = Path(tb.conf_dir) / "slurm.conf"
    before = conf.read_bytes()
    service = FilterProcess(tmp_path / "f.sock", tmp_path / "f.log", tb.env())
    service.start()
    try:
        assert (
            cli(
                "install",
                "--config",
                str(CONFIG),
                "--slurm-conf-dir",
                str(tb.conf_dir),
                "--socket",
                str(service.sock),
            ).returncode
            == 0
        )
        assert b"JobSubmitPlugins=lua" in conf.read_bytes()
        subprocess.run(["scontrol", "reconfigure"], env=tb.env(), check=True, timeout=60)
        time.sleep(1)
        assert (
            parse_tag(job_fields(job_of(sbatch(tb, "--gres=gpu:1")), tb.env())["AdminComment"])
            is not None
        )
        out = cli("uninstall", "--slurm-conf-dir", str(tb.conf_dir))
        assert out.returncode == 0 and "restored slurm.conf" in out.stdout, out.stderr
        assert conf.read_bytes() == before and not (Path(tb.conf_dir) / "job_submit.lua").exists()
        subprocess.run(["scontrol", "reconfigure"], env=tb.env(), check=True, timeout=60)
        time.sleep(1)
        assert (
            parse_tag(
                job_fields(job_of(sbatch(tb, "--gres=gpu:1")), tb.env()).get("AdminComment", "")
            )
            is None
        )
    finally:
        service.stop()


def test_uninstall_after_a_site_edit_is_refused_with_the_reason_and_force_keeps_the_edit(
    make_testbed, tmp_path
) -> None:
    tb, lua, conf, conf_before, service = site_testbed(make_testbed, tmp_path)
    try:
        assert (
            cli(
                "install",
                "--config",
                str(CONFIG),
                "--slurm-conf-dir",
                str(tb.conf_dir),
                "--socket",
                str(service.sock),
            ).returncode
            == 0
        )
        shim = lua.read_bytes()
        edited = SITE.replace(b"site policy:", b"site policy v2:")
        (Path(tb.conf_dir) / "job_submit_site.lua").write_bytes(
            edited
        )  # the site edits its chained script
        out = cli("uninstall", "--slurm-conf-dir", str(tb.conf_dir))
        assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert (
            "job_submit_site.lua" in out.stderr
            and "edited since" in out.stderr
            and "--force" in out.stderr
        )
        assert (
            lua.read_bytes() == shim
            and (Path(tb.conf_dir) / "job_submit_site.lua").read_bytes() == edited
        )
        out = sbatch(tb, "--gres=gpu:nosuchgpu:1")
        assert out.returncode != 0 and "nosuchgpu" in out.stderr  # the filter still runs
        out = cli("uninstall", "--slurm-conf-dir", str(tb.conf_dir), "--force")
        assert out.returncode == 0 and "is now job_submit.lua" in out.stdout, out.stderr
        assert lua.read_bytes() == edited and conf.read_bytes() == conf_before
        out = sbatch(tb, "-A", "banned")
        assert (
            out.returncode != 0 and "site policy v2: account banned" in out.stderr
        )  # the edit, live
        after = job_fields(job_of(sbatch(tb, "--gres=gpu:1")), tb.env())
        assert parse_tag(after.get("AdminComment", "")) is None
    finally:
        service.stop()
