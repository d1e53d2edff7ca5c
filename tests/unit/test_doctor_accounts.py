"""doctor: where slurm-dl trusts a job's account (fair share, allow_accounts) or QOS (allow_qos),
Slurm must enforce associations (and QOS); without slurmdbd accounts cannot be checked at all."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.doctor import diagnose, summary
from slurm_dl.core.enforcement import (
    ENFORCE_LINE,
    account_reliance,
    enforces_associations,
    enforces_qos,
    fairshare_weight,
    qos_reliance,
    uses_slurmdbd,
)
from slurm_dl.slurm.controller import parse_show_config
from test_doctor import SHOW_CONFIG, good

ROOT = Path(__file__).resolve().parents[2]
CHECK = "accounts (AccountingStorageEnforce)"


def controller(
    storage: str = "accounting_storage/slurmdbd", enforce: str = "associations,limits"
) -> dict:
    text = SHOW_CONFIG.replace("accounting_storage/none", storage)
    return parse_show_config(text + f"AccountingStorageEnforce = {enforce}\n")


def site(policy: dict, classes: dict | None = None):
    """The testbed's site config with ``policy`` (and ``classes``) entries replaced."""
    data = tomllib.loads((ROOT / "site-configs" / "testbed.toml").read_text())
    data["policy"] = {**data["policy"], **policy}
    data["classes"] = {**data.get("classes", {}), **(classes or {})}
    return parse_config(data, base_dir=ROOT / "site-configs")


def finding(f, check: str = CHECK):
    return next(x for x in diagnose(f) if x.check == check)


@pytest.mark.parametrize(
    "value, assocs, qos",
    [
        ("associations", True, False),
        ("limits", True, False),
        ("associations,limits", True, False),
        ("safe", True, False),
        ("qos", True, True),
        ("wckeys", True, False),
        ("all", True, True),
        ("1", True, False),
        ("2", True, False),
        ("Associations,Limits,QOS", True, True),
        ("associations,limits,qos,safe,wckeys", True, True),  # how scontrol prints 'all'
        ("none", False, False),
        ("", False, False),
        (None, False, False),
        ("nojobs,nosteps", False, False),
    ],
)
def test_which_enforce_settings_check_associations_and_qos(value, assocs, qos) -> None:
    assert enforces_associations(value) is assocs and enforces_qos(value) is qos


def test_only_slurmdbd_keeps_associations() -> None:
    assert uses_slurmdbd("accounting_storage/slurmdbd")
    for t in ("accounting_storage/none", "", None, "accounting_storage/filetxt"):
        assert not uses_slurmdbd(t)


def test_what_trusts_the_account_in_a_site_config() -> None:
    testbed = load_config(ROOT / "site-configs" / "testbed.toml")  # combined, fairshare weight 0.5
    assert fairshare_weight(testbed) == 0.5
    assert account_reliance(testbed) == ["fair share in the combined mix (weight 0.5)"]
    uni = load_config(ROOT / "site-configs" / "university-small.toml")
    assert "allow_accounts on class serve" in account_reliance(uni)
    assert qos_reliance(uni) == ["allow_qos on class serve"]
    assert account_reliance(site({"mix": "fairshare"})) == ['policy.mix = "fairshare"']
    assert account_reliance(site({"mix": "las"})) == []
    assert account_reliance(site({"combined": {"weights": {"las": 1.0, "fairshare": 0.0}}})) == []
    assert fairshare_weight(site({"combined": {"tiers": [["deadline"], ["las"]]}})) == 0.0
    assert fairshare_weight(site({"combined": {"tiers": [["fairshare"]]}})) == 1.0  # unweighted: 1
    assert account_reliance(site({"mix": "las"}, {"serve": {"allow_accounts": ["*"]}})) == []
    assert account_reliance(site({"mix": "las"}, {"serve": {"allow_accounts": ["ml"]}})) == [
        "allow_accounts on class serve"
    ]


def test_nothing_trusts_accounts_nothing_to_enforce() -> None:
    f = good()
    assert finding(f).status == "ok" and "no job by its account" in finding(f).detail
    assert not [x for x in diagnose(f) if x.check.startswith("QOS")]


