"""Where the Slurm binaries are, and a clear message when they are not."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SlurmNotInstalledError, TestbedError

SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
DEBIAN_PACKAGES = "slurm-wlm slurmctld slurmd slurm-client lua5.1 lua-socket lua-cjson"
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")


@dataclass(frozen=True)
class SlurmBinaries:
    slurmctld: str
    slurmd: str


def _find(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in SBIN_DIRS:
        cand = Path(d) / name
        if cand.exists() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def find_slurm() -> SlurmBinaries:
    """The daemon paths, checked: installed, clients present, not the emulator build."""
    missing = [n for n in ("slurmctld", "slurmd", *CLIENTS) if _find(n) is None]
    if missing:
        raise SlurmNotInstalledError(
            f"Slurm is not installed here (missing: {', '.join(missing)}). Install the Debian 12 packages "
            f"`apt-get install {DEBIAN_PACKAGES}` or run `bash scripts/setup.sh` as root."
        )
    ctld, slurmd = _find("slurmctld"), _find("slurmd")
    assert ctld and slurmd
    for path, name in ((ctld, "slurmctld"), (slurmd, "slurmd")):
        if "emulator" in os.path.realpath(path):
            raise SlurmNotInstalledError(
                f"{path} points to the slurm-wlm-emulator build ({os.path.realpath(path)}), which cannot run "
                f"the testbed; run `update-alternatives --set {name} /usr/sbin/{name}-wlm` or scripts/setup.sh"
            )
    # The daemons must run under the names slurmctld/slurmd (argv[0] decides daemon mode): the
    # /usr/sbin symlinks give exactly that.
    return SlurmBinaries(slurmctld=ctld, slurmd=slurmd)


def require_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            "the testbed must run as root (slurmd runs jobs as their users and the fake GPUs are "
            "character devices made with mknod); run it with sudo or as root"
        )
