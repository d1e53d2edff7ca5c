"""Which accounts Slurm lets each user run under: the (user, account) associations of this
cluster in slurmdbd, and whether slurmctld enforces them.

    view = slurm_associations()        # scontrol show config, then sacctmgr (about 0.5 s: cache it)
    view.allows("ann", "nlp")          # True / False; None where Slurm keeps no associations

``sacctmgr -nP show assoc format=user,account where cluster=NAME`` prints one ``user|account``
line per association, account-level ones with an empty user (``|dl``) and a line per partition
where a user has partition associations; only user lines count, partitions folded. Slurm keeps
account names in lower case (slurmctld lowers a job's ``--account`` after job_submit has seen it):
compare lower-cased accounts. Without slurmdbd (``AccountingStorageType`` not slurmdbd) there
are no associations and sacctmgr is not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..core.enforcement import controller_accounting, enforces_associations, uses_slurmdbd
from ..core.errors import SlurmError
from ..core.rights import Rights, slurm_rights
from .controller import controller_config
from .runner import one_line, run_slurm


@dataclass(frozen=True, slots=True)
class Associations:
    """``pairs``: the (user, account) associations Slurm knows; None without slurmdbd.
    ``enforced``: slurmctld refuses a job whose user and account have no association
    (``AccountingStorageEnforce`` with ``associations``, or ``limits``/``safe``/``qos``/``wckeys``/``all``,
    which imply it)."""

    pairs: frozenset[tuple[str, str]] | None
    enforced: bool = False
    cluster: str = ""

    def allows(self, user: str, account: str) -> bool | None:
        """Whether ``user`` has an association with ``account`` (None: Slurm cannot say)."""
        if self.pairs is None:
            return None
        return (user, account.strip().lower()) in self.pairs

    def accounts_of(self, user: str) -> frozenset[str] | None:
        """The accounts ``user`` may name (None: Slurm cannot say)."""
        if self.pairs is None:
            return None
        return frozenset(a for u, a in self.pairs if u == user)


def parse_associations(text: str) -> frozenset[tuple[str, str]]:
    """``sacctmgr -nP show assoc format=user,account`` -> {(user, account)}; account lines
    (no user) are left out, accounts lower-cased."""
    out = set()
    for line in text.splitlines():
        user, sep, account = line.strip().partition("|")
        account = account.split("|", 1)[0].strip().lower()
        if sep and user.strip() and account:
            out.add((user.strip(), account))
    return frozenset(out)


def slurm_associations(
    env: Mapping[str, str] | None = None,
    *,
    controller: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> Associations:
    """This cluster's associations and whether they are enforced. ``controller``: ``scontrol show
    config`` already read (``controller.controller_config``); read here when not given. Raises
    SlurmError / SlurmUnavailableError (slurmctld or slurmdbd unreachable)."""
    conf = controller if controller is not None else controller_config(env, timeout=timeout)
    storage, enforce = controller_accounting(conf)
    cluster = next((v for k, v in conf.items() if k.lower() == "clustername"), "").strip()
    if not uses_slurmdbd(storage):
        return Associations(None, False, cluster)
    argv = ["sacctmgr", "-nP", "show", "assoc", "format=user,account"]
    if cluster:
        argv += ["where", f"cluster={cluster}"]
    pairs = parse_associations(run_slurm(argv, env=env, timeout=timeout).stdout)
    return Associations(pairs, enforces_associations(enforce), cluster)


def parse_admin_level(text: str) -> str | None:
    """``sacctmgr -nP show user NAME format=adminlevel`` -> its AdminLevel (None: no such user)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0].split("|", 1)[0] if lines else None


def user_rights(
    user: str,
    uid: int,
    env: Mapping[str, str] | None = None,
    *,
    controller: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> Rights:
    """Whether ``user`` may change every job (SiteFactor, partition, signal, requeue): root,
    SlurmUser, or an AdminLevel in slurmdbd. Raises SlurmError when slurmctld cannot be asked."""
    conf = controller if controller is not None else controller_config(env, timeout=timeout)
    slurm_user = slurm_user_of(conf)
    storage, _ = controller_accounting(conf)
    dbd = uses_slurmdbd(storage)
    level, error = None, None
    if dbd and uid != 0 and user != slurm_user:
        argv = ["sacctmgr", "-nP", "show", "user", user, "format=adminlevel"]
        try:
            level = parse_admin_level(run_slurm(argv, env=env, timeout=timeout).stdout)
        except SlurmError as e:
            error = one_line(str(e))
    return slurm_rights(user, uid, slurm_user, slurmdbd=dbd, admin_level=level, lookup_error=error)


def slurm_user_of(controller: Mapping[str, str]) -> str | None:
    """slurm.conf's SlurmUser from ``scontrol show config`` (``slurm(64030)`` -> ``slurm``)."""
    conf = {k.lower(): v for k, v in controller.items()}
    return (conf.get("slurmuser") or "").split("(")[0].strip() or None
