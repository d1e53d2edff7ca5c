"""The prioritizer's Slurm rights: what it says at start, how a cycle whose updates Slurm
refuses is reported (report, metrics, log), and a GPU-type move Slurm refuses (explain, the
decision record, metrics). The cycles run the real daemon code on an in-memory cluster whose
calls fail through ``slurm_dl.slurm.faults.FaultyBackend`` as Slurm refuses a non-operator."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from prioritizer import Prioritizer
from prioritizer.loop import Loop
from prioritizer.metrics import PrioritizerMetrics
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import SlurmError
from slurm_dl.core.rights import (
    refused_for_rights,
    slurm_rights,
    startup_message,
    trust_problem,
    trusted_user,
)
from slurm_dl.explain.view import gpu_type_words
from slurm_dl.slurm.accounts import parse_admin_level, slurm_user_of
from slurm_dl.slurm.faults import FaultyBackend
from slurm_dl.store import Store
from test_cycle import MemoryCluster

REPO = Path(__file__).resolve().parents[2]
BOTH = "sdl1:class=train;ckpt=0;gpus=2;shape=1x2;types=h100+v100"


# --- the pure verdicts ---------------------------------------------------------------------
def test_root_slurm_user_and_operators_may_change_jobs() -> None:
    assert slurm_rights("root", 0, "slurm", slurmdbd=False).ok is True
    assert slurm_rights("slurm", 64030, "slurm", slurmdbd=False).ok is True
    for level in ("Operator", "Administrator"):
        r = slurm_rights("sdl", 1001, "slurm", slurmdbd=True, admin_level=level)
        assert r.ok is True and level in r.detail


def test_a_user_without_operator_rights_is_told_the_command() -> None:
    r = slurm_rights("sdl", 1001, "slurm", slurmdbd=True, admin_level="None")
    assert r.ok is False
    assert r.fix == "sacctmgr modify user sdl set adminlevel=operator"
    unknown = slurm_rights("sdl", 1001, "slurm", slurmdbd=True, admin_level=None)
    assert unknown.ok is False and "sacctmgr add user sdl" in unknown.fix
    assert "adminlevel=operator" in unknown.fix
    no_dbd = slurm_rights("sdl", 1001, "slurm", slurmdbd=False)
    assert no_dbd.ok is False and "run the prioritizer as slurm" in no_dbd.fix
    cannot = slurm_rights("sdl", 1001, "slurm", slurmdbd=True, lookup_error="slurmdbd down")
    assert cannot.ok is None and "slurmdbd down" in cannot.detail


def test_the_start_message_fits_80_columns_and_names_no_source() -> None:
    r = slurm_rights("prioritizer-service-user", 1001, "slurm", slurmdbd=True, admin_level="None")
    text = startup_message(r)
    lines = text.splitlines()
    assert len(lines) >= 2 and all(len(line) <= 80 for line in lines), text
    assert "sacctmgr modify user prioritizer-service-user set adminlevel=operator" in text
    assert ".py" not in text and "#" not in text


def test_slurms_refusals_are_told_apart_from_other_failures() -> None:
    assert refused_for_rights("scontrol update: slurm_update error: Invalid user id")
    assert refused_for_rights("Access/permission denied for job 28")
    assert not refused_for_rights("Invalid job id specified")
    assert not refused_for_rights("Job has already finished")
    assert not refused_for_rights("Unable to contact slurm controller")


def test_the_filter_trusts_the_configured_user_else_slurm_user() -> None:
    assert trusted_user(None, "slurm") == "slurm" and trusted_user("sdl", "slurm") == "sdl"
    assert trust_problem("slurm", 64030, None, "slurm") is None
    assert trust_problem("root", 0, None, "slurm") is None
    assert trust_problem("sdl", 1001, "sdl", "slurm") is None
    why = trust_problem("sdl", 1001, None, "slurm")
    assert why is not None and '[prioritizer] user = "sdl"' in why
    assert "slurm-dl filter install" in why


def test_admin_level_and_slurm_user_are_read_from_slurms_output() -> None:
    assert parse_admin_level("Operator\n") == "Operator"
    assert parse_admin_level("  None|\n") == "None"
    assert parse_admin_level("") is None
    assert slurm_user_of({"SlurmUser": "slurm(64030)"}) == "slurm"
    assert slurm_user_of({"ClusterName": "x"}) is None


def test_the_setting_has_one_default() -> None:
    cfg = load_config(REPO / "site-configs" / "testbed.toml")
    assert cfg.prioritizer.user is None


# --- a cycle whose every update Slurm refuses ----------------------------------------------
def _samples(m: PrioritizerMetrics) -> dict:
    out = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _cluster() -> MemoryCluster:
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01")
    c.add(2, 4)
    c.add(3, 2).submit_time += 1
    return c


def test_a_cycle_whose_updates_are_all_refused_is_failed_not_ok(tmp_path, caplog) -> None:
    cfg = load_config(REPO / "site-configs" / "testbed.toml")
    c = _cluster()
    denied = FaultyBackend(c, rules={"set_site_factor": "deny"})
    p = Prioritizer(cfg, denied, Store(f"sqlite:///{tmp_path / 'p.db'}", create=True))
    m = PrioritizerMetrics(clock=lambda: 1234.0)
    loop = Loop(p, metrics=m)
    with caplog.at_level(logging.WARNING, logger="slurm_dl.prioritizer"):
        report = loop.tick()
    assert report is not None and report.updates_tried == 1 and report.updates_failed == 1
    assert report.outcome == "failed" and report.to_dict()["outcome"] == "failed"
    assert report.denied == {"site_factor": 1}  # job 2's; job 3 stays at 0
    assert "every Slurm update failed" in report.summary()
    assert "refused 1 update(s) for lack of rights" in report.summary()
    assert c.site_factor_calls == []
    s = _samples(m)
    assert s[("slurm_dl_prioritizer_cycles_total", (("outcome", "failed"),))] == 1
    assert s[("slurm_dl_prioritizer_cycles_total", (("outcome", "ok"),))] == 0
    assert s[("slurm_dl_prioritizer_updates_refused_total", (("action", "site_factor"),))] == 1
    assert s[("slurm_dl_prioritizer_last_success_timestamp_seconds", ())] == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(e.startswith("failed cycle 1:") for e in errors), errors
    assert any("adminlevel=operator" in e and "slurm-dl doctor" in e for e in errors), errors
    # the next cycle tries again (nothing was pushed), and once Slurm takes them it is ok
    denied.rules.clear()
    report = loop.tick()
    assert report.outcome == "ok" and report.pushed_jobs == 1 and not report.denied
    s = _samples(m)
    assert s[("slurm_dl_prioritizer_cycles_total", (("outcome", "ok"),))] == 1
    assert s[("slurm_dl_prioritizer_last_success_timestamp_seconds", ())] == 1234.0


# --- a GPU-type move Slurm refuses ---------------------------------------------------------
class ShimGuard(MemoryCluster):
    """A mixed cluster whose partition changes the filter's shim refuses, as slurmctld does
    for a user the shim does not trust."""

    def set_partition(self, job_id: int, partition: str) -> None:
        said = "slurm_update error: Access/permission denied"
        raise SlurmError(f"scontrol update: {said}", returncode=1, stderr=said)


def test_a_refused_move_shows_in_explain_the_record_and_metrics(tmp_path, caplog) -> None:
    from slurm_dl.core.model import Node

    cfg = load_config(REPO / "site-configs" / "testbed-mixed.toml")
    c = ShimGuard(nodes=0)
    c.nodes = [Node("gpu01", 8, "h100", gpus_used=0), Node("gpu03", 8, "v100")]
    c.add(7, 2, admin_comment=BOTH, partition="v100", comment="")
    p = Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / 'p.db'}", create=True))
    m = PrioritizerMetrics()
    loop = Loop(p, metrics=m)
    with caplog.at_level(logging.WARNING, logger="slurm_dl.prioritizer"):
        first = loop.tick()
        c.now += 5
        second = loop.tick()
    for report in (first, second):
        assert report.denied == {"partition": 1} and report.steered == {}
        # its SiteFactor was set, the move was not: some updates failed
        assert report.pushed_jobs <= 1 and report.outcome in ("degraded", "failed")
    assert first.pushed_jobs == 1 and first.outcome == "degraded"
    entry = p.store.explanation(7)["gpu_types"]
    assert entry["chosen"] == "h100" and "Access/permission denied" in entry["refused"]
    words = gpu_type_words(entry)
    assert "not moved to h100: Slurm refused the change" in words, words
    said = [d.reason for d in p.store.decisions(7) if d.kind == "gpu_type"]
    assert len(said) == 1 and said[0].startswith("not moved to h100"), said  # once, not per cycle
    warned = [r.getMessage() for r in caplog.records if "not moved to h100" in r.getMessage()]
    assert len(warned) == 1, warned
    s = _samples(m)
    assert s[("slurm_dl_prioritizer_updates_refused_total", (("action", "partition"),))] == 2


@pytest.mark.parametrize("level", ["None", None])
def test_doctor_names_the_grant_for_the_prioritizers_user(level) -> None:
    from slurm_dl.core.doctor import Facts, diagnose

    f = Facts(
        config_path="site.toml",
        controller={
            "SlurmUser": "slurm(64030)",
            "AccountingStorageType": "accounting_storage/slurmdbd",
        },
        prioritizer_user="sdl",
        prioritizer_rights=slurm_rights("sdl", 1001, "slurm", slurmdbd=True, admin_level=level),
    )
    found = [x for x in diagnose(f) if x.check == "prioritizer rights"]
    assert len(found) == 1 and found[0].status == "fail", found
    assert "adminlevel=operator" in found[0].fix
    f.prioritizer_rights = slurm_rights("sdl", 1001, "slurm", slurmdbd=True, admin_level="Operator")
    ok = [x for x in diagnose(f) if x.check == "prioritizer rights"]
    assert ok[0].status == "ok" and "Operator" in ok[0].detail
