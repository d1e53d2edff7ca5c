"""Optional accounting for the testbed: slurmdbd over a private MariaDB in the state directory.

MariaDB gets its own datadir, socket and loopback port; slurmdbd reads ``slurmdbd.conf`` from the
directory of slurm.conf. With it, ``sacct``/``sshare`` work and the age and fair-share factors count.
"""

from __future__ import annotations

import subprocess
import time
from typing import Mapping

from ..core.errors import SlurmError, SlurmNotInstalledError, TestbedError
from . import process
from .client import run_client
from .conf import ClusterParams, TestbedLayout, cluster_name
from .install import _find

ACCOUNTING_PACKAGES = "mariadb-server slurmdbd slurm-wlm-mysql-plugin"
DB_USER = "slurm"
DB_PASSWORD = "slurmdl-testbed"  # loopback-only, private to this state directory
DB_NAME = "slurm_acct_db"
ACCOUNT = "dl"


def find_accounting_binaries(host_slurmdbd: bool = True) -> dict[str, str]:
    """MariaDB's programs (always this machine's) and, for the host's Slurm, slurmdbd and
    sacctmgr (another release's come from its Debian root)."""
    names = ("mariadbd", "mariadb-install-db", "mariadb") + (
        ("slurmdbd", "sacctmgr") if host_slurmdbd else ()
    )
    found = {n: _find(n) for n in names}
    missing = [n for n, path in found.items() if path is None]
    if missing:
        raise SlurmNotInstalledError(
            f"testbed accounting needs {', '.join(missing)}: install the Debian packages "
            f"`apt-get install {ACCOUNTING_PACKAGES}` or run `bash scripts/setup.sh --accounting` as root"
        )
    return {n: str(p) for n, p in found.items()}


def render_slurmdbd_conf(layout: TestbedLayout, params: ClusterParams) -> str:
    assert params.dbd_port and params.mysql_port
    return "\n".join(
        [
            "# Written by slurm-dl testbed (accounting).",
            "AuthType=auth/none",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={params.dbd_port}",
            "SlurmUser=root",
            f"PidFile={layout.pid_dir}/slurmdbd.slurm-pid",
            f"LogFile={layout.daemon_log('slurmdbd')}",
            "DebugLevel=info",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={params.mysql_port}",
            f"StorageUser={DB_USER}",
            f"StoragePass={DB_PASSWORD}",
            f"StorageLoc={DB_NAME}",
            "",
        ]
    )


def mariadb_socket(layout: TestbedLayout):
    return layout.pid_dir / "mariadb.sock"


def mariadb_datadir(layout: TestbedLayout):
    return layout.root / "mariadb"


def init_datadir(layout: TestbedLayout, binaries: Mapping[str, str]) -> None:
    datadir = mariadb_datadir(layout)
    if (datadir / "mysql").is_dir():
        return
    datadir.mkdir(parents=True, exist_ok=True)
    log = layout.daemon_log("mariadb-install")
    with open(log, "wb") as out:
        proc = subprocess.run(
            [
                binaries["mariadb-install-db"],
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if proc.returncode != 0:
        raise TestbedError(
            f"mariadb-install-db failed in {datadir}; {log} ends:\n{process.log_tail(log)}"
        )


def mariadb_argv(
    layout: TestbedLayout, params: ClusterParams, binaries: Mapping[str, str]
) -> tuple[str, ...]:
    return (
        binaries["mariadbd"],
        "--no-defaults",
        f"--datadir={mariadb_datadir(layout)}",
        f"--socket={mariadb_socket(layout)}",
        f"--port={params.mysql_port}",
        "--bind-address=127.0.0.1",
        "--user=root",
        f"--pid-file={layout.pid_dir}/mariadb.own-pid",
        f"--log-error={layout.daemon_log('mariadb')}",
        "--skip-name-resolve",
    )


def wait_until(check, what: str, pid: int, died: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if not process.alive(pid):
            raise TestbedError(died)
        if time.monotonic() > deadline:
            raise TestbedError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(0.05)


def create_db_user(layout: TestbedLayout, binaries: Mapping[str, str]) -> None:
    sql = (
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}'; "
        f"GRANT ALL ON *.* TO '{DB_USER}'@'127.0.0.1';"
    )
    proc = subprocess.run(
        [
            binaries["mariadb"],
            "--no-defaults",
            "-S",
            str(mariadb_socket(layout)),
            "-u",
            "root",
            "-e",
            sql,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise TestbedError(
            f"cannot create the slurmdbd user in the testbed MariaDB: {proc.stderr.strip()}"
        )


def register_cluster(layout: TestbedLayout, env: Mapping[str, str]) -> None:
    """Cluster, one account and root in it, in ONE sacctmgr process reading commands from stdin
    (each sacctmgr start costs ~0.5 s). Idempotent: 'already exists' / 'nothing new' are fine."""
    name = cluster_name(layout.root)
    commands = (
        f"add cluster {name}\n"
        f"add account {ACCOUNT} cluster={name} description=slurm-dl-testbed\n"
        f"add user root account={ACCOUNT} cluster={name}\n"
    )
    try:
        run_client(["sacctmgr", "-i"], env, timeout=60, input=commands)
    except SlurmError as e:
        if "already exists" not in str(e) and "Nothing new" not in str(e):
            raise TestbedError(f"testbed accounting: {e}") from None
    out = run_client(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], env, timeout=30)
    if name not in out.split():
        raise TestbedError(
            f"testbed accounting: cluster {name} is not registered in slurmdbd (sacctmgr shows {out.split()})"
        )
