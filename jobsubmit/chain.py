"""Living with a site's own job_submit.lua: ``filter install`` chains it, ``filter uninstall``
puts everything back byte for byte.

Install, when ``job_submit.lua`` exists and is not our shim: it is kept as
``job_submit.lua.bak-slurm-dl`` (an exact copy, mode kept) and, when it can be chained, copied
to ``job_submit_site.lua``, which the shim loads in its own environment and calls first (a
rejection by either stands). A script the shim cannot chain (it does not parse, defines no
``slurm_job_submit``, or changes function environments itself) is refused unless ``--force``,
which installs the shim alone and keeps the backup. Uninstall restores the backup (or removes
the shim when there was none), removes the copy, and restores ``slurm.conf`` from
``slurm.conf.bak-slurm-dl`` when it is still exactly what install made of it. Edits made since
install are never lost without ``--force``: an edited ``slurm.conf`` or an edited
``job_submit_site.lua`` makes uninstall refuse and say so; with ``--force`` slurm.conf's backup
is restored over its edits, and the edited site copy (not the older backup) becomes job_submit.lua.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurm_dl.core.errors import SlurmDLError

SHIM_MARK = b"slurm-dl job_submit shim"
BACKUP = "job_submit.lua.bak-slurm-dl"
SITE_COPY = "job_submit_site.lua"
CONF_BACKUP = "slurm.conf.bak-slurm-dl"


def mark_newer(path: Path, replaced_mtime: float | None) -> None:
    """Give ``path`` an mtime slurmctld sees as new.

    slurmctld keeps the whole-second mtime of the script it last loaded and re-reads the file only
    when the file's whole-second mtime is greater. A file replaced within the same second as the
    one before it (install then uninstall in one second), or restored with its old mtime, would be
    ignored until slurmctld restarts. So the mtime is now, or one second past the replaced file's."""
    now = time.time()
    if replaced_mtime is not None and int(now) <= int(replaced_mtime):
        now = float(int(replaced_mtime) + 1)
    os.utime(path, (now, now))


