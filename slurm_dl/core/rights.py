"""Whether the prioritizer's user may change other users' jobs, and what to run when it may not.

Slurm lets only root, slurm.conf's ``SlurmUser`` and users that slurmdbd gives an AdminLevel
(operator or administrator) set a job's SiteFactor, move another user's job to another
partition, signal it or requeue it. Anyone else gets ``Invalid user id`` (another user's job)
or ``Access/permission denied`` (a field only admins may set) on every update. The
filter's shim (``job_submit.lua``) also refuses a partition or feature change after submission
by anyone it does not trust, with the same ``Access/permission denied``.

Pure: the callers (the daemon at start, ``slurm-dl doctor``) read the facts from Slurm.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

OPERATOR_LEVELS = ("operator", "administrator")
"""sacctmgr's AdminLevel values that may change other users' jobs (lower-cased)."""

_REFUSED = re.compile(
    r"Invalid user id|Access/permission denied|Access denied|Permission denied", re.IGNORECASE
)


def refused_for_rights(text: str) -> bool:
    """Whether Slurm's message says the caller may not make this change (not that the job is
    gone, busy or the controller unreachable)."""
    return bool(_REFUSED.search(text or ""))


def grant_command(user: str) -> str:
    """The command that gives ``user`` operator rights (slurmdbd must know the user)."""
    return f"sacctmgr modify user {user} set adminlevel=operator"


@dataclass(frozen=True, slots=True)
class Rights:
    """``ok``: True (may change every job), False (may not), None (could not tell)."""

    ok: bool | None
    detail: str
    fix: str = ""


def slurm_rights(
    user: str,
    uid: int,
    slurm_user: str | None,
    *,
    slurmdbd: bool,
    admin_level: str | None = None,
    lookup_error: str | None = None,
) -> Rights:
    """Whether ``user`` (``uid``) has the rights the prioritizer needs. ``admin_level``:
    what ``sacctmgr show user`` prints for it (None: slurmdbd does not know the user);
    ``lookup_error``: why it could not be read."""
    if uid == 0:
        return Rights(True, f"{user} is root")
    if slurm_user and user == slurm_user:
        return Rights(True, f"{user} is slurm.conf's SlurmUser")
    if not slurmdbd:
        return Rights(
            False,
            f"{user} is neither root nor SlurmUser ({slurm_user or 'root'}), and without "
            "slurmdbd Slurm gives nobody else operator rights",
            f"run the prioritizer as {slurm_user or 'root'} (the unit's User=), or use "
            f"slurmdbd and run: {grant_command(user)}",
        )
    if lookup_error:
        return Rights(None, f"cannot read {user}'s AdminLevel from slurmdbd: {lookup_error}")
    if admin_level is None:
        return Rights(
            False,
            f"{user} is not SlurmUser ({slurm_user or 'root'}) and slurmdbd does not know it",
            f"sacctmgr add user {user} account=ACCOUNT adminlevel=operator",
        )
    if admin_level.strip().lower() in OPERATOR_LEVELS:
        return Rights(True, f"{user} has AdminLevel {admin_level.strip()}")
    return Rights(
        False,
        f"{user} is not SlurmUser ({slurm_user or 'root'}) and has no operator rights "
        f"(AdminLevel {admin_level.strip() or 'None'})",
        grant_command(user),
    )


def trusted_user(configured: str | None, slurm_user: str | None) -> str:
    """The user the filter's shim trusts as the prioritizer's: ``[prioritizer] user``, else
    slurm.conf's SlurmUser (Slurm's default: root)."""
    return configured or slurm_user or "root"


def trust_problem(
    user: str, uid: int, configured: str | None, slurm_user: str | None
) -> str | None:
    """Why the filter's shim would refuse this daemon's GPU-type moves (None: it trusts it)."""
    if uid == 0 or user in (configured, slurm_user):
        return None
    expected = trusted_user(configured, slurm_user)
    return (
        f"this daemon runs as {user}, but the filter trusts moves between partitions only "
        f'from root and {expected}: set [prioritizer] user = "{user}" in the site config, '
        "then run slurm-dl filter install again"
    )


def startup_message(rights: Rights, width: int = 80) -> str:
    """What the daemon prints at start when it lacks the rights: the problem and what to run,
    wrapped to ``width`` columns."""
    head = textwrap.fill(
        f"the prioritizer cannot change jobs in Slurm: {rights.detail}.",
        width,
        break_on_hyphens=False,
        break_long_words=False,
    )
    if not rights.fix:
        return head
    return (
        head
        + "\n"
        + textwrap.fill(
            f"Fix: {rights.fix}",
            width,
            subsequent_indent="  ",
            break_on_hyphens=False,
            break_long_words=False,
        )
    )
