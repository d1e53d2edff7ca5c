"""Preemptive fair share, live: the prioritizer's own cycles (real backend, real store) under
the policy ``fairshare`` on a real Slurm.

Account ``flood`` fills the node first with checkpointable jobs (``--requeue``,
``dl:ckpt=1``, a USR2 trap); account ``late`` then asks for half the node. Once the flood
jobs' lease (20 s here) is over, four of them are signalled with USR2, requeued, and ``late``'s
jobs start long before the flood jobs would have ended on their own; the requeued jobs resume
when ``late``'s short jobs end. Every preemption row says it was for fair share and names the
account the victim yielded to.
"""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.fairness import yielded_to
from slurm_dl.slurm import CliBackend
from slurm_dl.store import Store
from slurm_dl.testbed import job_fields, submit
from polling import wait_until

REPO = Path(__file__).resolve().parents[2]
LEASE_S = 20
FLOOD = "#!/bin/bash\ntrap 'echo USR2' USR2\nwhile true; do sleep 1 & wait $!; done\n"


def _config(tmp_path: Path) -> Path:
    text = (REPO / "site-configs" / "testbed.toml").read_text()
    text = text.replace('mix = "combined"', 'mix = "fairshare"', 1)
    text = text.replace(
        "[policy.fairshare]\n", f"[policy.fairshare]\nlease_seconds = {LEASE_S}\n", 1
    )
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def test_late_account_gets_its_share_within_a_lease_and_the_flood_resumes(
    make_testbed, tmp_path
) -> None:
    tb = make_testbed(nodes=1, gpus_per_node=8, gpu_type="h100")
    tb.up()
    env = tb.env()
    cfg = load_config(_config(tmp_path))
    assert cfg.policy.mix == "fairshare" and cfg.policy.fairshare.lease_seconds == LEASE_S
    store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
    prio = Prioritizer(cfg, CliBackend(env), store)
    reports = []

    def cycle() -> None:
        reports.append(prio.run_cycle())

    def state(job: int) -> str:
        return job_fields(job, env).get("JobState", "")

    def restarts(job: int) -> int:
        return int(job_fields(job, env).get("Restarts", "0") or 0)

    flood = [
        submit(
            FLOOD,
            env,
            [
                "-A",
                "flood",
                "--gpus=1",
                "-t",
                "30",
                "--requeue",
                "--comment=dl:ckpt=1",
                "--open-mode=append",
                "-o",
                str(tmp_path / f"flood-{i}.out"),
            ],
        )
        for i in range(8)
    ]
    try:
        wait_until(
            "the flood to fill the node", lambda: all(state(j) == "RUNNING" for j in flood), 90
        )
        starts = {
            j: datetime.fromisoformat(job_fields(j, env)["StartTime"]).timestamp() for j in flood
        }
        late = [
            submit(
                "#!/bin/bash\nsleep 20\n",
                env,
                ["-A", "late", "--gpus=1", "-t", "5", "-o", "/dev/null"],
            )
            for _ in range(4)
        ]
        wait_until(
            "late's jobs to start",
            lambda: all(state(j) in ("RUNNING", "COMPLETING", "COMPLETED") for j in late),
            240,
            poll=2.0,
            between=cycle,
        )
        # they started on the flood's GPUs, not when the flood ended (it runs for 30 minutes)
        rows = store.preemptions()
        victims = {r.victim_job_id for r in rows}
        assert len(victims) == 4 and victims <= set(flood), [
            (r.victim_job_id, r.reason) for r in rows
        ]
        assert {r.need_job_id for r in rows} == set(late)
        for r in rows:
            assert yielded_to(r.reason) == (r.need_job_id, "late"), r.reason
        # the lease held: nobody was signalled before its job had run LEASE_S seconds
        early = [
            (r.victim_job_id, r.signalled_at - starts[r.victim_job_id])
            for r in rows
            if r.signalled_at < starts[r.victim_job_id] + LEASE_S - 1
        ]
        assert not early, early
        # the victims were signalled (USR2 reached their trap) and requeued
        wait_until(
            "the victims to be requeued",
            lambda: all(restarts(j) >= 1 for j in victims),
            120,
            poll=2.0,
            between=cycle,
        )
        assert all(
            "USR2" in (tmp_path / f"flood-{flood.index(j)}.out").read_text() for j in victims
        )
        assert all(restarts(j) == 0 and state(j) == "RUNNING" for j in set(flood) - victims)
        # late's jobs end; the requeued flood jobs resume
        wait_until(
            "the flood to resume",
            lambda: all(state(j) == "RUNNING" for j in flood),
            240,
            poll=2.0,
            between=cycle,
        )
        assert all(state(j) == "COMPLETED" for j in late)
        assert not any(r.errors for r in reports)
        assert {r.state for r in store.preemptions()} == {"requeued"}
    finally:
        subprocess.run(["scancel", *map(str, flood)], env=env, check=False)
        subprocess.run(["scancel", "-u", "root"], env=env, check=False)
