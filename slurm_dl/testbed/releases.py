"""Which Slurm releases the testbed runs, and how to get each (pure: no I/O).

The host's own Slurm (Debian 12: 22.05) runs directly. Other releases run from a minimal Debian
root made with ``debootstrap`` of the Debian release that packages them, cached outside the
checkout and shared by every testbed on the machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import TestbedError


@dataclass(frozen=True)
class Release:
    """One Slurm release the testbed supports.

    ``suite`` is the Debian release that packages it; ``script`` the debootstrap script when
    the host's debootstrap has none named after the suite; ``host`` marks the machine's own Slurm.
    """

    name: str
    suite: str
    host: bool = False
    script: str | None = None


HOST_RELEASE = "22.05"
RELEASES: dict[str, Release] = {
    "22.05": Release("22.05", "bookworm", host=True),
    "24.11": Release("24.11", "trixie"),
    "26.05": Release("26.05", "forky", script="/usr/share/debootstrap/scripts/sid"),
}

# What a release root holds: the daemons and clients, slurmdbd with its MySQL plugin (MariaDB
# itself is the host's), libslurm's headers for pyslurm, Lua 5.1 for job_submit.lua, and Python
# for job scripts that run Python (jobs run inside the root).
ROOT_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmdbd",
    "slurm-wlm-mysql-plugin",
    "libslurm-dev",
    "lua5.1",
    "lua-socket",
    "lua-cjson",
    "python3",
    "procps",
)


def supported() -> str:
    return ", ".join(RELEASES)


def release_for(text: str | None) -> Release:
    """``24.11`` (or ``24.11.5``) -> its Release; anything else -> TestbedError naming the supported ones."""
    wanted = (text or HOST_RELEASE).strip()
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", wanted)
    key = f"{int(m.group(1)):02d}.{int(m.group(2)):02d}" if m else wanted
    if key not in RELEASES:
        raise TestbedError(
            f"the testbed cannot run Slurm {wanted}; supported releases: {supported()}"
        )
    return RELEASES[key]


def major_of(version_text: str) -> str | None:
    """``slurm-wlm 24.11.5`` / ``slurm 22.05.8`` -> ``24.11``; None when no version is in it."""
    m = re.search(r"\b(\d+)\.(\d+)\.\d+", version_text)
    return f"{int(m.group(1)):02d}.{int(m.group(2)):02d}" if m else None


def mirror_from_sources(text: str) -> str | None:
    """The first Debian archive URI in an apt sources file (deb822 ``URIs:`` or one-line ``deb``),
    skipping the security archive. None when there is none."""
    uris: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        if line.lower().startswith("uris:"):
            uris.extend(line.split(":", 1)[1].split())
        elif line.startswith("deb "):
            parts = [p for p in line.split() if not p.startswith("[")]
            if len(parts) >= 2:
                uris.append(parts[1])
    for uri in uris:
        if "security" not in uri and uri.startswith(("http://", "https://", "file:/")):
            return uri.rstrip("/")
    return None


def debootstrap_argv(release: Release, target: str, mirror: str) -> list[str]:
    argv = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(ROOT_PACKAGES)}",
        release.suite,
        target,
        mirror,
    ]
    if release.script:
        argv.append(release.script)
    return argv


# debootstrap's "I: Retrieving foo 1.2" lines, shortened to one progress line per phase.
_PHASES = (
    ("Retrieving InRelease", "checking the archive"),
    ("Retrieving Release", "checking the archive"),
    ("Retrieving Packages", "reading the package lists"),
    ("Resolving dependencies", "resolving dependencies"),
    ("Retrieving ", "downloading packages"),
    ("Extracting ", "extracting packages"),
    ("Installing core packages", "installing the base system"),
    ("Unpacking required packages", "unpacking"),
    ("Configuring required packages", "configuring"),
    ("Installing base packages", "installing Slurm and its packages"),
    ("Base system installed successfully", "done"),
)


def progress_phase(line: str) -> str | None:
    """A debootstrap output line -> the phase it starts, or None."""
    if not line.startswith("I: "):
        return None
    body = line[3:]
    for prefix, phase in _PHASES:
        if body.startswith(prefix):
            return phase
    return None
