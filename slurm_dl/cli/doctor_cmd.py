"""``slurm-dl doctor``: check a live installation end to end; each problem with its fix."""

from __future__ import annotations

import json
import os
import pwd
import socket
import stat
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Optional

import typer

from ..core.doctor import Facts, diagnose, diagnose_uninstalled, summary
from .backend_opt import BackendOpt
from .config_file import ConfigOpt, DbOpt, config_path
from ..core.database_url import database_url, shown_url, sqlite_path

HELP = """Check a live installation: Slurm release and plugins, the slurm.conf
settings (accounts enforced where fair share or a class trusts them),
the site config against the cluster (sinfo: nodes, GPU types and counts,
partitions, time limits), job_submit.lua, the filter socket, the
database (schema, integrity, locks: a SQLite write lock another
process holds, named with that process), the prioritizer's last cycle,
the metrics endpoints and the files of the GPU agents (each one ignored,
with why: its owner, its mode, its name; each one whose newest sample is
too old for idle detection). Prints each problem with its fix; exits 1
when something fails (warnings do not). It changes nothing: its write
check on a SQLite ledger begins a transaction and rolls it back.

With --uninstalled, check instead that nothing of slurm-dl still acts on
the cluster: its shim, the services, SiteFactors on jobs.

\b
Examples:
  slurm-dl doctor
  slurm-dl doctor --config /etc/slurm-dl/site.toml --json
  slurm-dl doctor --uninstalled
"""

BUSY_TIMEOUT_S = 5.0  # how long doctor waits for another process's lock on a SQLite store
_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def doctor(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    slurm_conf_dir: Optional[Path] = typer.Option(
        None, "--slurm-conf-dir", help="directory of slurm.conf (default: from slurmctld)"
    ),
    sock: Optional[str] = typer.Option(
        None, "--socket", help="filter socket (default: [filter] socket)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the findings as JSON"),
    uninstalled: bool = typer.Option(
        False,
        "--uninstalled",
        help="check a host slurm-dl was removed from: nothing of it still "
        "acts (shim, services, SiteFactors)",
    ),
    backend: Optional[str] = BackendOpt,
) -> None:
    if uninstalled:
        facts = gather_uninstalled(config, db, slurm_conf_dir, sock)
        findings = diagnose_uninstalled(facts)
    else:
        facts = gather(config, db, slurm_conf_dir, sock, backend)
        findings = diagnose(facts)
    result = summary(findings)
    if as_json:
        typer.echo(json.dumps(result, sort_keys=True))
    else:
        for x in findings:
            typer.echo(
                textwrap.fill(
                    f"{_MARK[x.status]}  {x.check}: {x.detail}",
                    80,
                    subsequent_indent="      ",
                    break_on_hyphens=False,
                    break_long_words=False,
                )
            )
            if x.fix and x.status in ("fail", "warn"):
                typer.echo(
                    textwrap.fill(
                        f"fix: {x.fix}",
                        80,
                        initial_indent="      ",
                        subsequent_indent="        ",
                        break_on_hyphens=False,
                        break_long_words=False,
                    )
                )
        c = result["counts"]
        typer.echo(f"{c['fail']} problem(s), {c['warn']} warning(s), {c['ok']} check(s) passed")
    if not result["ok"]:
        raise typer.Exit(1)


def gather(
    config: Optional[Path],
    db: Optional[str],
    slurm_conf_dir: Optional[Path],
    sock: Optional[str],
    backend: Optional[str] = None,
) -> Facts:
    from .config_file import load_config
    from ..core.enforcement import account_reliance, qos_reliance
    from ..core.errors import SlurmDLError
    from ..slurm.dialects import supported_text

    f = Facts(now=time.time(), supported_releases=supported_text())
    try:
        path = config_path(config)
        cfg = load_config(path)
        f.config_path = str(path)
    except SlurmDLError as e:
        f.config_error = str(e).replace("\n", " ")
        return f
    pc = cfg.prioritizer
    f.interval_s, f.site_factor_max, f.site_factor_levels = (
        pc.interval_seconds,
        pc.site_factor_max,
        pc.site_factor_levels,
    )
    f.failure_mode = cfg.filter.failure_mode
    f.account_uses, f.qos_uses = account_reliance(cfg), qos_reliance(cfg)
    _slurm(f)
    slurm = _backend(f, cfg, backend)
    conf_file = (f.controller or {}).get("SLURM_CONF") or os.environ.get("SLURM_CONF")
    if slurm_conf_dir is not None:
        f.slurm_conf_dir = str(slurm_conf_dir)
    elif conf_file:
        f.slurm_conf_dir = str(Path(conf_file).parent)
    if f.slurm_conf_dir:
        f.shim_text, f.shim_error = _read_shim(Path(f.slurm_conf_dir) / "job_submit.lua")
        _cluster(
            f,
            slurm,
            cfg,
            Path(conf_file)
            if conf_file and slurm_conf_dir is None
            else Path(f.slurm_conf_dir) / "slurm.conf",
        )
    f.slurm_user = ((f.controller or {}).get("SlurmUser") or "").split("(")[0] or None
    f.several_gpu_types = len(cfg.gpu_types) > 1
    _rights(f, cfg.prioritizer.user)
    f.socket_path = sock or cfg.filter.socket
    _socket(f)
    url = database_url(cfg, db)
    f.database_url = shown_url(url)  # what doctor prints: never the password
    _database(f, url)
    for daemon, section in (("prioritizer", cfg.prioritizer), ("filter", cfg.filter)):
        error, body = _fetch(section.metrics_address, section.metrics_port)
        f.metrics[daemon] = (section.metrics_port, error)
        if daemon == "prioritizer" and error is None:
            f.leader_gauge = _gauge(body, "slurm_dl_prioritizer_leader")
    _telemetry(f, cfg.telemetry)
    return f


