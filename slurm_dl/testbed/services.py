"""slurm-dl's own services beside a testbed: the filter service and the prioritizer.

``scripts/quickstart.sh`` starts them with the testbed's marker in their environment, so
``testbed down`` stops them with the cluster. ``testbed up`` on a half-dead cluster restarts
Slurm but leaves them running (they talk to Slurm through ``SLURM_CONF``, which keeps its path),
and ``testbed status`` reports them. A service is recognised by its command line
(``slurm-dl filter serve``, ``python -m slurm_dl.cli.main prioritizer run``).
"""

from __future__ import annotations

from pathlib import Path

from . import process

# name -> (what users call it, the subcommand words that run it)
SERVICES: dict[str, tuple[str, tuple[str, str]]] = {
    "filter": ("filter service", ("filter", "serve")),
    "prioritizer": ("prioritizer", ("prioritizer", "run")),
}


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def service_name(argv: list[str]) -> str | None:
    """Which service a command line runs, or None (Slurm daemons, job steps, clients)."""
    for i, arg in enumerate(argv):
        if Path(arg).name == "slurm-dl" or arg == "slurm_dl.cli.main":
            words = tuple(argv[i + 1 : i + 3])
            for name, (_, sub) in SERVICES.items():
                if words == sub:
                    return name
            return None
    return None


def find(root: Path) -> dict[str, int | None]:
    """Each service's pid (the oldest when several run), None when not running."""
    found: dict[str, int | None] = dict.fromkeys(SERVICES)
    for pid in sorted(process.marked_processes(root)):
        name = service_name(_cmdline(pid))
        if name is not None and found[name] is None:
            found[name] = pid
    return found


def describe(pids: dict[str, int | None]) -> str:
    """``filter service pid 12, prioritizer not running`` for a message."""
    return ", ".join(
        f"{SERVICES[n][0]} {'pid ' + str(p) if p else 'not running'}" for n, p in pids.items()
    )
