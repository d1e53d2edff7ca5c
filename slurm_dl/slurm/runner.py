"""The one place slurm-dl runs a Slurm command: a subprocess with a timeout whose failures
become the project's error types (never a raw ``CalledProcessError``).

``classify_failure`` is pure (argv, exit status, stderr -> exception or None) so the mapping is
unit-tested without Slurm.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..core.errors import (
    JobBusyError,
    JobNotFoundError,
    JobPendingError,
    SlurmError,
    SlurmNotInstalledError,
    SlurmUnavailableError,
)

DEFAULT_TIMEOUT_S = 30.0

INSTALL_HINT = (
    "install the Slurm client commands (Debian 12: `apt-get install slurm-client`, "
    "or `bash scripts/setup.sh` as root)"
)

# Messages that mean "slurmctld cannot be reached": callers may retry.
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Connection refused",
    "Socket timed out",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
    "slurmctld not responding",
)
_INVALID_JOB = re.compile(r"Invalid job id specified(?: for job (\d+))?")
# "Refused for now": the job is between states (scancel retries these itself, 10 times, for
# over a minute: callers give it a short timeout and read its verbose line instead).
_BUSY = ("Job can not be altered now", "Job is in transitional state")
_PENDING = "Job is pending execution"
# scancel reports some failures on stderr but exits 0 (e.g. an unknown job id with -v).
_STDERR_ERROR = re.compile(r"\berror:", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SlurmResult:
    """What a successful command printed (stderr may hold warnings or per-job errors)."""

    argv: tuple[str, ...]
    stdout: str
    stderr: str


def one_line(text: str) -> str:
    """Slurm's stderr as one line: its error lines if it has any (drops scancel -v chatter)."""
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("**")
    ]
    errors = [ln for ln in lines if _STDERR_ERROR.search(ln)]
    return "; ".join(errors or lines)


def classify_failure(
    argv: Sequence[str], returncode: int, stderr: str, stdout: str = ""
) -> SlurmError | None:
    """The error a finished command stands for, or None when it succeeded.

    For scancel, a zero exit with ``error:`` on stderr (its habit) counts as a failure too.
    """
    text = (stderr or "").strip()
    # Only scancel is known to exit 0 after a failure; elsewhere "error:" on stderr with exit 0
    # may be a job_submit filter's notice to the user, and the job was accepted.
    zero_exit_failure = argv[0].rsplit("/", 1)[-1] == "scancel" and bool(_STDERR_ERROR.search(text))
    failed = returncode != 0 or zero_exit_failure
    if not failed:
        return None
    msg = one_line(text) or one_line(stdout or "") or f"exit status {returncode}"
    where = " ".join(argv[:2]) if len(argv) > 1 and not argv[1].startswith("-") else argv[0]
    full = f"{where}: {msg}"
    if any(s in msg for s in _UNREACHABLE):
        return SlurmUnavailableError(
            f"{full} (is slurmctld running, and does SLURM_CONF point at the right cluster?)",
            command=list(argv),
            returncode=returncode,
            stderr=text,
        )
    if _INVALID_JOB.search(msg):
        return JobNotFoundError(full, command=list(argv), returncode=returncode, stderr=text)
    if any(s in text for s in _BUSY):
        return JobBusyError(full, command=list(argv), returncode=returncode, stderr=text)
    if _PENDING in text:
        return JobPendingError(full, command=list(argv), returncode=returncode, stderr=text)
    return SlurmError(full, command=list(argv), returncode=returncode, stderr=text)


def run_slurm(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> SlurmResult:
    """Run one Slurm command; return its output or raise a ``slurm_dl.core.errors`` type."""
    args = [str(a) for a in argv]
    try:
        proc = subprocess.run(
            args,
            env=dict(env) if env is not None else None,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise SlurmNotInstalledError(
            f"{args[0]}: command not found; {INSTALL_HINT}", command=args
        ) from None
    except subprocess.TimeoutExpired as e:
        said = (
            e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        )
        if any(s in said for s in _BUSY):  # scancel -v retrying a job between states
            raise JobBusyError(
                f"{' '.join(args[:2])}: the job is between states ({one_line(said)})",
                command=args,
                stderr=said,
            ) from None
        raise SlurmUnavailableError(
            f"{' '.join(args[:2])}: no answer from Slurm within {timeout:g} s", command=args
        ) from None
    error = classify_failure(args, proc.returncode, proc.stderr, proc.stdout)
    if error is not None:
        raise error
    return SlurmResult(tuple(args), proc.stdout, proc.stderr)
