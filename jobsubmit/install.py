"""``slurm-dl filter install``: write the shim next to slurm.conf and make sure slurm.conf loads it.

An existing site job_submit.lua is chained, not overwritten (see :mod:`jobsubmit.chain`).
If slurm.conf has no ``JobSubmitPlugins`` line, one (``JobSubmitPlugins=lua``) is appended; if it
lists other plugins, ``lua`` is added to the list. The previous file is kept as
``slurm.conf.bak-slurm-dl``. A changed plugin list takes effect after ``scontrol reconfigure``
(or a slurmctld restart); a changed job_submit.lua is re-read by slurmctld on its own (mtime).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from slurm_dl.core.config import SiteConfig
from .chain import CONF_BACKUP, UninstallResult, apply_chain, mark_newer, mtime_of, plan_chain
from .chain import uninstall as chain_uninstall
from slurm_dl.core.errors import SlurmDLError

SHIM_TEMPLATE = Path(__file__).with_name("job_submit.lua")
CLI_FILTER = Path(__file__).with_name("cli_filter.lua")  # submit hosts: the job's --signal
_PLUGINS = re.compile(r"^(\s*JobSubmitPlugins\s*=\s*)(\S*)(.*)$", re.IGNORECASE | re.MULTILINE)


class FilterInstallError(SlurmDLError, OSError):
    """The shim cannot be installed: says which file and why."""


def _lua_string(text: str, what: str = "socket path") -> str:
    if any(c in text for c in '"\\\n\r\0'):
        raise FilterInstallError(
            f"{what} {text!r} has characters a Lua string literal cannot hold here"
        )
    return text


def slurm_user_uids(slurm_conf: str) -> tuple[int, ...]:
    """root and slurm.conf's SlurmUser (Slurm's default is root): who may change a job's GPU
    request after submission without passing the filter again."""
    uids = [0]
    names = re.findall(r"^\s*SlurmUser\s*=\s*(\S+)", slurm_conf, flags=re.MULTILINE | re.IGNORECASE)
    if names:
        try:
            uid = pwd.getpwnam(names[-1]).pw_uid
        except KeyError:
            uid = None
        if uid is not None and uid not in uids:
            uids.append(uid)
    return tuple(uids)


def trusted_uids(slurm_conf: str, prioritizer_user: str | None) -> tuple[int, ...]:
    """Who may change a job after submission without passing the filter again: root,
    SlurmUser and the user the prioritizer runs as (``[prioritizer] user``), which moves
    waiting jobs between GPU-type partitions."""
    uids = list(slurm_user_uids(slurm_conf))
    if prioritizer_user:
        try:
            uid = pwd.getpwnam(prioritizer_user).pw_uid
        except KeyError:
            raise FilterInstallError(
                f"[prioritizer] user {prioritizer_user!r} is not a user on this host; "
                "create it or correct the site config"
            ) from None
        if uid not in uids:
            uids.append(uid)
    return tuple(uids)


def render_shim(
    template: str,
    socket_path: str,
    timeout_ms: int,
    failure_mode: str,
    admin_uids: tuple[int, ...] = (0,),
    *,
    class_max_minutes: dict[str, int] | None = None,
    time_guard: str = "class_max",
    breaker_failures: int = 3,
    breaker_cooldown_s: float = 5.0,
    site_script: str = "",
    partition_max_minutes: dict[str, int] | None = None,
) -> str:
    """The shim with the socket path, timeout (seconds), failure mode, admin uids, the classes'
    time maximums, the time-limit guard and the circuit breaker's settings filled in."""
    if failure_mode not in ("accept", "reject"):
        raise FilterInstallError(f"failure mode must be 'accept' or 'reject', got {failure_mode!r}")
    if not 1 <= timeout_ms <= 200:
        raise FilterInstallError(f"timeout must be 1..200 ms, got {timeout_ms}")
    if time_guard not in ("class_max", "any", "off"):
        raise FilterInstallError(
            f"time-limit guard must be class_max, any or off, got {time_guard!r}"
        )
    if not 1 <= int(breaker_failures) <= 1000 or not 0.0 < float(breaker_cooldown_s) <= 3600.0:
        raise FilterInstallError("circuit breaker: 1..1000 failures and a cool-down of 0..3600 s")
    maxima = ", ".join(
        f'["{name}"] = {int(m)}'
        for name, m in sorted((class_max_minutes or {}).items())
        if re.match(r"^[a-z_]+$", name)
    )
    part_maxima = ", ".join(
        f'["{_lua_string(name, "partition name")}"] = {int(m)}'
        for name, m in sorted((partition_max_minutes or {}).items())
    )
    return (
        template.replace("@SOCKET_PATH@", _lua_string(socket_path))
        .replace("@TIMEOUT_S@", f"{timeout_ms / 1000:.3f}")
        .replace("@FAILURE_MODE@", failure_mode)
        .replace("@ADMIN_UIDS@", ", ".join(str(int(u)) for u in admin_uids))
        .replace("@BREAKER_FAILURES@", str(int(breaker_failures)))
        .replace("@BREAKER_COOLDOWN_S@", f"{float(breaker_cooldown_s):.3f}")
        .replace("@TIME_GUARD@", time_guard)
        .replace("@CLASS_MAX_MIN@", maxima)
        .replace("@PART_MAX_MIN@", part_maxima)
        .replace(
            "@SITE_SCRIPT@", _lua_string(site_script, "site script path") if site_script else ""
        )
    )


