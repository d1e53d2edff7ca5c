"""Acting on a live testbed as an ordinary user (``nobody``), as an attacker would.

The testbed lives under pytest's private temp dir: the other user gets a readable copy of the
client configuration (the commands only read it and talk to slurmctld's port). Another release's
clients run inside its Debian root, entered as root: the user is switched in there.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import pytest

from slurm_dl.testbed import Testbed


def as_user(tb: Testbed, user: str = "nobody") -> tuple[Callable[..., subprocess.CompletedProcess], Path]:
    """(run ARGV as ``user`` against ``tb``, the public config dir to remove after)."""
    if shutil.which("runuser") is None:
        pytest.skip("runuser (util-linux) is needed to act as another user")
    public = Path(tempfile.mkdtemp(prefix="slurm-dl-conf-"))
    public.chmod(0o755)
    for f in Path(tb.conf_dir).iterdir():
        if f.is_file() and f.suffix == ".conf":
            shutil.copy(f, public / f.name)
            (public / f.name).chmod(0o644)
    env = {**tb.env(), "SLURM_CONF": str(public / "slurm.conf")}
    inside = [str(tb.bin_dir / "in-slurm-root")] if tb.bin_dir else []

    def run(*argv: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([*inside, "runuser", "-u", user, "--", *argv], env=env, input=stdin,
                              capture_output=True, text=True, timeout=timeout, cwd="/tmp")

    return run, public