def _read_shim(shim: Path) -> tuple[str | None, str | None]:
    """job_submit.lua's text (None: there is none), or why it cannot be read here."""
    try:
        return (shim.read_text(errors="replace") if shim.is_file() else None), None
    except OSError as e:
        return None, e.strerror or str(e)


def _telemetry(f: Facts, telemetry) -> None:
    """The gpu-agents' files as the prioritizer reads them: which are used and which ignored."""
    from ..core.idle.freshness import newest_by_node, stale_after_seconds
    from ..telemetry.reader import SUFFIX, scan_exposition_dir

    if not telemetry.exposition_dir:
        return
    f.telemetry_dir = telemetry.exposition_dir
    scan = scan_exposition_dir(telemetry.exposition_dir, telemetry.agent_user)
    f.telemetry_error, f.telemetry_read, f.telemetry_trusted = (
        scan.error,
        len(scan.read),
        scan.trusted,
    )
    f.telemetry_ignored = [(x.path, x.why, x.fix) for x in scan.ignored]
    f.telemetry_problems, f.telemetry_bad_lines = list(scan.problems), dict(scan.bad_lines)
    directory = Path(telemetry.exposition_dir)
    f.telemetry_newest = {
        str(directory / f"{node}{SUFFIX}"): t for node, t in newest_by_node(scan.samples).items()
    }
    f.telemetry_stale_after_s = stale_after_seconds(telemetry)
    f.telemetry_path_modes = _path_modes(Path(telemetry.exposition_dir))


def _path_modes(directory: Path) -> list[tuple[str, int]]:
    """Each directory from / down to ``directory`` with its mode, up to the first that cannot
    be looked at (missing, or closed to this user): what users pass through to read it."""
    out = []
    for d in [*reversed(directory.absolute().parents), directory.absolute()]:
        try:
            out.append((str(d), stat.S_IMODE(d.stat().st_mode)))
        except OSError:
            break
    return out


def gather_uninstalled(
    config: Optional[Path], db: Optional[str], slurm_conf_dir: Optional[Path], sock: Optional[str]
) -> Facts:
    """What may be left of slurm-dl; its site config may be gone too (then the defaults)."""
    from ..core.config import FilterConfig, PrioritizerConfig
    from .config_file import load_config
    from ..core.errors import SlurmDLError, SlurmError
    from ..slurm import CliBackend
    from ..core.database_url import DEFAULT_DATABASE_URL

    f = Facts(now=time.time())
    try:
        cfg = load_config(config_path(config))
        fc, pc, url = cfg.filter, cfg.prioritizer, database_url(cfg, db)
    except SlurmDLError:
        fc, pc, url = FilterConfig(), PrioritizerConfig(), db or DEFAULT_DATABASE_URL
    f.interval_s = pc.interval_seconds
    _slurm(f)
    conf_file = (f.controller or {}).get("SLURM_CONF") or os.environ.get("SLURM_CONF")
    f.slurm_conf_dir = (
        str(slurm_conf_dir)
        if slurm_conf_dir
        else (str(Path(conf_file).parent) if conf_file else None)
    )
    if f.slurm_conf_dir:
        f.shim_text, f.shim_error = _read_shim(Path(f.slurm_conf_dir) / "job_submit.lua")
    f.socket_path = sock or fc.socket
    _socket(f)
    f.database_url = shown_url(url)
    f.db_head = ""
    from ..store import Store

    try:
        store = Store(url, check_schema=False, create=False, busy_timeout_s=BUSY_TIMEOUT_S)
        f.db_present = store.revision is not None
        f.last_cycle_at = store.last_cycle_at() if f.db_present else None
        store.close()
    except SlurmDLError:
        pass  # no store: nothing left there
    if f.controller is not None:
        try:
            f.site_factors = CliBackend().site_factors()
        except SlurmError as e:
            f.controller_error = str(e).splitlines()[0]
    for daemon, section in (("prioritizer", pc), ("filter", fc)):
        f.metrics[daemon] = (
            section.metrics_port,
            _scrape(section.metrics_address, section.metrics_port),
        )
    f.unit_files = sorted(p.name for p in Path("/etc/systemd/system").glob("slurm-dl-*.service"))
    return f