def with_lua_plugin(slurm_conf: str) -> tuple[str, str | None]:
    """slurm.conf text that loads job_submit/lua, and what changed (None if nothing had to)."""
    matches = list(_PLUGINS.finditer(slurm_conf))
    if not matches:
        sep = "" if slurm_conf.endswith("\n") or not slurm_conf else "\n"
        return slurm_conf + sep + "JobSubmitPlugins=lua\n", "appended JobSubmitPlugins=lua"
    m = matches[-1]
    plugins = [p for p in m.group(2).split(",") if p]
    if any(p.strip().lower() in ("lua", "job_submit/lua") for p in plugins):
        return slurm_conf, None
    new_line = m.group(1) + ",".join([*plugins, "lua"]) + m.group(3)
    return slurm_conf[: m.start()] + new_line + slurm_conf[
        m.end() :
    ], f"added lua to JobSubmitPlugins ({m.group(2)})"


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.slurm-dl-tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


@dataclass(frozen=True)
class InstallResult:
    shim: Path
    slurm_conf: Path
    slurm_conf_change: str | None
    notes: tuple[str, ...] = ()


def install(
    config: SiteConfig,
    conf_dir: str | Path,
    socket_path: str | None = None,
    edit_slurm_conf: bool = True,
    force: bool = False,
) -> InstallResult:
    conf_dir = Path(conf_dir)
    slurm_conf = conf_dir / "slurm.conf"
    try:
        conf_bytes = slurm_conf.read_bytes()
        conf_text = conf_bytes.decode("utf-8")
    except OSError as e:
        raise FilterInstallError(
            f"{slurm_conf}: cannot read slurm.conf: {e.strerror or e}"
        ) from None
    except UnicodeDecodeError as e:
        raise FilterInstallError(
            f"{slurm_conf}: not UTF-8 text (byte {e.start}); cannot edit it safely"
        ) from None
    plan = plan_chain(conf_dir, force)
    shim = render_shim(
        SHIM_TEMPLATE.read_text(),
        socket_path or config.filter.socket,
        config.filter.timeout_ms,
        config.filter.failure_mode,
        trusted_uids(conf_text, config.prioritizer.user),
        class_max_minutes={c.value: cc.max_time_minutes for c, cc in config.classes.items()},
        time_guard=config.filter.time_limit_guard,
        breaker_failures=config.filter.breaker_failures,
        breaker_cooldown_s=config.filter.breaker_cooldown_seconds,
        site_script=plan.site_script,
        partition_max_minutes={
            p.name: p.max_time_minutes for p in config.partitions if p.max_time_minutes
        },
    )
    new_conf, change = with_lua_plugin(conf_text)
    if change and not edit_slurm_conf:
        raise FilterInstallError(
            f"{slurm_conf}: JobSubmitPlugins does not include lua, so slurmctld would not load the shim; "
            "add JobSubmitPlugins=lua (or run install without --no-edit-slurm-conf)"
        )
    target = conf_dir / "job_submit.lua"
    try:
        apply_chain(conf_dir, plan)
        replaced_mtime = mtime_of(target)
        _write_atomic(target, shim)
        mark_newer(target, replaced_mtime)
        if change:
            shutil.copy2(slurm_conf, conf_dir / CONF_BACKUP)  # byte for byte, for uninstall
            _write_atomic(slurm_conf, new_conf, slurm_conf.stat().st_mode & 0o7777)
    except OSError as e:
        raise FilterInstallError(f"{conf_dir}: cannot write: {e.strerror or e}") from None
    notes = list(plan.notes)
    if config.prioritizer.user:
        notes.append(
            f"changes after submission by {config.prioritizer.user} (the prioritizer's user) "
            "pass the shim"
        )
    return InstallResult(target, slurm_conf, change, tuple(notes))


def uninstall(conf_dir: str | Path, force: bool = False) -> UninstallResult:
    """Put the site's job_submit.lua and slurm.conf back as they were before ``install``."""
    return chain_uninstall(
        conf_dir, force=force, lua_plugin_conf=lambda text: with_lua_plugin(text)[0]
    )
