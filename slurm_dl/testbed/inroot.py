"""Running another release's Slurm from its Debian root, with this machine's paths in place.

``render_runner`` writes a small shell script: it enters a private mount namespace, mounts
/proc, /dev and /sys into the root, binds this machine's own top-level directories (/tmp, /home,
/root, /run, /work …, and the testbed directory) at the same paths, then runs the command
chrooted in the current directory. The mounts belong to that namespace only: they go away with
the command, so nothing is left mounted when a testbed stops. Daemons, job steps (slurmstepd
forks them inside the root) and clients all see the testbed directory, job scripts and the
filter's socket where the host sees them. The root cache is bound too, so a program run inside
(the pyslurm contract suite) can start further testbeds of the release.

``render_client`` writes one wrapper per Slurm client (sbatch, squeue …) for a directory put
first on PATH. Inside the root (a job script calling ``scontrol``) the wrapper runs the root's
client directly.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from .roots import STAMP

CLIENTS = (
    "sbatch",
    "squeue",
    "scontrol",
    "sinfo",
    "sacct",
    "srun",
    "scancel",
    "salloc",
    "sprio",
    "sshare",
    "sacctmgr",
    "sstat",
    "sreport",
    "sdiag",
)
# Top-level directories that belong to the root itself (never replaced by the host's).
_SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/lost+found",
)


def runner_path(state_dir: Path) -> Path:
    return state_dir / "bin" / "in-slurm-root"


def render_runner(root: Path, release: str, state_dir: Path) -> str:
    system = "|".join(_SYSTEM_DIRS)
    body = f"""\
R=$1; shift
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --rbind /sys "$R/sys"
for f in /etc/passwd /etc/group /etc/hosts; do
    [ -e "$R$f" ] && mount --bind "$f" "$R$f"
done
bound=""
for d in /*/ /var/tmp/ {shlex.quote(str(root.parent))}/ {shlex.quote(str(state_dir))}/ "$PWD/"; do
    d=${{d%/}}
    case "$d" in ""|{system}) continue ;; esac
    covered=no
    for b in $bound; do case "$d/" in "$b"/*) covered=yes ;; esac; done
    [ "$covered" = yes ] && continue
    [ -d "$d" ] || continue
    mkdir -p "$R$d"
    mount --rbind "$d" "$R$d"
    bound="$bound $d"
done
exec unshare --root="$R" --wd="$PWD" "$@"
"""
    return (
        "#!/bin/sh\n"
        f"# Written by slurm-dl testbed: runs a command of the Slurm {release} root {root}\n"
        "# with this machine's directories at the same paths (private mounts, gone with the command).\n"
        f'if [ -e /{STAMP} ]; then exec "$@"; fi  # already inside the root\n'
        'if [ "$(id -u)" != 0 ]; then\n'
        f'    echo "error: the testbed\'s Slurm {release} commands run as root only" >&2; exit 1\n'
        "fi\n"
        f"exec unshare --mount --propagation private -- /bin/sh -eu -c {shlex.quote(body)} "
        f'in-slurm-root {shlex.quote(str(root))} "$@"\n'
    )


def render_client(state_dir: Path, client: str) -> str:
    return (
        "#!/bin/sh\n"
        f"# Written by slurm-dl testbed: {client} of the testbed's Slurm release.\n"
        f'exec {shlex.quote(str(runner_path(state_dir)))} /usr/bin/{client} "$@"\n'
    )


def write_wrappers(root: Path, release: str, state_dir: Path) -> Path:
    """The runner and one wrapper per client under ``state_dir/bin``; returns that directory."""
    bin_dir = runner_path(state_dir).parent
    bin_dir.mkdir(parents=True, exist_ok=True)
    files = {runner_path(state_dir): render_runner(root, release, state_dir)}
    files |= {bin_dir / c: render_client(state_dir, c) for c in CLIENTS}
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(path)
    return bin_dir


def remove_wrappers(state_dir: Path) -> None:
    """A testbed switched back to the host's Slurm: its old wrappers must not shadow the host's."""
    bin_dir = runner_path(state_dir).parent
    for name in (runner_path(state_dir).name, *CLIENTS):
        (bin_dir / name).unlink(missing_ok=True)
