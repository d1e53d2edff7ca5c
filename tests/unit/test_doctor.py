"""doctor's verdicts (pure) and the SiteFactor-vs-PriorityWeight* warning of config check."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.doctor import SHIM_MARKER, Facts, diagnose, summary
from slurm_dl.core.priority_weights import parse_slurm_conf, priority_weights, swamp_warnings
from slurm_dl.slurm.controller import parse_show_config

ROOT = Path(__file__).resolve().parents[2]

SHOW_CONFIG = """Configuration data as of 2026-11-23T12:00:00
AccountingStorageType   = accounting_storage/none
JobSubmitPlugins        = lua
PriorityType            = priority/multifactor
PriorityWeightFairshare = 100000
SLURM_CONF              = /etc/slurm/slurm.conf
SlurmUser               = slurm(64030)
TopologyPlugin          = topology/tree
"""


def good() -> Facts:
    return Facts(
        config_path="/etc/slurm-dl/site.toml",
        slurm_release="22.05",
        supported_releases="22.05",
        controller=parse_show_config(SHOW_CONFIG),
        slurm_conf_dir="/etc/slurm",
        shim_text=f'-- {SHIM_MARKER}\nlocal SOCKET_PATH = "/run/slurm-dl/filter.sock"\n',
        socket_path="/run/slurm-dl/filter.sock",
        socket_kind="socket",
        socket_mode=0o600,
        socket_owner="slurm",
        slurm_user="slurm",
        database_url="sqlite:////var/lib/slurm-dl/ledger.db",
        db_revision="0002",
        db_head="0002",
        last_cycle_at=995.0,
        now=1000.0,
        interval_s=5.0,
        site_factor_max=50_000,
        site_factor_levels=64,
        metrics={"prioritizer": (9813, None)},
    )


def statuses(f: Facts) -> dict[str, str]:
    return {x.check: x.status for x in diagnose(f)}


def test_a_good_installation_passes() -> None:
    result = summary(diagnose(good()))
    assert result["ok"] and result["counts"]["fail"] == 0 and result["counts"]["warn"] == 0, result


def test_each_fault_is_named_with_its_fix() -> None:
    cases = {
        "filter socket": dict(socket_kind="missing"),
        "PriorityType": dict(
            controller=parse_show_config(
                SHOW_CONFIG.replace("priority/multifactor", "priority/basic")
            )
        ),
        "JobSubmitPlugins": dict(
            controller=parse_show_config(SHOW_CONFIG.replace("= lua", "= (null)"))
        ),
        "job_submit.lua": dict(shim_text=None),
        "database": dict(db_revision="0001"),
        "prioritizer": dict(last_cycle_at=100.0),
        "prioritizer metrics": dict(metrics={"prioritizer": (9813, "Connection refused")}),
    }
    for check, change in cases.items():
        f = good()
        for k, v in change.items():
            setattr(f, k, v)
        findings = [x for x in diagnose(f) if x.status == "fail"]
        assert [x.check for x in findings] == [check], (check, findings)
        assert findings[0].fix, check
    f = good()
    f.socket_mode, f.socket_owner = 0o666, "nobody"
    bad = [x for x in diagnose(f) if x.status == "fail"]
    assert (
        bad[0].check == "filter socket"
        and "mode 666" in bad[0].detail
        and "nobody" in bad[0].detail
    )


def test_upgrade_fix_names_the_command() -> None:
    f = good()
    f.db_revision = "0001"
    fix = next(x.fix for x in diagnose(f) if x.check == "database")
    assert "slurm-dl db upgrade --db 'sqlite:////var/lib/slurm-dl/ledger.db'" in fix


def test_site_factor_swamping_the_site_weights_is_a_warning() -> None:
    f = good()
    f.site_factor_max = 1_000_000
    assert statuses(f)["SiteFactor vs PriorityWeight*"] == "warn"
    assert summary(diagnose(f))["ok"]  # a warning does not fail doctor


def test_priority_weights_and_swamp_rule() -> None:
    conf = parse_slurm_conf(
        "PriorityType=priority/multifactor  # comment\nPriorityWeightFairshare=100000\n"
        "PriorityWeightAge=0\nNodeName=x CPUs=1\npriorityweightqos=2000\n"
    )
    assert priority_weights(conf) == {"PriorityWeightFairshare": 100000, "PriorityWeightQOS": 2000}
    lines = swamp_warnings(1_000_000, 64, conf)
    assert len(lines) == 2 and "PriorityWeightFairshare=100000" in lines[0]
    assert swamp_warnings(1000, 64, conf) == []
    assert "priority/multifactor" in swamp_warnings(10, 2, {"PriorityType": "priority/basic"})[0]


def test_config_check_warns_with_a_slurm_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("PriorityType=priority/multifactor\nPriorityWeightFairshare=100000\n")
    r = CliRunner().invoke(
        app,
        ["config", "check", str(ROOT / "site-configs" / "testbed.toml"), "--slurm-conf", str(conf)],
    )
    assert r.exit_code == 0
    assert "warning:" in r.output and "exceeds PriorityWeightFairshare=100000" in r.output


def test_uninstalled_host_verdicts() -> None:
    from slurm_dl.core.doctor import diagnose_uninstalled

    left = Facts(
        controller=parse_show_config(SHOW_CONFIG),
        slurm_conf_dir="/etc/slurm",
        shim_text=f"-- {SHIM_MARKER}\n",
        socket_path="/run/slurm-dl/filter.sock",
        socket_kind="socket",
        site_factors={7: 0, 8: 1200},
        metrics={"filter": (9814, None), "prioritizer": (None, None)},
        unit_files=["slurm-dl-filter.service"],
        database_url="sqlite:////var/lib/slurm-dl/ledger.db",
        db_present=True,
        last_cycle_at=990.0,
        now=1000.0,
    )
    found = {x.check: (x.status, x.fix) for x in diagnose_uninstalled(left)}
    assert found["job_submit.lua"] == (
        "fail",
        "slurm-dl filter uninstall --slurm-conf-dir /etc/slurm",
    )
    assert found["filter service"][0] == "fail" and found["filter metrics"][0] == "fail"
    assert found["SiteFactor"][0] == "fail" and "--all-pending" in found["SiteFactor"][1]
    assert found["units"][0] == found["database"][0] == found["prioritizer"][0] == "warn"
    gone = Facts(
        controller=parse_show_config(SHOW_CONFIG),
        slurm_conf_dir="/etc/slurm",
        shim_text=None,
        socket_path="/run/slurm-dl/filter.sock",
        socket_kind="missing",
        site_factors={7: 0},
        metrics={"filter": (9814, "Connection refused")},
        now=1000.0,
    )
    result = summary(diagnose_uninstalled(gone))
    assert result["ok"] and result["counts"]["warn"] == 0, result


def test_a_shim_this_user_cannot_read_is_not_called_missing(tmp_path) -> None:
    from slurm_dl.cli.doctor_cmd import _read_shim

    f = good()
    f.shim_text, f.shim_error = None, "Permission denied"
    [shim] = [x for x in diagnose(f) if x.check == "job_submit.lua"]
    assert shim.status == "skip" and "Permission denied" in shim.detail and "as root" in shim.detail
    assert "missing" not in shim.detail
    assert _read_shim(tmp_path / "job_submit.lua") == (None, None)  # absent: missing, no error
    (tmp_path / "job_submit.lua").write_text("-- x\n")
    assert _read_shim(tmp_path / "job_submit.lua") == ("-- x\n", None)