def test_without_slurmdbd_accounts_cannot_be_checked_at_all() -> None:
    f = good()  # accounting_storage/none
    f.account_uses = ["fair share in the combined mix (weight 0.5)"]
    x = finding(f)
    assert (
        x.status == "warn" and "cannot be checked at all" in x.detail and "fair share" in x.detail
    )
    assert (
        "accounting_storage/slurmdbd" in x.fix
        and ENFORCE_LINE in x.fix
        and "sacctmgr add user" in x.fix
    )
    assert summary(diagnose(f))["ok"]  # a warning, as doctor's other degradations


def test_slurmdbd_without_enforcement_names_the_line() -> None:
    f = good()
    f.account_uses = ["allow_accounts on class serve"]
    for enforce in ("none", "nojobs"):
        f.controller = controller(enforce=enforce)
        x = finding(f)
        assert x.status == "warn" and f"AccountingStorageEnforce={enforce}" in x.detail
        assert "allow_accounts on class serve" in x.detail and "restricted class" in x.detail
        assert x.fix.startswith(f"slurm.conf: {ENFORCE_LINE}") and "sacctmgr" in x.fix


def test_enforced_associations_pass() -> None:
    f = good()
    f.account_uses = ['policy.mix = "fairshare"']
    for enforce in ("associations", "associations,limits", "associations,limits,qos,safe"):
        f.controller = controller(enforce=enforce)
        assert finding(f).status == "ok", enforce


def test_a_class_admitted_by_qos_needs_qos_enforced() -> None:
    f = good()
    f.qos_uses = ["allow_qos on class serve"]
    q = "QOS (AccountingStorageEnforce)"
    assert (
        finding(f, q).status == "warn"
        and "AccountingStorageType=accounting_storage/none" in finding(f, q).detail
    )
    f.controller = controller(enforce="associations,limits")
    x = finding(f, q)
    assert (
        x.status == "warn"
        and "allow_qos on class serve" in x.detail
        and f"{ENFORCE_LINE},qos" in x.fix
    )
    f.controller = controller(enforce="associations,limits,qos")
    assert finding(f, q).status == "ok"


# --- the Slurm edge: which (user, account) pairs Slurm knows ------------------------------

SACCTMGR = "|root\nroot|root\n|dl\nroot|dl\nann|NLP\nann|nlp\n"  # as 22.05 prints it (+ a partition duplicate)


def test_associations_are_the_user_lines_with_accounts_lower_cased() -> None:
    from slurm_dl.slurm.accounts import parse_associations

    assert parse_associations(SACCTMGR) == {("root", "root"), ("root", "dl"), ("ann", "nlp")}
    assert parse_associations("") == frozenset()


def test_no_slurmdbd_no_associations_and_sacctmgr_is_not_asked(monkeypatch) -> None:
    from slurm_dl.slurm import accounts

    monkeypatch.setattr(accounts, "run_slurm", lambda *a, **k: pytest.fail("sacctmgr asked"))
    view = accounts.slurm_associations(controller=parse_show_config(SHOW_CONFIG))
    assert view.pairs is None and not view.enforced
    assert view.allows("ann", "made-up") is None and view.accounts_of("ann") is None


def test_associations_of_this_cluster_and_their_enforcement(monkeypatch) -> None:
    from slurm_dl.slurm import accounts

    asked = []

    def fake(argv, **kw):
        asked.append(argv)
        return type("R", (), {"stdout": SACCTMGR})()

    monkeypatch.setattr(accounts, "run_slurm", fake)
    conf = {**controller(enforce="associations,limits"), "ClusterName": "gpu-a"}
    view = accounts.slurm_associations(controller=conf)
    assert asked == [
        ["sacctmgr", "-nP", "show", "assoc", "format=user,account", "where", "cluster=gpu-a"]
    ]
    assert view.enforced and view.cluster == "gpu-a"
    assert view.allows("ann", "NLP") is True and view.allows("ann", "made-up") is False
    assert view.accounts_of("root") == {"root", "dl"}
    assert not accounts.slurm_associations(controller=controller(enforce="none")).enforced
