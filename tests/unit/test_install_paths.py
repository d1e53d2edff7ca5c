"""The admin guide's "as a system package" install, run as written against the system's own
Python and pip (Debian's, where ``--prefix /usr/local`` ends under ``/usr/local/local``), into a
scratch root (``pip --root``) instead of the real ``/``: the package and ``slurm-dl`` must land
where the units and ``import`` look."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _system_pip() -> str | None:
    if not SYSTEM_PYTHON.exists():
        return "no /usr/bin/python3"
    out = subprocess.run(
        [str(SYSTEM_PYTHON), "-m", "pip", "--version"], capture_output=True, text=True
    )
    return None if out.returncode == 0 else "the system Python has no pip"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    reason = _system_pip()
    if reason:
        pytest.skip(reason)
    dist = tmp_path_factory.mktemp("dist")
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )  # the guide's build
    if (
        out.returncode != 0
        and "setuptools" in out.stderr
        and "No matching distribution" in out.stderr
    ):
        pytest.skip("pip cannot fetch the setuptools the build needs here (no package index)")
    assert out.returncode == 0, out.stderr
    return next(dist.glob("slurm_dl-*.whl"))


def test_the_guides_system_install_lands_where_the_units_look(wheel: Path, tmp_path: Path) -> None:
    guide = (ROOT / "docs" / "admins.md").read_text()
    command = re.search(
        rf"^{SYSTEM_PYTHON} -m pip install --break-system-packages dist/slurm_dl-\*\.whl$",
        guide,
        re.M,
    )
    assert command, "the guide's command changed: change this test with it"
    root = tmp_path / "root"
    out = subprocess.run(
        [
            str(SYSTEM_PYTHON),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--break-system-packages",
            "--root",
            str(root),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    script = root / "usr" / "local" / "bin" / "slurm-dl"
    assert script.is_file(), sorted(str(p.relative_to(root)) for p in root.rglob("bin/*"))
    assert not (root / "usr" / "local" / "local").exists()
    purelib = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    pkg = root / purelib.lstrip("/") / "slurm_dl" / "__init__.py"
    assert pkg.is_file(), purelib  # where `import slurm_dl` of the system Python looks


def test_the_old_prefix_advice_would_have_missed(wheel: Path, tmp_path: Path) -> None:
    """What the guide used to say; on a Debian Python it ends under /usr/local/local."""
    scheme = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sysconfig; print(sysconfig.get_default_scheme())"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if scheme != "posix_local":
        pytest.skip(f"not a Debian-patched Python (scheme {scheme})")
    root = tmp_path / "root"
    subprocess.run(
        [
            str(SYSTEM_PYTHON),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--break-system-packages",
            "--root",
            str(root),
            "--prefix",
            "/usr/local",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PIP_NO_WARN_SCRIPT_LOCATION": "1"},
    )
    assert (root / "usr" / "local" / "local" / "bin" / "slurm-dl").is_file()
    assert not (root / "usr" / "local" / "bin" / "slurm-dl").exists()


def test_the_guides_venv_install_runs_from_the_links_the_units_use(
    wheel: Path, tmp_path: Path
) -> None:
    """The recommended install as written (a venv of the system Python, pip install of a wheel
    with its dependencies, links in a bin directory), then both commands run through the links
    from another directory. Skipped where pip cannot reach a package index."""
    guide = (ROOT / "docs" / "admins.md").read_text()
    for line in (
        "python3 -m venv /opt/slurm-dl",
        "/opt/slurm-dl/bin/pip install /path/to/slurm-dl",
        "ln -s /opt/slurm-dl/bin/slurm-dl /usr/local/bin/slurm-dl",
        "ln -s /opt/slurm-dl/bin/dlsubmit /usr/local/bin/dlsubmit",
    ):
        assert line in guide, f"the guide's command changed: change this test with it ({line})"
    venv, links = tmp_path / "opt" / "slurm-dl", tmp_path / "usr-local-bin"
    out = subprocess.run(
        [str(SYSTEM_PYTHON), "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        pytest.skip(f"the system Python cannot make a venv: {out.stderr.strip()[-200:]}")
    out = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0 and (
        "No matching distribution" in out.stderr or "NewConnectionError" in out.stderr
    ):
        pytest.skip("pip cannot reach a package index for the dependencies here")
    assert out.returncode == 0, out.stderr[-2000:]
    links.mkdir()
    for name in ("slurm-dl", "dlsubmit"):
        (links / name).symlink_to(venv / "bin" / name)
        got = subprocess.run(
            [str(links / name), "--version"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert got.returncode == 0 and "slurm-dl" in got.stdout, (name, got.stdout, got.stderr)
