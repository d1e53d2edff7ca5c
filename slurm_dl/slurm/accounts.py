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
from .controller import controller_config
from .runner import run_slurm


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