def _slurm(f: Facts) -> None:
    from ..core.errors import SlurmError
    from ..slurm import CliBackend
    from ..slurm.controller import controller_config

    try:
        f.slurm_release = CliBackend().slurm_release()
    except SlurmError as e:
        f.controller_error = str(e).splitlines()[0]
        return
    try:
        f.controller = controller_config()
    except SlurmError as e:
        f.controller_error = str(e).splitlines()[0]


UNIT = Path("/etc/systemd/system/slurm-dl-prioritizer.service")


def unit_user(unit: Path = UNIT) -> Optional[str]:
    """User= of the installed prioritizer unit (a drop-in's last word counts); None: no unit."""
    user = None
    for path in [unit, *sorted(unit.with_name(unit.name + ".d").glob("*.conf"))]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key.strip() == "User":
                user = value.strip() or None
    return user


def _rights(f: Facts, configured: Optional[str]) -> None:
    """Whether the prioritizer's user may change jobs in Slurm (sacctmgr's AdminLevel)."""
    from ..core.errors import SlurmError
    from ..core.rights import Rights, trusted_user
    from ..slurm.accounts import user_rights

    if f.controller is None:
        return
    f.unit_user = unit_user()
    user = trusted_user(configured, f.slurm_user)
    f.prioritizer_user = user
    try:
        f.prioritizer_uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        f.prioritizer_rights = Rights(
            False,
            f"{user} is not a user on this host",
            "create the user, or correct [prioritizer] user in the site config",
        )
        return
    try:
        f.prioritizer_rights = user_rights(user, f.prioritizer_uid, controller=f.controller)
    except SlurmError as e:
        f.prioritizer_rights = Rights(None, f"cannot check {user}'s rights: {e}".split("\n")[0])


def _backend(f: Facts, cfg, flag: Optional[str]):
    """Build the backend the daemons would run (``[slurm] backend``, or ``flag``) as they do;
    the CLI one where it cannot be built (why goes in ``f.backend_error``)."""
    import importlib.metadata

    from ..core.errors import SlurmError
    from ..slurm import get_backend
    from .backend_opt import backend_name, build_backend

    f.backend = backend_name(cfg, flag)
    if f.slurm_release is None:
        return None  # no Slurm clients: neither backend can run (said under "Slurm release")
    try:
        built = build_backend(cfg, flag)
    except SlurmError as e:
        f.backend_error = str(e).removeprefix("pyslurm backend: ")
        return get_backend("cli")
    if f.backend == "pyslurm":
        f.backend_detail = importlib.metadata.version("pyslurm")
    return built


def _cluster(f: Facts, backend, cfg, conf: Path) -> None:
    """The site config against the live cluster (sinfo, through ``backend``) where slurmctld
    answers, else against slurm.conf and gres.conf (see slurm_dl.core.cluster_match)."""
    from ..core.cluster_match import cluster_of, compare, parse_slurm_cluster
    from ..core.errors import SlurmError

    if f.controller is not None and backend is not None:
        try:
            live = cluster_of(backend.nodes(), backend.partitions())
        except SlurmError:
            live = None
        if live is not None and live.nodes:
            f.cluster_diffs = compare(cfg, live, "sinfo")
            return
    try:
        text = conf.read_text(errors="replace")
        gres = conf.with_name("gres.conf")
        cluster = parse_slurm_cluster(
            text, gres.read_text(errors="replace") if gres.is_file() else ""
        )
    except (OSError, ValueError) as e:
        f.cluster_error = f"{conf}: cannot read it: {getattr(e, 'strerror', None) or e}"
        return
    if not cluster.nodes:
        f.cluster_error = f"{conf} has no NodeName lines (an Include?): nodes not compared"
        return
    f.cluster_diffs = compare(cfg, cluster)


