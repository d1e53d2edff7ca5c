"""Debian roots that hold another Slurm release, made once with ``debootstrap`` and cached.

A root is built in a temporary directory next to its final place and renamed into place only
when it is complete and its ``slurmctld -V`` names the wanted release, so a failed or
interrupted bootstrap never leaves a half-made root behind. One build per release at a time
(a lock file); every later testbed reuses it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from ..core.errors import TestbedError
from .releases import Release, debootstrap_argv, major_of, mirror_from_sources, progress_phase

CACHE_ENV = "SLURM_DL_ROOT_CACHE"
DEFAULT_CACHE = Path("/var/cache/slurm-dl/roots")
SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
DEFAULT_MIRROR = "http://deb.debian.org/debian"
STAMP = ".slurm-dl-root"  # present only in a complete root; also tells scripts they run inside one

Progress = Callable[[str], None]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def root_path(release: Release) -> Path:
    return cache_dir() / release.name


def root_info(release: Release) -> dict | None:
    """What the stamp of a complete root says (version, build seconds), or None when absent."""
    try:
        return json.loads((root_path(release) / STAMP).read_text())
    except (OSError, ValueError):
        return None


MIRROR_ENV = "SLURM_DL_DEBIAN_MIRROR"


def host_mirror() -> str:
    """The Debian mirror for roots: ``$SLURM_DL_DEBIAN_MIRROR``, else the machine's apt sources."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV].rstrip("/")
    for path in SOURCES:
        try:
            found = mirror_from_sources(path.read_text())
        except OSError:
            continue
        if found:
            return found
    return DEFAULT_MIRROR


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def ensure_root(release: Release, progress: Progress = _stderr_progress) -> Path:
    """The root of ``release``, built first if needed (prints progress). Raises TestbedError."""
    final = root_path(release)
    if (final / STAMP).is_file():
        return final
    if shutil.which("debootstrap") is None:
        raise TestbedError(
            f"Slurm {release.name} needs a Debian {release.suite} root, built with debootstrap, "
            f"which is not installed: apt-get install debootstrap (or bash scripts/setup.sh)"
        )
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        lock = open(final.parent / f".{release.name}.lock", "w")
    except OSError as e:
        raise TestbedError(f"cannot use the root cache {final.parent}: {e.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / STAMP).is_file():  # another process built it while we waited
            return final
        _build(release, final, progress)
    return final


def _build(release: Release, final: Path, progress: Progress) -> None:
    tmp = final.parent / f".{release.name}.building-{os.getpid()}"
    log = final.parent / f"{release.name}.log"
    _remove(tmp)
    if final.exists():  # a directory without stamp: left by something else; never trust it
        _remove(final)
    mirror = host_mirror()
    argv = debootstrap_argv(release, str(tmp), mirror)
    progress(
        f"building the Slurm {release.name} root (Debian {release.suite} from {mirror}) "
        f"in {final}; this happens once"
    )
    t0 = time.monotonic()
    try:
        code = _run_logged(
            argv, log, lambda phase: progress(f"  {time.monotonic() - t0:5.0f} s  {phase}")
        )
        if code != 0:
            raise TestbedError(
                f"building the Slurm {release.name} root failed: debootstrap exit {code} "
                f"({_last_error(log)}); full log: {log}"
            )
        version = _check_version(release, tmp)
        for name in ("etc/hosts",):  # bind-mount targets the host's files go onto
            (tmp / name).touch(exist_ok=True)
        seconds = round(time.monotonic() - t0, 1)
        (tmp / STAMP).write_text(
            json.dumps(
                {
                    "release": release.name,
                    "suite": release.suite,
                    "version": version,
                    "mirror": mirror,
                    "build_seconds": seconds,
                }
            )
            + "\n"
        )
        tmp.rename(final)
    except BaseException:
        _remove(tmp)
        raise
    progress(f"  {seconds:5.0f} s  Slurm {version} root ready")


def _run_logged(argv: list[str], log: Path, on_phase: Callable[[str], None]) -> int:
    last = None
    with open(log, "w") as out:
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
        except OSError as e:
            raise TestbedError(f"cannot run debootstrap: {e.strerror}") from None
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                phase = progress_phase(line.rstrip("\n"))
                if phase and phase != last:
                    on_phase(phase)
                    last = phase
        except BaseException:  # Ctrl-C: stop debootstrap before the partial root is removed
            proc.terminate()
            proc.wait()
            raise
    return proc.wait()


def _last_error(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if ln.startswith(("E:", "W: Failure", "E "))]
    return (errors or lines or ["no output"])[-1][:200]


def _check_version(release: Release, root: Path) -> str:
    try:
        out = subprocess.run(
            ["chroot", str(root), "/usr/sbin/slurmctld", "-V"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TestbedError(
            f"the new Slurm {release.name} root does not run slurmctld: {e}"
        ) from None
    if major_of(out) != release.name:
        raise TestbedError(
            f"the Debian {release.suite} archive gives Slurm {out.strip() or 'nothing'}, "
            f"not {release.name}: no root made"
        )
    return out.split()[-1]


def _mounts_under(path: Path) -> list[str]:
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    prefix = str(path) + "/"
    points = [ln.split()[1] for ln in lines if len(ln.split()) > 1]
    return sorted(
        (p for p in points if p == str(path) or p.startswith(prefix)), key=len, reverse=True
    )


def _remove(path: Path) -> None:
    """Remove a (partial) root; unmount what debootstrap may have left mounted in it first."""
    if not path.exists():
        return
    for point in _mounts_under(path):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    if _mounts_under(path):
        raise TestbedError(f"cannot remove {path}: something is still mounted in it")
    shutil.rmtree(path, ignore_errors=True)
