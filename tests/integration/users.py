"""Acting on a live testbed as an ordinary user (``nobody``), as an attacker would.

The testbed lives under pytest's private temp dir: the other user gets a readable copy of the
client configuration (the commands only read it, and sbatch runs the cli_filter.lua next to
it, and talk to slurmctld's port). Another release's
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


def as_user(
    tb: Testbed, user: str = "nobody"
) -> tuple[Callable[..., subprocess.CompletedProcess], Path]:
    """(run ARGV as ``user`` against ``tb``, the public config dir to remove after)."""
    if shutil.which("runuser") is None:
        pytest.skip("runuser (util-linux) is needed to act as another user")
    public = Path(tempfile.mkdtemp(prefix="slurm-dl-conf-"))
    public.chmod(0o755)
    for f in Path(tb.conf_dir).iterdir():
        if f.is_file() and (f.suffix == ".conf" or f.name == "cli_filter.lua"):
            shutil.copy(f, public / f.name)
            (public / f.name).chmod(0o644)
    env = {**tb.env(), "SLURM_CONF": str(public / "slurm.conf")}
    inside = [str(tb.bin_dir / "in-slurm-root")] if tb.bin_dir else []

    def run(
        *argv: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*inside, "runuser", "-u", user, "--", *argv],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/tmp",
        )

    return run, public


def user_python(user: str = "nobody") -> Path:
    """A ``bin/`` with ``python``, ``slurm-dl`` and ``dlsubmit`` that ``user`` can run: a venv of
    the system's Python (the test's own interpreter may live where other users cannot read)
    that sees this checkout's packages. Removed by the caller (``shutil.rmtree(path.parent)``)."""
    import sys
    import sysconfig

    base = Path("/usr/bin/python3")
    if not base.exists():
        pytest.skip("/usr/bin/python3 is needed for a venv another user can run")
    root = Path(tempfile.mkdtemp(prefix="slurm-dl-user-venv-"))
    root.chmod(0o755)
    venv = root / "venv"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python3*/site-packages"))
    paths = [sysconfig.get_paths()["purelib"], str(Path(__file__).resolve().parents[2])]
    (site / "slurm_dl_checkout.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in paths) + "\n"
    )
    for name, module in (("slurm-dl", "slurm_dl.cli.main"), ("dlsubmit", "slurm_dl.dlsubmit.cli")):
        script = venv / "bin" / name
        script.write_text(f"#!{venv / 'bin' / 'python'}\nfrom {module} import app\napp()\n")
        script.chmod(0o755)
    probe = subprocess.run(
        ["runuser", "-u", user, "--", str(venv / "bin" / "python"), "-c", "import slurm_dl, typer"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(
            f"{user} cannot import this checkout ({sys.executable}): {probe.stderr.strip()[-200:]}"
        )
    return venv / "bin"
