"""The explain endpoint's answer to a user about a job whose explanation is gone."""

import os

from prioritizer.explain_server import answer
from slurm_dl.core.ledger import Ledger
from slurm_dl.slurm.munge import MungeIdentity
from slurm_dl.store import CycleWrite, Store


def test_a_job_with_only_decisions_left_is_not_called_someone_elses(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    store.save_cycle(
        CycleWrite(
            now=1.0,
            cycle=1,
            ledger=Ledger(),
            explanations={},
            decisions=[(42, "priority", 5, "score 0.5 -> SiteFactor 5")],
        )
    )
    a = answer(
        42,
        MungeIdentity(uid=os.getuid(), gid=os.getgid()),
        store,
        live=False,
        admin_uids=frozenset(),
    )
    assert a.status == 404 and "no longer knows whose job" in a.doc["error"]
    assert "decisions" not in a.doc  # nothing of the job is shown to a user who may not own it
    admin = answer(42, MungeIdentity(uid=0, gid=0), store, live=False, admin_uids=frozenset({0}))
    assert admin.status == 200 and admin.doc["decisions"][0]["reason"].startswith("score 0.5")
