"""What Slurm's accounting enforces, and what in a site config takes a job's account on trust.

slurm-dl's fair share charges and ranks by the account a job names, and a class's
``allow_accounts`` / ``allow_qos`` admit by the account or QOS it names. Slurm checks those names
only where it keeps associations (``AccountingStorageType=accounting_storage/slurmdbd``) **and**
enforces them (``AccountingStorageEnforce``): elsewhere ``--account=anything`` is accepted, so a
made-up account starts with a fresh fair-share factor and naming an allowed account opens a
restricted class.

In Slurm's parser (``src/common/read_config.c``, the same in 22.05, 24.11 and 26.05)
``associations`` (or ``1``), ``limits`` (``2``), ``safe``, ``qos`` and ``wckeys`` each turn
association enforcement on, ``all`` everything; ``scontrol show config`` prints the resulting
flags (``limits`` shows as ``associations,limits``). QOS access is checked only with ``qos``
(or ``all``). Pure: plain strings and the site config in, answers out.
"""

from __future__ import annotations

from typing import Mapping

from .config import SiteConfig

SLURMDBD = "accounting_storage/slurmdbd"
ASSOCIATION_FLAGS = frozenset({"associations", "1", "limits", "2", "safe", "qos", "wckeys", "all"})
QOS_FLAGS = frozenset({"qos", "all"})
ENFORCE_LINE = "AccountingStorageEnforce=associations,limits"


def enforce_flags(value: str | None) -> frozenset[str]:
    """``AccountingStorageEnforce``'s comma-separated flags, lower case (``none``/unset: none)."""
    flags = {t.strip().lower() for t in (value or "").split(",")}
    return frozenset(flags - {"", "none", "(null)", "0"})


def enforces_associations(value: str | None) -> bool:
    """Whether ``AccountingStorageEnforce`` makes Slurm refuse a job whose user and account have
    no association."""
    return bool(enforce_flags(value) & ASSOCIATION_FLAGS)


def enforces_qos(value: str | None) -> bool:
    """Whether it makes Slurm refuse a QOS the job's association may not use."""
    return bool(enforce_flags(value) & QOS_FLAGS)


def uses_slurmdbd(storage_type: str | None) -> bool:
    """Whether ``AccountingStorageType`` keeps associations at all (only slurmdbd does)."""
    return (storage_type or "").strip().lower() in (SLURMDBD, "slurmdbd")


def fairshare_weight(config: SiteConfig) -> float:
    """How much fair share counts in the site's policy: 1 for ``mix = "fairshare"``, the
    combined mix's weight when it is one of its components, else 0."""
    policy = config.policy
    if policy.mix == "fairshare":
        return 1.0
    if policy.mix != "combined" or not any("fairshare" in tier for tier in policy.combined.tiers):
        return 0.0
    return float(policy.combined.weights.get("fairshare", 1.0))


def _restricted(config: SiteConfig, field: str) -> list[str]:
    out = []
    for name, c in sorted(config.classes.items(), key=lambda kv: kv[0].value):
        names = getattr(c, field, None)
        if names and "*" not in names:
            out.append(name.value)
    return out


def account_reliance(config: SiteConfig) -> list[str]:
    """What in ``config`` trusts the account a job names, in words (empty: nothing does)."""
    out = []
    weight = fairshare_weight(config)
    if weight > 0:
        if config.policy.mix == "fairshare":
            out.append('policy.mix = "fairshare"')
        else:
            out.append(f"fair share in the combined mix (weight {weight:g})")
    classes = _restricted(config, "allow_accounts")
    if classes:
        out.append("allow_accounts on class " + ", ".join(classes))
    return out


def qos_reliance(config: SiteConfig) -> list[str]:
    """The classes that admit by the QOS a job names (``allow_qos``)."""
    classes = _restricted(config, "allow_qos")
    return ["allow_qos on class " + ", ".join(classes)] if classes else []


def controller_accounting(controller: Mapping[str, str]) -> tuple[str, str]:
    """(AccountingStorageType, AccountingStorageEnforce) from ``scontrol show config``'s pairs."""
    conf = {k.lower(): v for k, v in controller.items()}
    return conf.get("accountingstoragetype", ""), conf.get("accountingstorageenforce", "")
