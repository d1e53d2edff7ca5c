"""The project's exception types.

Each subclasses the builtin it refines, so callers can catch either the precise type or the
broad one. Slurm failures never escape as ``subprocess.CalledProcessError``.
"""

from __future__ import annotations


class SlurmDLError(Exception):
    """Base class for every error slurm-dl raises on purpose."""


class ConfigError(SlurmDLError, ValueError):
    """A site configuration file is missing, unreadable or invalid.

    ``problems`` lists one line per problem: the key path, the bad value and what is allowed.
    """

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: invalid site configuration:\n{lines}")


class TraceError(SlurmDLError, ValueError):
    """A trace file cannot be read: names the file, the line and the problem."""


class SlurmError(SlurmDLError, RuntimeError):
    """A Slurm command or library call failed; carries Slurm's own message."""

    def __init__(
        self,
        message: str,
        *,
        command: list[str] | None = None,
        returncode: int | None = None,
        stderr: str = "",
    ):
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        """Slurm's whole stderr (the message keeps only its gist)."""
        super().__init__(message)


class SlurmUnavailableError(SlurmError, ConnectionError):
    """slurmctld cannot be reached (down, restarting, wrong SLURM_CONF). Callers may retry."""


class SlurmNotInstalledError(SlurmError, FileNotFoundError):
    """The Slurm client commands or daemons are not installed on this machine."""


class JobNotFoundError(SlurmError, LookupError):
    """A job id that Slurm does not know."""


class JobBusyError(SlurmError):
    """Slurm refused a call on a job for now: it is between states ("Job can not be altered
    now", a requeue or an end under way). The caller tries again in a later cycle, not in a loop."""


class JobPendingError(SlurmError):
    """Slurm refused a call that needs a running job because the job is pending ("Job is pending
    execution"): e.g. a requeue of a job that already requeued itself."""


class TestbedError(SlurmDLError, RuntimeError):
    """The local test cluster could not be started, stopped or inspected."""


class StoreError(SlurmDLError, RuntimeError):
    """The prioritizer's database cannot be opened, read or written: names the URL and the cause."""


class NotLeaderError(StoreError):
    """This prioritizer does not hold the leader lease (any more) at its epoch: it must not
    act on Slurm or write a cycle; another daemon leads, or the lease could not be renewed."""
