"""A throwaway PostgreSQL server for tests: Debian's postgresql binaries, initdb + pg_ctl in a
temporary directory, run as the ``postgres`` system user, listening only on a Unix socket in
that directory (no TCP port, no containers)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def unavailable_reason() -> str | None:
    if _bin_dir() is None:
        return "PostgreSQL is not installed (Debian: apt-get install postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no 'postgres' system user to run the server as"
    if os.geteuid() != 0:
        return "starting PostgreSQL as the postgres user needs root"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install '.[postgres]')"
    return None


class PgServer:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="sdl-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._n = 0

    def _as_postgres(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
        )

    def start(self) -> "PgServer":
        pw = pwd.getpwnam("postgres")
        os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.root.chmod(0o755)
        out = self._as_postgres(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        )
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stderr[-2000:]}")
        out = self._as_postgres(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-k {self.root} -c listen_addresses='' -c fsync=off",
            "start",
        )
        if out.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {out.stderr[-1000:]} {log[-2000:]}")
        return self

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@/{db}?host={self.root}"

    def create_db(self, prefix: str = "t") -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        self._n += 1
        name = f"{prefix}{self._n}"
        with psycopg.connect(
            host=str(self.root), user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def password_db(self, role: str, password: str) -> str:
        """A database owned by a new ``role`` that must give ``password`` (SCRAM), as a site's
        is: whoever has no password cannot log in. Returns its URL, without the password."""
        import psycopg

        with psycopg.connect(
            host=str(self.root), user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
            conn.execute(f'CREATE DATABASE "{role}" OWNER "{role}"')
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"local all {role} scram-sha-256\n" + hba.read_text())
        out = self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "reload")
        if out.returncode != 0:
            raise RuntimeError(f"pg_ctl reload failed: {out.stderr[-1000:]}")
        return f"postgresql+psycopg://{role}@/{role}?host={self.root}"

    def stop(self) -> None:
        if self.data.exists():
            self._as_postgres(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
            )
        shutil.rmtree(self.root, ignore_errors=True)
