"""The prioritizer's store: the only module that talks to a database.

>>> store = Store("sqlite:////var/lib/slurm-dl/ledger.db")
>>> ledger = store.load_ledger()
"""

from .models import (
    DecisionRow,
    ExplanationSnapshot,
    JobUtilisationRow,
    LedgerState,
    PreemptionRow,
    SiteFactorRow,
)
from .repository import PREEMPTION_OPEN_STATES, CycleWrite, ExplanationParts, Store
from .schema import HEAD as SCHEMA_VERSION

__all__ = [
    "CycleWrite",
    "ExplanationParts",
    "DecisionRow",
    "ExplanationSnapshot",
    "JobUtilisationRow",
    "LedgerState",
    "PREEMPTION_OPEN_STATES",
    "PreemptionRow",
    "SCHEMA_VERSION",
    "SiteFactorRow",
    "Store",
]