def mtime_of(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


class ChainError(SlurmDLError, OSError):
    """The site's script cannot be chained, or an uninstall would lose someone's edits."""


def is_shim(data: bytes) -> bool:
    return SHIM_MARK in data[:400]


def chain_problems(data: bytes) -> list[str]:
    """Why the shim cannot chain this script (empty when it can)."""
    problems = []
    text = data.decode("utf-8", errors="replace")
    code = re.sub(r"--[^\n]*", "", text)  # comments do not count
    if not re.search(r"\bslurm_job_submit\b", code):
        problems.append("it defines no slurm_job_submit function")
    if re.search(r"\b(setfenv|getfenv)\b", code):
        problems.append(
            "it changes function environments (setfenv/getfenv), which chaining needs for itself"
        )
    luac = shutil.which("luac5.1")
    if luac is not None:
        out = subprocess.run([luac, "-p", "-"], input=data, capture_output=True, timeout=30)
        if out.returncode != 0:
            problems.append(
                "Lua 5.1 cannot parse it: " + out.stderr.decode(errors="replace").strip()[:200]
            )
    return problems


@dataclass
class ChainPlan:
    """What install will do about an existing job_submit.lua (decided before anything is written)."""

    backup: bool = False
    site_script: str = ""
    notes: list[str] = field(default_factory=list)


def plan_chain(conf_dir: Path, force: bool) -> ChainPlan:
    target = conf_dir / "job_submit.lua"
    if not target.exists():
        return ChainPlan()
    try:
        data = target.read_bytes()
    except OSError as e:
        raise ChainError(f"{target}: cannot read: {e.strerror or e}") from None
    if is_shim(data):  # a re-install: keep chaining what was chained
        copy = conf_dir / SITE_COPY
        return ChainPlan(site_script=str(copy.resolve()) if copy.exists() else "")
    problems = chain_problems(data)
    if problems and not force:
        raise ChainError(
            f"{target}: the site's job_submit.lua cannot be chained: {'; '.join(problems)}. "
            f"Fix it, or run with --force to install slurm-dl's shim alone (the site script is "
            f"kept as {BACKUP} and comes back with `slurm-dl filter uninstall`)"
        )
    if problems:
        return ChainPlan(
            backup=True,
            notes=[
                f"--force: the site script is NOT chained ({'; '.join(problems)}); kept as {BACKUP}"
            ],
        )
    return ChainPlan(
        backup=True,
        site_script=str((conf_dir / SITE_COPY).resolve()),
        notes=[
            f"chained the site's job_submit.lua (copied to {SITE_COPY}, backup {BACKUP}); "
            "both decide, a rejection by either stands"
        ],
    )


def apply_chain(conf_dir: Path, plan: ChainPlan) -> None:
    """Make the backup and the site copy (exact bytes, mode kept) before the shim replaces the file."""
    target = conf_dir / "job_submit.lua"
    if plan.backup:
        shutil.copy2(target, conf_dir / BACKUP)
        if plan.site_script:
            shutil.copy2(target, conf_dir / SITE_COPY)


@dataclass(frozen=True)
class UninstallResult:
    actions: list[str]


def uninstall(
    conf_dir: str | Path, *, force: bool = False, lua_plugin_conf=None
) -> UninstallResult:
    """Undo ``install``: the site's job_submit.lua and slurm.conf come back byte for byte.

    ``lua_plugin_conf`` maps the original slurm.conf text to what install wrote (to tell whether
    someone edited slurm.conf since; then it is left alone unless ``force``). A chained site script
    edited since install (``job_submit_site.lua`` no longer equals the backup) is refused too; with
    ``force`` the edited copy becomes job_submit.lua and the older backup stays where it is."""
    conf_dir = Path(conf_dir)
    target = conf_dir / "job_submit.lua"
    try:
        current = target.read_bytes()
    except FileNotFoundError:
        raise ChainError(f"{target}: not there; nothing to uninstall") from None
    except OSError as e:
        raise ChainError(f"{target}: cannot read: {e.strerror or e}") from None
    if not is_shim(current):
        raise ChainError(f"{target}: not slurm-dl's shim; nothing to uninstall (left as it is)")
    conf, conf_backup = conf_dir / "slurm.conf", conf_dir / CONF_BACKUP
    backup, copy = conf_dir / BACKUP, conf_dir / SITE_COPY
    problems = []
    restore_conf = conf_backup.exists()
    if restore_conf and _conf_edited(conf, conf_backup, lua_plugin_conf) and not force:
        problems.append(
            f"{conf}: changed since slurm-dl's install; not restoring {CONF_BACKUP} over those edits. "
            "Remove lua from JobSubmitPlugins by hand, or run with --force to restore the backup."
        )
    site_edited = _site_copy_edited(copy, backup)
    if site_edited and not force:
        problems.append(
            f"{copy}: the site's script was edited since slurm-dl's install; restoring {BACKUP} would lose "
            f"those edits. Run with --force to make the edited copy job_submit.lua (the older one stays as "
            f"{BACKUP}), or copy it over {BACKUP} first."
        )
    if problems:
        raise ChainError(" ".join(problems).removesuffix("."))
    actions = []
    shim_mtime = mtime_of(target)
    if site_edited:
        os.replace(copy, target)
        mark_newer(target, shim_mtime)
        kept = f"; the copy from before install stays as {BACKUP}" if backup.exists() else ""
        actions.append(f"--force: the site's edited {SITE_COPY} is now job_submit.lua{kept}")
    elif backup.exists():
        os.replace(backup, target)
        mark_newer(target, shim_mtime)
        actions.append(f"restored the site's job_submit.lua from {BACKUP}")
    else:
        target.unlink()
        actions.append("removed job_submit.lua (there was none before)")
    if copy.exists():
        copy.unlink()
        actions.append(f"removed {SITE_COPY}")
    if restore_conf:
        os.replace(conf_backup, conf)
        actions.append(f"restored slurm.conf from {CONF_BACKUP}; run `scontrol reconfigure`")
    return UninstallResult(actions)


def _conf_edited(conf: Path, conf_backup: Path, lua_plugin_conf) -> bool:
    """Whether slurm.conf differs from what install made of the backup."""
    original = conf_backup.read_bytes()
    expected = original
    if lua_plugin_conf is not None:
        try:
            expected = lua_plugin_conf(original.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            expected = original
    return conf.read_bytes() != expected


def _site_copy_edited(copy: Path, backup: Path) -> bool:
    """Whether the chained copy of the site's script holds something the backup does not: edited
    since install, or its backup gone (restoring would then drop the site's script)."""
    try:
        data = copy.read_bytes()
    except FileNotFoundError:
        return False
    except OSError as e:
        raise ChainError(f"{copy}: cannot read: {e.strerror or e}") from None
    try:
        return data != backup.read_bytes()
    except FileNotFoundError:
        return True
    except OSError as e:
        raise ChainError(f"{backup}: cannot read: {e.strerror or e}") from None
