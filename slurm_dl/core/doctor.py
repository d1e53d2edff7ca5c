"""``slurm-dl doctor``'s verdicts: pure functions from what was observed to findings with fixes.

The command (``slurm_dl.cli.doctor_cmd``) gathers the facts (the controller's config, the
files next to slurm.conf, the socket, the database, the metrics endpoints) into a
:class:`Facts`; :func:`diagnose` turns them into one :class:`Finding` per check, each failing
or warning one naming the fix. The database's verdicts are in :mod:`.doctor_store`, the
gpu-agents' files' in :mod:`.doctor_telemetry`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .doctor_leader import leader_findings
from .doctor_store import database_findings, stale_after
from .doctor_telemetry import IGNORED_SHOWN, closed_to_users, telemetry_findings
from .enforcement import (
    ENFORCE_LINE,
    controller_accounting,
    enforces_associations,
    enforces_qos,
    uses_slurmdbd,
)
from .finding import Finding
from .priority_weights import swamp_warnings

__all__ = [
    "IGNORED_SHOWN",
    "SHIM_MARKER",
    "Facts",
    "Finding",
    "closed_to_users",
    "diagnose",
    "diagnose_uninstalled",
    "stale_after",
    "summary",
]

SHIM_MARKER = "slurm-dl job_submit shim"


@dataclass
class Facts:
    """Everything doctor looked at; None where it could not be observed (with the reason in errors)."""

    config_path: str | None = None
    config_error: str | None = None
    slurm_release: str | None = None
    supported_releases: str = ""
    backend: str = "cli"  # the Slurm backend the daemons run ([slurm] backend, or --backend)
    backend_detail: str | None = None  # pyslurm's version where it loaded
    backend_error: str | None = None  # why the chosen backend cannot run here
    controller: dict[str, str] | None = None  # scontrol show config
    controller_error: str | None = None
    slurm_conf_dir: str | None = None
    shim_text: str | None = None  # job_submit.lua next to slurm.conf (None: missing)
    shim_error: str | None = None  # why job_submit.lua could not be read here (not root?)
    socket_path: str | None = None
    socket_kind: str | None = None  # "socket" | "missing" | "not a socket"
    socket_mode: int | None = None
    socket_owner: str | None = None
    socket_connect_error: str | None = None  # None: connected
    slurm_user: str | None = None
    failure_mode: str = "accept"
    database_url: str | None = None
    db_revision: str | None = None
    db_head: str = ""
    db_error: str | None = None
    db_path: str | None = None  # the SQLite file (None: another database)
    db_owner: str | None = None  # ... and its owner
    db_damaged: bool = False  # db_error says the file is damaged
    db_locked: bool = False  # db_error says another process holds a lock
    db_write_error: str | None = None  # a write could not start: its write lock is held
    db_write_skip: str | None = None  # why the write check could not run
    db_lock_holders: list[tuple[int, str, str]] = field(
        default_factory=list
    )  # (pid, user, command) of the processes holding its write lock
    last_cycle_at: float | None = None
    leader: dict[str, Any] | None = None  # the leader lease row (doctor_leader.py)
    leader_read: bool = False  # ... read from the database (not where it failed)
    leader_gauge: float | None = None  # this host's slurm_dl_prioritizer_leader (None: unread)
    hostname: str = ""
    now: float = 0.0
    interval_s: float = 5.0
    site_factor_max: int = 1
    site_factor_levels: int = 2
    metrics: dict[str, tuple[int | None, str | None]] = field(
        default_factory=dict
    )  # daemon -> (port, error)
    cluster_diffs: list[Any] | None = None  # cluster_match.Difference; None: slurm.conf not read
    cluster_error: str | None = None
    site_factors: dict[int, int] | None = None  # job -> SiteFactor (sprio), for --uninstalled
    db_present: bool = False  # a store exists at the database URL (--uninstalled)
    unit_files: list[str] = field(
        default_factory=list
    )  # slurm-dl units left in /etc/systemd/system
    account_uses: list[str] = field(
        default_factory=list
    )  # what in the site config trusts a job's account
    qos_uses: list[str] = field(
        default_factory=list
    )  # ... and its QOS (enforcement.account_reliance)
    telemetry_dir: str | None = None  # [telemetry] exposition_dir (None: no telemetry)
    telemetry_error: str | None = None  # the directory cannot be read
    telemetry_read: int = 0  # agent files used
    telemetry_trusted: tuple[str, ...] = ()  # who may own a file used
    telemetry_ignored: list[tuple[str, str, str]] = field(default_factory=list)  # (file, why, fix)
    telemetry_problems: list[str] = field(default_factory=list)  # about the directory itself
    telemetry_bad_lines: dict[str, int] = field(default_factory=dict)  # file used -> lines skipped
    telemetry_newest: dict[str, float] = field(
        default_factory=dict
    )  # file used -> its newest sample's time
    telemetry_stale_after_s: float | None = None  # how old that may be (None: not checked)
    prioritizer_user: str | None = None  # [prioritizer] user, else SlurmUser
    prioritizer_uid: int | None = None  # None: no such user on this host
    prioritizer_rights: Any = None  # rights.Rights of that user; None: not checked
    unit_user: str | None = None  # User= of the installed prioritizer unit
    several_gpu_types: bool = False  # the prioritizer moves jobs between GPU-type partitions
    telemetry_path_modes: list[tuple[str, int]] = field(
        default_factory=list
    )  # each directory from / down to exposition_dir that exists, with its mode


def diagnose(f: Facts) -> list[Finding]:
    out: list[Finding] = []
    add = out.append
    if f.config_error:
        add(
            Finding(
                "site config",
                "fail",
                f.config_error,
                "write /etc/slurm-dl/site.toml (see site-configs/) or pass --config; "
                "check it with: slurm-dl config check FILE",
            )
        )
        return out
    add(Finding("site config", "ok", f"{f.config_path}"))
    _slurm(f, add)
    _backend(f, add)
    _rights(f, add)
    _cluster(f, add)
    _shim(f, add)
    _socket(f, add)
    database_findings(f, add)
    leader_findings(f, add)
    _metrics(f, add)
    telemetry_findings(f, add)
    return out


def _backend(f: Facts, add) -> None:
    """Which Slurm backend the filter service, the prioritizer and explain run, and whether it
    can run here."""
    if f.backend_error:
        add(
            Finding(
                "Slurm backend",
                "fail",
                f"{f.backend}: {f.backend_error}",
                f"build pyslurm for Slurm {f.slurm_release or '(this release)'}, or set "
                '[slurm] backend = "cli"',
            )
        )
    elif f.backend == "pyslurm":
        add(
            Finding(
                "Slurm backend",
                "ok",
                f"pyslurm {f.backend_detail or '?'} (its library for jobs; Slurm's "
                "commands for nodes, partitions, topology and SiteFactors)",
            )
        )
    else:
        add(Finding("Slurm backend", "ok", "cli (Slurm's own commands)"))


def _slurm(f: Facts, add) -> None:
    if f.slurm_release is None:
        add(
            Finding(
                "Slurm release",
                "fail",
                f.controller_error or "scontrol not found",
                f"install the Slurm clients of a supported release ({f.supported_releases}) and set SLURM_CONF",
            )
        )
    else:
        add(
            Finding("Slurm release", "ok", f"{f.slurm_release} (supported: {f.supported_releases})")
        )
    if f.controller is None:
        add(
            Finding(
                "slurmctld",
                "fail",
                f.controller_error or "no answer to scontrol show config",
                "start slurmctld (systemctl start slurmctld) and check SLURM_CONF",
            )
        )
        return
    conf = {k.lower(): v for k, v in f.controller.items()}
    add(Finding("slurmctld", "ok", f"answers; SLURM_CONF={f.controller.get('SLURM_CONF', '?')}"))
    ptype = conf.get("prioritytype", "")
    if "multifactor" in ptype:
        add(Finding("PriorityType", "ok", ptype))
    else:
        add(
            Finding(
                "PriorityType",
                "fail",
                f"PriorityType={ptype or '?'}: SiteFactor has no effect",
                "slurm.conf: PriorityType=priority/multifactor, then scontrol reconfigure",
            )
        )
    plugins = [
        p.strip()
        for p in conf.get("jobsubmitplugins", "").replace("(null)", "").split(",")
        if p.strip()
    ]
    if any(p in ("lua", "job_submit/lua") for p in plugins):
        add(Finding("JobSubmitPlugins", "ok", ",".join(plugins)))
    else:
        add(
            Finding(
                "JobSubmitPlugins",
                "fail",
                f"JobSubmitPlugins={','.join(plugins) or '(none)'}: the filter never runs",
                "slurm-dl filter install --slurm-conf-dir DIR (adds lua), then restart slurmctld",
            )
        )
    topo = conf.get("topologyplugin", "")
    if "tree" in topo:
        add(Finding("TopologyPlugin", "ok", topo))
    else:
        add(
            Finding(
                "TopologyPlugin",
                "warn",
                f"TopologyPlugin={topo or '(none)'}: multi-node jobs are not kept under one switch",
                "slurm.conf: TopologyPlugin=topology/tree with a topology.conf",
            )
        )
    for line in swamp_warnings(f.site_factor_max, f.site_factor_levels, f.controller):
        add(
            Finding(
                "SiteFactor vs PriorityWeight*",
                "warn",
                line,
                "see the admin guide, 'SiteFactor and the site's weights'",
            )
        )
    _accounts(f, add)


_SACCTMGR = (
    "create every account and user with sacctmgr (sacctmgr add account NAME; sacctmgr add user "
    "NAME account=NAME)"
)


def _accounts(f: Facts, add) -> None:
    """Slurm must refuse accounts (and QOS) a user may not use wherever slurm-dl trusts them."""
    storage, enforce = controller_accounting(f.controller or {})
    check = "accounts (AccountingStorageEnforce)"
    uses = "; ".join(f.account_uses)
    if not f.account_uses:
        add(Finding(check, "ok", "the site config ranks and admits no job by its account"))
    elif not uses_slurmdbd(storage):
        add(
            Finding(
                check,
                "warn",
                f"AccountingStorageType={storage or '(none)'}: without slurmdbd Slurm has no "
                f"associations, so accounts cannot be checked at all and any --account is accepted; {uses} "
                "take it on trust (a made-up account gets a fresh fair share, naming an allowed account "
                "opens a restricted class)",
                f"run slurmdbd (AccountingStorageType=accounting_storage/slurmdbd), {_SACCTMGR}, then "
                f"slurm.conf: {ENFORCE_LINE} and restart slurmctld",
            )
        )
    elif not enforces_associations(enforce):
        add(
            Finding(
                check,
                "warn",
                f"AccountingStorageEnforce={enforce or 'none'}: Slurm accepts any --account, "
                f"even one the user is not in or that does not exist; {uses} take it on trust (a made-up "
                "account gets a fresh fair share, naming an allowed account opens a restricted class)",
                f"slurm.conf: {ENFORCE_LINE} ({_SACCTMGR} first, or their jobs are refused), then restart "
                "slurmctld",
            )
        )
    else:
        add(
            Finding(
                check,
                "ok",
                f"AccountingStorageEnforce={enforce}: Slurm refuses accounts a user is not in",
            )
        )
    if not f.qos_uses:
        return
    check = "QOS (AccountingStorageEnforce)"
    if uses_slurmdbd(storage) and enforces_qos(enforce):
        add(
            Finding(
                check,
                "ok",
                f"AccountingStorageEnforce={enforce}: Slurm refuses a QOS the user may not use",
            )
        )
        return
    setting = (
        f"AccountingStorageEnforce={enforce or 'none'}"
        if uses_slurmdbd(storage)
        else f"AccountingStorageType={storage or '(none)'}"
    )
    add(
        Finding(
            check,
            "warn",
            f"{setting}: Slurm does not check that a user may use the QOS a job names; "
            f"{'; '.join(f.qos_uses)} take it on trust",
            f"slurm.conf: {ENFORCE_LINE},qos (with slurmdbd; each user's QOS given with sacctmgr modify "
            "user NAME set qos=...), then restart slurmctld",
        )
    )


_ADMIN_UIDS = re.compile(r"^local ADMIN_UIDS = \{([^}]*)\}", re.MULTILINE)


def shim_trusted_uids(shim_text: str) -> set[int] | None:
    """The uids an installed shim lets change jobs after submission (None: cannot tell)."""
    m = _ADMIN_UIDS.search(shim_text)
    if m is None:
        return None
    return {int(u) for u in re.findall(r"\d+", m.group(1))}


def _rights(f: Facts, add) -> None:
    """The prioritizer's user: operator rights in Slurm, the unit that runs it, the shim's trust."""
    r, user = f.prioritizer_rights, f.prioritizer_user
    if r is None or user is None:
        return
    status = {True: "ok", False: "fail", None: "warn"}[r.ok]
    add(Finding("prioritizer rights", status, r.detail, r.fix))
    if f.unit_user and f.unit_user != user:
        add(
            Finding(
                "prioritizer user",
                "fail",
                f"its unit runs it as {f.unit_user}, but the site config's "
                f"[prioritizer] user (else SlurmUser) is {user}",
                f'set [prioritizer] user = "{f.unit_user}" in the site config, then run '
                "slurm-dl filter install again and slurm-dl doctor",
            )
        )
    if not f.several_gpu_types or not f.shim_text or SHIM_MARKER not in f.shim_text:
        return
    trusted = shim_trusted_uids(f.shim_text)
    if trusted is None or f.prioritizer_uid is None:
        return
    if f.prioritizer_uid in trusted:
        add(Finding("filter trusts the prioritizer", "ok", f"job_submit.lua trusts {user}"))
    else:
        add(
            Finding(
                "filter trusts the prioritizer",
                "fail",
                f"job_submit.lua refuses {user}'s moves between GPU-type partitions",
                "slurm-dl filter install --slurm-conf-dir DIR (it trusts [prioritizer] user, "
                "else SlurmUser)",
            )
        )


def _cluster(f: Facts, add) -> None:
    check = "site config vs Slurm"
    if f.cluster_error:
        add(Finding(check, "skip", f.cluster_error))
    elif f.cluster_diffs is None:
        return
    elif not f.cluster_diffs:
        add(
            Finding(
                check, "ok", "node groups, GPU types and counts, partitions and time limits match"
            )
        )
    for d in f.cluster_diffs or []:
        add(Finding(check, "fail", d.line(), d.fix))


def _shim(f: Facts, add) -> None:
    where = f"{f.slurm_conf_dir}/job_submit.lua" if f.slurm_conf_dir else "job_submit.lua"
    if f.slurm_conf_dir is None:
        add(
            Finding(
                "job_submit.lua",
                "skip",
                "slurm.conf's directory is unknown (slurmctld did not answer)",
            )
        )
    elif f.shim_error is not None:
        add(
            Finding(
                "job_submit.lua",
                "skip",
                f"{where} cannot be read here ({f.shim_error}): run doctor as root to check it",
            )
        )
    elif f.shim_text is None:
        add(
            Finding(
                "job_submit.lua",
                "fail",
                f"{where} is missing",
                f"slurm-dl filter install --slurm-conf-dir {f.slurm_conf_dir}",
            )
        )
    elif SHIM_MARKER not in f.shim_text:
        add(
            Finding(
                "job_submit.lua",
                "fail",
                f"{where} is not slurm-dl's shim (another script is installed)",
                "chain it: call the other script's slurm_job_submit from slurm-dl's, or reinstall with "
                f"slurm-dl filter install --slurm-conf-dir {f.slurm_conf_dir}",
            )
        )
    elif f.socket_path and f'"{f.socket_path}"' not in f.shim_text:
        add(
            Finding(
                "job_submit.lua",
                "fail",
                f"{where} talks to another socket than {f.socket_path}",
                f"slurm-dl filter install --slurm-conf-dir {f.slurm_conf_dir} --socket {f.socket_path}",
            )
        )
    else:
        add(Finding("job_submit.lua", "ok", f"{where} (socket {f.socket_path})"))


def _socket(f: Facts, add) -> None:
    what = f"filter socket {f.socket_path}"
    if f.socket_kind == "missing":
        add(
            Finding(
                "filter socket",
                "fail",
                f"{what} does not exist: the filter service is not running; "
                f"submissions {'go in unfiltered' if f.failure_mode == 'accept' else 'are refused'}",
                "systemctl start slurm-dl-filter (or: slurm-dl filter serve)",
            )
        )
        return
    if f.socket_kind != "socket":
        add(
            Finding(
                "filter socket",
                "fail",
                f"{what} is not a socket",
                "remove it and restart the filter service",
            )
        )
        return
    problems = []
    if f.socket_mode is not None and f.socket_mode & 0o077:
        problems.append(f"mode {f.socket_mode:o} lets other users submit decisions")
    if (
        f.slurm_user
        and f.socket_owner
        and f.socket_owner not in (f.slurm_user, "root")
        and f.slurm_user != "root"
    ):
        problems.append(f"owned by {f.socket_owner}, but slurmctld runs as {f.slurm_user}")
    if f.socket_connect_error:
        add(
            Finding(
                "filter socket",
                "fail",
                f"{what}: cannot connect: {f.socket_connect_error}",
                "restart the filter service: systemctl restart slurm-dl-filter",
            )
        )
    elif problems:
        add(
            Finding(
                "filter socket",
                "fail",
                f"{what}: " + "; ".join(problems),
                f"run the filter service as {f.slurm_user} (the unit's User=) or with --owner {f.slurm_user}",
            )
        )
    else:
        add(
            Finding(
                "filter socket",
                "ok",
                f"{what} answers (mode {f.socket_mode or 0:o}, owner {f.socket_owner})",
            )
        )


def _metrics(f: Facts, add) -> None:
    for daemon, (port, error) in sorted(f.metrics.items()):
        if port is None:
            add(
                Finding(
                    f"{daemon} metrics",
                    "warn",
                    "no metrics port configured: a dead daemon goes unnoticed",
                    f"set [{daemon}] metrics_port in the site config (and scrape it)",
                )
            )
        elif error:
            add(
                Finding(
                    f"{daemon} metrics",
                    "fail",
                    f"port {port}: {error}",
                    f"is slurm-dl-{daemon} running with this site config?",
                )
            )
        else:
            add(Finding(f"{daemon} metrics", "ok", f"http://127.0.0.1:{port}/metrics answers"))


def diagnose_uninstalled(f: Facts) -> list[Finding]:
    """An intentionally uninstalled host: nothing of slurm-dl still acts on the cluster."""
    out: list[Finding] = []
    add = out.append
    if f.controller is None:
        add(
            Finding(
                "slurmctld",
                "fail",
                f.controller_error or "no answer to scontrol show config",
                "start slurmctld: the checks below need it",
            )
        )
    where = f"{f.slurm_conf_dir}/job_submit.lua" if f.slurm_conf_dir else "job_submit.lua"
    if f.slurm_conf_dir is None:
        add(
            Finding(
                "job_submit.lua",
                "skip",
                "slurm.conf's directory is unknown (slurmctld did not answer)",
            )
        )
    elif f.shim_text is not None and SHIM_MARKER in f.shim_text:
        add(
            Finding(
                "job_submit.lua",
                "fail",
                f"{where} is still slurm-dl's shim",
                f"slurm-dl filter uninstall --slurm-conf-dir {f.slurm_conf_dir}",
            )
        )
    else:
        add(
            Finding(
                "job_submit.lua",
                "ok",
                f"{where} is {'the site' + chr(39) + 's own' if f.shim_text else 'absent'}",
            )
        )
    if f.socket_kind in (None, "missing"):
        add(Finding("filter service", "ok", f"no socket {f.socket_path}"))
    else:
        add(
            Finding(
                "filter service",
                "fail",
                f"{f.socket_path} still exists: the filter service may run",
                "systemctl disable --now slurm-dl-filter",
            )
        )
    if f.last_cycle_at is not None and f.now - f.last_cycle_at <= stale_after(f.interval_s):
        add(
            Finding(
                "prioritizer",
                "warn",
                f"a cycle was saved {f.now - f.last_cycle_at:.0f} s ago: does it still run?",
                "systemctl disable --now slurm-dl-prioritizer, then slurm-dl prioritizer reset",
            )
        )
    else:
        add(Finding("prioritizer", "ok", "no recent cycle"))
    if f.site_factors is not None:
        carrying = sorted(j for j, v in f.site_factors.items() if v)
        if carrying:
            shown = ", ".join(map(str, carrying[:10])) + (" …" if len(carrying) > 10 else "")
            add(
                Finding(
                    "SiteFactor",
                    "fail",
                    f"{len(carrying)} job(s) still carry a SiteFactor: {shown}",
                    "slurm-dl prioritizer reset --all-pending (after the prioritizer is stopped)",
                )
            )
        else:
            add(Finding("SiteFactor", "ok", "no job carries one"))
    for daemon, (port, error) in sorted(f.metrics.items()):
        if port is not None and error is None:
            add(
                Finding(
                    f"{daemon} metrics",
                    "fail",
                    f"port {port} still answers: slurm-dl-{daemon} runs",
                    f"systemctl disable --now slurm-dl-{daemon}",
                )
            )
    if f.unit_files:
        add(
            Finding(
                "units",
                "warn",
                f"still installed: {', '.join(f.unit_files)}",
                "rm /etc/systemd/system/slurm-dl-*.service && systemctl daemon-reload",
            )
        )
    if f.db_present:
        add(
            Finding(
                "database",
                "warn",
                f"{f.database_url} still holds the ledger",
                "remove it once not needed (PostgreSQL: DROP DATABASE and DROP ROLE)",
            )
        )
    return out


def summary(findings: list[Finding]) -> dict[str, Any]:
    counts = {s: sum(1 for x in findings if x.status == s) for s in ("ok", "warn", "fail", "skip")}
    return {
        "ok": counts["fail"] == 0,
        "counts": counts,
        "findings": [x.to_dict() for x in findings],
    }
