"""MUNGE, the authentication every Slurm cluster already runs: who is asking, across nodes.

A user's ``slurm-dl explain`` on a login node encodes an empty credential with ``munge``; the
prioritizer on the controller decodes it with ``unmunge`` and learns the caller's uid, the same
way slurmctld learns who submitted a job. MUNGE rejects a credential that was decoded before
(a replay), has expired, or was made with another cluster's key.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from ..core.errors import SlurmDLError


class MungeError(SlurmDLError, OSError):
    """No munged to talk to, or a credential it will not vouch for."""


@dataclass(frozen=True)
class MungeIdentity:
    uid: int
    gid: int


def _socket_args(socket: str | None) -> list[str]:
    return [f"--socket={socket}"] if socket else []


def _run(argv: list[str], stdin: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise MungeError(f"{argv[0]} is not installed (Debian package munge)") from None
    except subprocess.TimeoutExpired:
        raise MungeError(f"{argv[0]}: no answer from munged in {timeout:g} s") from None


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else "no message"


def encode(socket: str | None = None, timeout: float = 5.0) -> str:
    """A fresh credential for the calling user (no payload)."""
    out = _run(["munge", "--no-input", *_socket_args(socket)], "", timeout)
    if out.returncode != 0 or not out.stdout.strip():
        raise MungeError(f"munge: cannot make a credential: {_first_line(out.stderr)}")
    return out.stdout.strip()


_UID = re.compile(r"^UID:\s+.*?\((\d+)\)\s*$", re.M)
_GID = re.compile(r"^GID:\s+.*?\((\d+)\)\s*$", re.M)
_STATUS = re.compile(r"^STATUS:\s+(.*?)\s*$", re.M)


def parse_unmunge(text: str) -> MungeIdentity:
    """The identity in ``unmunge``'s metadata output (``UID: name (N)``)."""
    uid, gid = _UID.search(text), _GID.search(text)
    if not uid or not gid:
        raise MungeError("unmunge: no UID/GID in its answer")
    return MungeIdentity(int(uid.group(1)), int(gid.group(1)))


def decode(credential: str, socket: str | None = None, timeout: float = 5.0) -> MungeIdentity:
    """Who made ``credential``; MungeError when munged does not vouch for it."""
    if not credential or len(credential) > 4096 or not credential.isprintable():
        raise MungeError("not a MUNGE credential")
    out = _run(
        ["unmunge", "--output=/dev/null", "--keys=STATUS,UID,GID", *_socket_args(socket)],
        credential + "\n",
        timeout,
    )
    if out.returncode != 0:
        status = _STATUS.search(out.stdout)
        why = (
            status.group(1) if status else _first_line(out.stderr).removeprefix("unmunge: Error: ")
        )
        raise MungeError(f"MUNGE credential refused: {why}")
    return parse_unmunge(out.stdout)