def _socket(f: Facts) -> None:
    p = Path(f.socket_path)
    try:
        st = p.lstat()
    except OSError:
        f.socket_kind = "missing"
        return
    if not stat.S_ISSOCK(st.st_mode):
        f.socket_kind = "not a socket"
        return
    f.socket_kind = "socket"
    f.socket_mode = stat.S_IMODE(st.st_mode)
    try:
        f.socket_owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        f.socket_owner = str(st.st_uid)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(str(p))
    except OSError as e:
        f.socket_connect_error = e.strerror or str(e)
    finally:
        s.close()


def _database(f: Facts, url: str) -> None:
    """Read only: a missing or empty database is reported, never created."""
    from ..core.errors import SlurmDLError
    from ..store import Store
    from ..store.schema import HEAD

    f.db_head = HEAD
    f.db_path = sqlite_path(url) or None
    if f.db_path:
        try:
            f.db_owner = _user_name(os.stat(f.db_path).st_uid)
        except OSError:
            pass
    try:
        store = Store(url, check_schema=False, create=False, busy_timeout_s=BUSY_TIMEOUT_S)
    except SlurmDLError as e:
        _db_failed(f, str(e))
        return
    try:
        f.db_revision = store.revision
        if store.revision is None:
            f.db_error = (
                f"{f.database_url}: empty: it holds none of the prioritizer's tables "
                "(a wrong URL, or never created)"
            )
            return
        problem = store.integrity_problem(BUSY_TIMEOUT_S)
        if problem:
            _db_failed(f, problem)
            return
        if f.db_path and not os.access(f.db_path, os.W_OK):
            f.db_write_skip = (
                f"{f.db_path}: this user may not write it, so cannot tell whether another "
                "process holds its write lock: run doctor as root or as the prioritizer's user"
            )
        else:
            f.db_write_error = store.write_problem(BUSY_TIMEOUT_S)
            if f.db_write_error:
                f.db_lock_holders = lock_holders(f.db_path)
        f.last_cycle_at = store.last_cycle_at() if store.revision == HEAD else None
        if store.revision == HEAD:
            _leader(f, store)
    except SlurmDLError as e:
        _db_failed(f, str(e))
    finally:
        store.close()


def _leader(f: Facts, store) -> None:
    """The leader lease as the store holds it (who leads, since when)."""
    from dataclasses import asdict

    from ..store.lease import read_lease

    row = read_lease(store)
    f.leader = asdict(row) if row is not None else None
    f.leader_read = True
    f.hostname = socket.gethostname()


def _db_failed(f: Facts, error: str) -> None:
    """The store's error, and whether it says the file is damaged or locked (then by whom)."""
    from ..store.repository import DAMAGED_HINT, LOCKED_HINT

    f.db_error = error.replace("\n", " ")
    f.db_damaged = DAMAGED_HINT in error
    f.db_locked = LOCKED_HINT in error
    if f.db_locked and f.db_path:
        f.db_lock_holders = lock_holders(f.db_path)


def lock_holders(path: str, locks: Path = Path("/proc/locks")) -> list[tuple[int, str, str]]:
    """The processes on this host holding a write lock on the SQLite file ``path`` (or its WAL
    write lock), each as (pid, user, command), from the kernel's lock table; this process
    left out. Empty where the table cannot be read (not Linux)."""
    from ..core.doctor_store import lock_writers

    def key(p: str) -> tuple[int, int, int] | None:
        try:
            st = os.stat(p)
        except OSError:
            return None
        return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino

    db, shm = key(path), key(path + "-shm")
    try:
        text = locks.read_text(errors="replace")
    except OSError:
        return []
    pids = lock_writers(text, [db] if db else [], [shm] if shm else [])
    out = []
    for pid in pids:
        if pid == os.getpid():
            continue
        proc = Path("/proc") / str(pid)
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            user = _user_name(proc.stat().st_uid)
        except OSError:
            cmd, user = "", "?"
        cmd = " ".join(cmd.split()) or "?"
        out.append((pid, user, cmd if len(cmd) <= 60 else cmd[:57] + "..."))
    return out


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _scrape(address: str, port: Optional[int]) -> Optional[str]:
    return _fetch(address, port)[0]


def _fetch(address: str, port: Optional[int]) -> tuple[Optional[str], str]:
    """(why the endpoint did not answer or None, the page it served)."""
    if port is None:
        return None, ""
    host = "127.0.0.1" if address in ("0.0.0.0", "::", "") else address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=3) as r:
            return None, r.read(1 << 20).decode("utf-8", "replace")
    except OSError as e:
        return str(getattr(e, "reason", e)), ""


def _gauge(page: str, name: str) -> Optional[float]:
    """A metric's value in a Prometheus text page (None: not there, or not a page)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.name == name:
                    return sample.value
    except ValueError:
        return None
    return None
