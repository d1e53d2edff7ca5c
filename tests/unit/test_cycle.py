"""The prioritizer cycle against an in-memory cluster (the live-Slurm version is in
tests/integration/test_prioritizer*.py): ledger accrual, SiteFactor pushes, the preemption state
machine across cycles, dry runs, restarts of the daemon, and the loop's backoff."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from prioritizer import Prioritizer
from prioritizer.loop import Backoff, Loop
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import JobNotFoundError, SlurmUnavailableError
from slurm_dl.slurm.protocol import JobEnd
from slurm_dl.core.model import ClusterSnapshot, Job, JobState, Node
from slurm_dl.store import Store

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class SiteFactorResult:  # the shape slurm_dl.slurm's set_site_factor returns
    updated: int
    calls: int
    missing: tuple[int, ...] = ()


def group_by_value(factors):
    groups = {}
    for j, v in factors.items():
        groups.setdefault(v, []).append(j)
    return {v: sorted(ids) for v, ids in sorted(groups.items())}


class MemoryCluster:
    """A cluster held in memory that implements the backend calls the cycle makes."""

    def __init__(self, nodes: int = 1, gpus: int = 8) -> None:
        self.now = 1000.0
        self.nodes = [Node(f"gpu{i + 1:02d}", gpus, "h100") for i in range(nodes)]
        self.jobs: dict[int, Job] = {}
        self.site_factor_calls: list[dict[int, int]] = []
        self.signals: list[tuple[int, str]] = []
        self.requeues: list[int] = []
        self.down = False
        self.hidden: set[int] = (
            set()
        )  # out of the snapshot (squeue -t PD,R,CG,S), known to scontrol
        self.steers: list[tuple[int, str]] = []
        self.refuse_requeue: Exception | None = None
        self.refuse_signal: Exception | None = None

    def add(
        self, job_id: int, gpus: int, *, running_on: str | None = None, account: str = "a", **kw
    ) -> Job:
        """A job that declared a checkpoint handler (``dl:ckpt=1``) unless ``comment`` says otherwise."""
        kw.setdefault("comment", "dl:ckpt=1")
        kw.setdefault("requeue", True)
        j = Job(
            job_id,
            user="u",
            account=account,
            name=f"j{job_id}",
            num_gpus=gpus,
            submit_time=self.now,
            **kw,
        )
        if running_on:
            j.state, j.start_time, j.nodes = JobState.RUNNING, self.now, (running_on,)
        self.jobs[job_id] = j
        return j

    def snapshot(self) -> ClusterSnapshot:
        if self.down:
            raise SlurmUnavailableError("slurmctld down")
        used: dict[str, int] = {}
        for j in self.jobs.values():
            if j.state.active:
                for n in j.nodes:
                    used[n] = used.get(n, 0) + j.num_gpus // len(j.nodes)
        nodes = [dataclasses.replace(n, gpus_used=used.get(n.name, 0)) for n in self.nodes]
        jobs = [dataclasses.replace(j) for j in self.jobs.values() if j.job_id not in self.hidden]
        return ClusterSnapshot(taken_at=self.now, jobs=jobs, nodes=nodes)

    def set_site_factor(self, values: dict[int, int]) -> SiteFactorResult:
        missing = tuple(sorted(j for j in values if j not in self.jobs))
        groups = group_by_value({j: v for j, v in values.items() if j in self.jobs})
        for value, ids in groups.items():
            self.site_factor_calls.append(dict.fromkeys(ids, value))
            for j in ids:
                self.jobs[j].site_factor = value
        return SiteFactorResult(
            updated=len(values) - len(missing), calls=len(groups), missing=missing
        )

    def signal_batch(self, job_id: int, signal: str) -> None:
        if self.refuse_signal is not None:
            raise self.refuse_signal
        self.signals.append((job_id, signal))

    def signal_steps(self, job_id: int, signal: str) -> None:
        if self.refuse_signal is not None:
            raise self.refuse_signal
        self.signals.append((job_id, f"{signal}@steps"))

    def requeue(self, job_id: int) -> None:
        if self.refuse_requeue is not None:
            raise self.refuse_requeue
        j = self.jobs[job_id]
        self.requeues.append(job_id)
        j.state, j.nodes, j.start_time, j.restarts = JobState.PENDING, (), None, j.restarts + 1

    def set_partition(self, job_id: int, partition: str) -> None:
        self.steers.append((job_id, partition))
        self.jobs[job_id].partition = partition

    def set_features(self, job_id: int, features: str) -> None:
        self.steers.append((job_id, features))
        self.jobs[job_id].features = features

    def job_end(self, job_id: int) -> JobEnd:
        j = self.jobs.get(job_id)
        if j is None:
            raise JobNotFoundError(f"scontrol show job {job_id}: Invalid job id specified")
        return JobEnd(
            j.state,
            exit_signal=self.exit_signal.get(job_id, 0),
            end_time=self.now,
            restarts=j.restarts,
        )

    exit_signal: dict[int, int] = {}

    def start(self, job_id: int, node: str) -> None:
        j = self.jobs[job_id]
        j.state, j.start_time, j.nodes = JobState.RUNNING, self.now, (node,)


@pytest.fixture
def config():
    return load_config(ROOT / "site-configs" / "testbed.toml")


def admission_share(config, share: float):
    """``config`` with ``[policy.deadline] admission_share`` set to ``share``."""
    deadline = config.policy.deadline.model_copy(update={"admission_share": share})
    return config.model_copy(
        update={"policy": config.policy.model_copy(update={"deadline": deadline})}
    )


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path / 'prio.db'}"


def test_ledger_accrues_and_survives_a_new_daemon(config, db):
    c = MemoryCluster()
    c.add(1, 2, running_on="gpu01")
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    c.now += 30
    p.run_cycle()
    assert p.ledger.attained(1) == pytest.approx(60.0)
    again = Prioritizer(config, c, Store(db))
    c.now += 10
    again.run_cycle()
    assert again.ledger.attained(1) == pytest.approx(80.0)
    assert again.cycle_no == 3


def test_las_demoted_long_job_gets_lower_site_factor_than_new_job(config, db):
    c = MemoryCluster(nodes=2)
    c.add(1, 1, running_on="gpu01")
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    c.now += 60  # 60 GPU-s: past the 20 GPU-s first threshold
    c.requeue(1)  # back in the queue with its service
    c.add(2, 1)
    r = p.run_cycle()
    assert c.jobs[2].site_factor > c.jobs[1].site_factor
    assert r.pushed_jobs >= 1
    expl = p.store.explanation(1)
    assert expl["factors"]["las"]["queue"] == 1
    assert p.store.explanation(2)["factors"]["las"]["queue"] == 0


def test_second_cycle_pushes_nothing_when_nothing_changed(config, db):
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01")
    for i in range(2, 6):
        c.add(i, 1)
    p = Prioritizer(config, c, Store(db))
    r1 = p.run_cycle()
    assert r1.push_calls == len(r1.pushes) and r1.pushed_jobs >= 1
    assert all(len(set(call.values())) == 1 for call in c.site_factor_calls)  # one value per call
    r2 = p.run_cycle()
    assert r2.pushed_jobs == 0 and r2.push_calls == 0


def test_dry_run_changes_nothing(config, db):
    c = MemoryCluster()
    c.add(1, 8, running_on="gpu01", attained_gpu_s=800.0)
    c.now += 100
    c.add(2, 1)
    store = Store(db)
    r = Prioritizer(config, c, store, dry_run=True).run_cycle()
    assert r.dry_run
    assert r.pushes == {config.prioritizer.site_factor_max: [2]} and r.pushed_jobs == 1
    assert r.signalled == [1] and r.planned[0]["need"] == 2
    assert c.site_factor_calls == [] and c.signals == [] and c.requeues == []
    assert store.ledger_cycle() == 0 and store.load_ledger().jobs == {}
    assert store.preemptions() == []


def _preemption_scene(config, db):
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01")
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    c.now += 30  # 240 GPU-s, past min runtime (15 s) and the first LAS threshold
    c.add(2, 1)
    return c, p


def test_preemption_signals_waits_grace_then_requeues_once(config, db):
    c, p = _preemption_scene(config, db)
    r = p.run_cycle()
    assert r.signalled == [1] and c.signals == [(1, "USR2")] and c.requeues == []
    c.now += 3
    assert p.run_cycle().requeued == []  # still within the 10 s grace: no sleep, no requeue
    c.now += 10
    r = p.run_cycle()
    assert r.requeued == [1] and c.requeues == [1]
    c.start(2, "gpu01")
    for _ in range(3):
        c.now += 3
        p.run_cycle()
    assert c.signals == [(1, "USR2")] and c.requeues == [1]
    rows = p.store.preemptions()
    assert [(r.victim_job_id, r.need_job_id, r.state) for r in rows] == [(1, 2, "requeued")]
    assert p.ledger.jobs[1].last_checkpoint_signal is not None
    assert p.ledger.attained(1) >= 240.0


def test_victim_that_saves_and_exits_on_the_signal_is_requeued(config, db):
    """It stopped for the preemption, not because it was done: docs/users.md tells handlers to
    save and exit on the signal, and such a job used to end COMPLETED and stop there."""
    c, p = _preemption_scene(config, db)
    p.run_cycle()
    c.jobs[1].state = JobState.COMPLETED  # squeue shows it finished (MinJobAge)
    c.now += 3
    p.run_cycle()
    assert c.requeues == [1]
    row = p.store.preemptions()[0]
    assert row.state == "requeued" and "saved and exited" in p.store.decisions(1)[-1].reason


@pytest.mark.parametrize(
    "state, outcome, requeued",
    [
        (JobState.FAILED, "died", True),  # no handler where the signal went: it died of it
        (JobState.CANCELLED, "finished", False),  # its owner (or an admin) ended it
        (JobState.TIMEOUT, "finished", False),
    ],
)
def test_how_a_victim_ended_decides_its_outcome(config, db, state, outcome, requeued):
    c, p = _preemption_scene(config, db)
    p.run_cycle()
    c.jobs[1].state = state
    if state is JobState.FAILED:
        c.exit_signal[1] = 12
    c.now += 3
    p.run_cycle()
    c.exit_signal.clear()
    assert p.store.preemptions()[0].state == outcome and (c.requeues == [1]) == requeued


def test_victim_missing_from_a_snapshot_is_looked_up_in_slurm(config, db):
    """A job out of one snapshot may be a requeue in transit: Slurm's own record decides."""
    c, p = _preemption_scene(config, db)
    p.run_cycle()
    c.hidden.add(1)  # scontrol still shows it running
    c.now += 20
    p.run_cycle()
    assert p.store.preemptions()[0].state == "signalled" and c.requeues == []
    c.hidden.clear()
    c.jobs[1].state, c.jobs[1].restarts = JobState.PENDING, 1  # it requeued itself after all
    c.now += 3
    p.run_cycle()
    assert p.store.preemptions()[0].state == "requeued-self" and c.requeues == []
    c2, p2 = _preemption_scene(config, db.replace(".db", "-2.db"))
    p2.run_cycle()
    c2.jobs.pop(1)  # past MinJobAge: Slurm forgot it
    c2.now += 3
    p2.run_cycle()
    assert p2.store.preemptions()[0].state == "finished"


def test_daemon_killed_between_write_ahead_and_signal_never_signals_twice(config, db):
    c, p = _preemption_scene(config, db)
    # The kill -9 window: the row is committed, the signal never sent, the cycle never saved.
    p.store.begin_preemption(1, 2, c.now, 0, "crashed before signalling")
    fresh = Prioritizer(config, c, Store(db))
    fresh.run_cycle()
    assert c.signals == []  # a 'signalling' row counts as signalled
    c.now += 11
    fresh.run_cycle()
    assert c.requeues == [1]  # ... and the requeue still follows the grace period


def test_daemon_killed_after_requeue_intent_requeues_only_if_not_yet_done(config, db):
    c, p = _preemption_scene(config, db)
    p.run_cycle()
    row = p.store.preemptions()[0]
    p.store.set_preemption_state(row.id, "requeueing", c.now + 11)
    c.requeue(1)  # the requeue reached Slurm, then the daemon died
    c.now += 12
    Prioritizer(config, c, Store(db)).run_cycle()
    assert c.requeues == [1]
    assert p.store.preemptions()[0].state == "requeued"


def test_nonpreemptible_and_young_jobs_are_left_alone(config, db):
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01", admin_comment="sdl1:class=serve;ckpt=0;gpus=8;shape=1x8")
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    c.now += 60
    c.add(2, 1)
    p.run_cycle()
    assert c.signals == []
    c2 = MemoryCluster(nodes=1)
    c2.add(1, 8, running_on="gpu01")
    c2.add(2, 1)
    c2.now += 5  # below the 15 s minimum runtime
    Prioritizer(config, c2, Store(db.replace("prio.db", "prio2.db"))).run_cycle()
    assert c2.signals == []


def test_backoff_doubles_to_the_cap_and_resets():
    b = Backoff(maximum_s=5.0)
    delays = [b.failed(0.0) for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert not b.ready(4.9) and b.ready(5.0)
    assert b.succeeded() and not b.succeeded()


def test_loop_tick_backs_off_while_slurm_is_down_and_recovers(config, db):
    c = MemoryCluster()
    c.add(1, 1, running_on="gpu01")
    loop = Loop(Prioritizer(config, c, Store(db)))
    c.down = True
    assert loop.tick() is None
    assert loop.backoff.failures == 1 and loop.backoff.delay_s == 1.0
    c.down = False
    loop.backoff.resume_at = 0.0  # the backoff time has passed
    assert loop.tick() is not None
    assert loop.backoff.failures == 0


def test_job_missing_from_one_snapshot_keeps_its_service(config, db):
    c = MemoryCluster()
    c.add(1, 2, running_on="gpu01")
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    c.now += 10
    p.run_cycle()
    hidden = c.jobs.pop(1)
    c.now += 1
    p.run_cycle()  # closed by the ledger
    hidden.submit_time = c.now  # Slurm resets the submit time of a requeued job
    c.jobs[1] = hidden
    c.now += 1
    p.run_cycle()
    c.now += 10
    p.run_cycle()
    assert p.ledger.attained(1) >= 40.0
    assert not p.ledger.jobs[1].finished


def test_deadlines_beyond_a_users_quota_buy_no_priority(config, db):
    # sbatch --deadline reaches Slurm around the filter, so the daemon enforces the quota itself:
    # of six tight-deadline jobs, only the user's first four (max_deadline_jobs_per_user) are boosted
    c = MemoryCluster()
    c.add(99, 8, running_on="gpu01", time_limit=3600.0)
    for i in range(1, 7):
        c.add(i, 1, time_limit=600.0, deadline=c.now + 900.0).submit_time += i
    plain = c.add(7, 1, time_limit=600.0)
    plain.user = "other"
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    sf = {i: c.jobs[i].site_factor for i in range(1, 8)}
    assert min(sf[i] for i in range(1, 5)) > sf[7] >= max(sf[5], sf[6]), sf
    notes = [d for d in p.store.decisions(5) if d.kind == "deadline"]
    assert len(notes) == 1 and "already has 4 deadline jobs" in notes[0].reason
    c.now += 10
    p.run_cycle()
    assert len([d for d in p.store.decisions(5) if d.kind == "deadline"]) == 1  # said once


def test_a_cycle_pushes_at_most_the_configured_number_and_the_next_the_rest(config, db):
    cfg = config.model_copy(
        update={"prioritizer": config.prioritizer.model_copy(update={"max_pushes_per_cycle": 3})}
    )
    c = MemoryCluster()
    c.add(99, 8, running_on="gpu01")
    for i in range(1, 6):
        c.add(i, 1, account=f"acc{i}").submit_time += i
    p = Prioritizer(cfg, c, Store(db))
    r1 = p.run_cycle()
    assert r1.pushed_jobs == 3 and r1.deferred > 0
    r2 = p.run_cycle()
    assert r1.pushed_jobs + r2.pushed_jobs == r1.pushed_jobs + r1.deferred and r2.deferred == 0


def test_a_deadline_the_cluster_cannot_keep_is_demoted_once_with_a_message(config, db):
    # 8 GPUs, of which deadlines may promise 47.5 % (a site's setting; the default is 0.9)
    # while best-effort work wants the rest: 5.7 GPU-hours in the next 90 min. Two 3-GPU jobs
    # due then that each ask 1 h: the first submitted is promised, the second cannot be kept
    # next to it and runs as best effort (told once, never boosted)
    assert config.policy.deadline.admission_share == 0.9
    config = admission_share(config, 0.475)
    c = MemoryCluster()
    c.add(1, 3, time_limit=3600.0, deadline=c.now + 5400.0)
    second = c.add(2, 3, time_limit=3600.0, deadline=c.now + 5400.0)
    second.submit_time += 1
    plain = c.add(3, 8, time_limit=3600.0)
    plain.submit_time -= 1
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    notes = [d for d in p.store.decisions(2) if d.kind == "deadline"]
    assert (
        len(notes) == 1
        and "deadline not admitted" in notes[0].reason
        and "best effort" in notes[0].reason
    )
    assert not [d for d in p.store.decisions(1) if d.kind == "deadline"]
    c.now += 60.0
    for _ in range(2):
        p.run_cycle()
        c.now += 10.0
    sf = {i: c.jobs[i].site_factor for i in (1, 2, 3)}
    assert sf[1] > sf[3] > sf[2], sf  # the promised job first; the demoted one is not boosted
    assert len([d for d in p.store.decisions(2) if d.kind == "deadline"]) == 1  # said once


def test_deadline_promises_and_demotions_survive_a_restart(config, db, tmp_path):
    """A restarted daemon keeps each job's answer, where a daemon that forgot would decide again
    on the cluster as it is by then: the demoted job would now be promised, and later the
    promised one (still waiting) would be demoted."""
    config = admission_share(config, 0.475)  # a scene sized for the former default
    c = MemoryCluster()
    c.add(1, 3, time_limit=3600.0, deadline=c.now + 5400.0)
    second = c.add(2, 3, time_limit=3600.0, deadline=c.now + 5400.0)
    second.submit_time += 1
    c.add(3, 8, time_limit=3600.0).submit_time -= 1
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    assert p.admission.admitted.keys() == {1} and p.admission.demoted.keys() == {2}
    del c.jobs[3]  # the best-effort job is gone: the whole cluster may be promised
    for n, (later, forgot_admits, forgot_demotes) in enumerate(
        [(1500.0, {1, 2}, set()), (1500.0, set(), {1, 2})]
    ):
        c.now += later
        again = Prioritizer(config, c, Store(db))  # a restart
        again.run_cycle()
        assert again.admission.admitted.keys() == {1} and again.admission.demoted.keys() == {2}
        forgot = Prioritizer(config, c, Store(f"sqlite:///{tmp_path / f'forgot{n}.db'}"))
        forgot.run_cycle()
        assert (
            forgot.admission.admitted.keys() == forgot_admits
            and forgot.admission.demoted.keys() == forgot_demotes
        )
    assert (
        len([d for d in again.store.decisions(2) if d.kind == "deadline"]) == 1
    )  # said once, across restarts


def test_held_deadline_jobs_keep_no_promise_and_are_tested_again_in_turn_on_release(config, db):
    """User a's four held 8-GPU deadline jobs (the per-user quota) made user b's deadline "not
    admitted"; cancelling them admitted it. 8 GPUs for 5.5 h hold 44 GPU-hours: a's jobs ask 8
    each, b's 16. While held they owe nothing; released (after a restart of the daemon) each is
    tested again after b's, one after another: three fit, the fourth is told why it does not."""
    from slurm_dl.explain.view import render_explanation

    c = MemoryCluster()
    for i in range(1, 5):
        j = c.add(
            i, 8, time_limit=3600.0, deadline=c.now + 5.5 * 3600.0, state_reason="JobHeldUser"
        )
        j.user = "a"
        j.submit_time -= 100 - i
    b = c.add(10, 8, time_limit=7200.0, deadline=c.now + 5.5 * 3600.0)
    b.user = "b"
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    assert p.admission.admitted.keys() == {10} and p.admission.demoted == {}
    held = [d.reason for d in p.store.decisions(1) if d.kind == "deadline"]
    assert held == [
        "deadline set aside while the job is held: it takes no room from other deadlines, "
        "and is tested again when the hold is released"
    ]
    c.now += 60.0
    for i in range(1, 5):
        c.jobs[i].state_reason = "Priority"  # scontrol release, all at once
    again = Prioritizer(config, c, Store(db))  # a restart: the holds were kept with the answers
    again.run_cycle()
    assert again.admission.admitted.keys() == {10, 1, 2, 3} and again.admission.demoted.keys() == {
        4
    }
    notes = [d for d in again.store.decisions(4) if d.kind == "deadline"]
    assert notes[-1].reason.startswith(
        "deadline not admitted: after its hold was released, deadlines already"
    )
    text = render_explanation(
        again.store.explanation(4),
        [{"at": d.at, "kind": d.kind, "value": d.value, "reason": d.reason} for d in notes],
    )
    assert "after its hold was released" in text and all(
        len(line) <= 80 for line in text.splitlines()
    ), text
    c.now += 60.0
    third = Prioritizer(config, c, Store(db))  # another restart changes no answer
    third.run_cycle()
    assert third.admission.admitted.keys() == {10, 1, 2, 3} and third.admission.demoted.keys() == {
        4
    }


def test_steps_a_deadline_of_slurm_overrides_are_set_aside_with_a_note(config, db):
    """On 22.05 the filter cannot see ``sbatch --deadline``: a job with both the filter's steps
    and Slurm's own deadline keeps the deadline (Slurm enforces it), and explain says the steps
    went, instead of dropping them without a word."""
    c = MemoryCluster()
    soft = f"sdl1:class=train;ckpt=1;gpus=1;shape=any;soft={int(c.now) + 3600}:1+{int(c.now) + 7200}:0.5"
    c.add(1, 1, time_limit=600.0, deadline=c.now + 5000.0, admin_comment=soft)
    c.add(2, 1, time_limit=600.0, admin_comment=soft)  # steps alone: kept, no note
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    notes = [d.reason for d in p.store.decisions(1) if d.kind == "deadline"]
    assert notes == [
        "deadline steps set aside: the job also has a deadline of its own (sbatch --deadline), "
        "which counts; a job has one or the other"
    ]
    assert not [d for d in p.store.decisions(2) if d.kind == "deadline"]


# --- the job's own preemption contract: its signal, its lead time, its own requeue ----------
def _scene_with_tag(config, db, tag: str):
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01", admin_comment=tag)
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    c.now += 30
    c.add(2, 1)
    return c, p


LIGHTNING_TAG = "sdl1:class=train;ckpt=steps;gpus=8;shape=1x8;sig=USR1;lead=40"


def test_the_jobs_own_signal_and_lead_time_are_followed(config, db):
    c, p = _scene_with_tag(config, db, LIGHTNING_TAG)
    p.run_cycle()
    assert c.signals == [(1, "USR1@steps")]  # its signal, to its steps: not the site's USR2
    c.now += 15  # past the site's 10 s grace, within the job's 40 s
    p.run_cycle()
    assert c.requeues == [] and p.store.preemptions()[0].state == "signalled"
    c.now += 26
    p.run_cycle()
    assert c.requeues == [1] and p.store.preemptions()[0].state == "requeued"


def test_a_lead_time_past_the_sites_maximum_is_cut_to_it(config, db):
    tag = LIGHTNING_TAG.replace("lead=40", f"lead={int(config.preemption.max_lead_seconds) + 5000}")
    c, p = _scene_with_tag(config, db, tag)
    p.run_cycle()
    c.now += config.preemption.max_lead_seconds + 1
    p.run_cycle()
    assert c.requeues == [1]


def test_a_job_that_requeues_itself_is_never_requeued_again(config, db):
    c, p = _scene_with_tag(config, db, LIGHTNING_TAG)
    p.run_cycle()
    c.start(2, "gpu01")  # the waiting job started elsewhere meanwhile: the row stays watched
    c.now += 5
    p.run_cycle()
    assert p.store.preemptions()[0].state == "signalled"
    c.jobs[1].state, c.jobs[1].restarts = JobState.PENDING, 1  # its handler ran `scontrol requeue`
    c.now += 3
    p.run_cycle()
    assert c.requeues == [] and p.store.preemptions()[0].state == "requeued-self"
    assert p.ledger.jobs[1].preemptions == 1  # charged a restart whichever way it went


def test_a_victim_still_running_when_nothing_waits_any_more_is_let_go(config, db):
    c, p = _scene_with_tag(config, db, LIGHTNING_TAG)
    p.run_cycle()
    c.jobs.pop(2)  # the waiting job was cancelled; its handler saved and the victim runs on
    c.now += 41
    p.run_cycle()
    row = p.store.preemptions()[0]
    assert row.state == "abandoned" and c.requeues == []
    assert "kept running" in p.store.decisions(1)[-1].reason


def test_two_jobs_behind_one_victim_signal_and_requeue_it_once(config, db):
    """The cycle that requeues a victim for one waiting job must not pick it for the next one
    from the snapshot taken before the requeue."""
    c, p = _preemption_scene(config, db)
    c.add(3, 2)
    p.run_cycle()
    assert c.signals == [(1, "USR2")]
    for _ in range(6):
        c.now += 3
        p.run_cycle()
    assert c.signals == [(1, "USR2")] and c.requeues == [1]
    assert [(r.victim_job_id, r.state) for r in p.store.preemptions()] == [(1, "requeued")]


def test_a_call_refused_for_now_is_not_retried_within_the_cycle(config, db):
    from slurm_dl.core.errors import JobBusyError, JobPendingError

    c, p = _preemption_scene(config, db)
    c.refuse_signal = JobBusyError("scancel: Job can not be altered now")
    p.run_cycle()
    assert p.store.preemptions()[0].state == "skipped" and c.signals == []
    c2, p2 = _preemption_scene(config, db.replace(".db", "-2.db"))
    p2.run_cycle()
    c2.refuse_requeue = JobBusyError("scontrol requeue: Job can not be altered now")
    c2.now += 11
    p2.run_cycle()
    assert p2.store.preemptions()[0].state == "requeueing"  # tried again next cycle
    c2.refuse_requeue = JobPendingError("scontrol requeue: Job is pending execution")
    c2.now += 3
    p2.run_cycle()
    assert p2.store.preemptions()[0].state == "requeued-self"


def test_a_soft_deadline_job_is_boosted_only_near_its_promised_step(config, db):
    # the filter's tag carries the steps; the daemon promises the first that fits and boosts
    # the job only as that step nears: one whose step is far off waits behind best effort
    config = admission_share(config, 0.475)  # a scene sized for the former default
    c = MemoryCluster()
    c.add(99, 8, running_on="gpu01", time_limit=3600.0)
    now = int(c.now)
    tag = "sdl1:class=train;ckpt=1;gpus=1;shape=any;soft={}"
    near = c.add(
        1, 1, time_limit=1200.0, admin_comment=tag.format(f"{now + 1800}:1+{now + 7200}:0.5")
    )
    far = c.add(2, 1, time_limit=600.0, admin_comment=tag.format(f"{now + 6 * 3600}:1"))
    c.add(3, 1, time_limit=600.0)
    # 5 GPUs for 20 min by 25 min from now do not fit next to the best-effort reserve (3.8 GPUs
    # may be promised): its second step is promised, and the first, near, buys it nothing
    given_up = c.add(
        4, 5, time_limit=1200.0, admin_comment=tag.format(f"{now + 1500}:1+{now + 3 * 3600}:0.5")
    )
    near.submit_time += 2
    far.submit_time += 1
    given_up.submit_time += 3
    p = Prioritizer(config, c, Store(db))
    p.run_cycle()
    assert p.admission.admitted == {1: now + 1800.0, 2: now + 6 * 3600.0, 4: now + 3 * 3600.0}
    sf = {i: c.jobs[i].site_factor for i in (1, 2, 3, 4)}
    assert sf[1] > sf[3] > max(sf[2], sf[4]), sf
    from slurm_dl.explain.view import factor_words

    words = {
        i: factor_words(
            "deadline", p.store.explanation(i)["factors"]["deadline"], p.store.explanation(i)
        )
        for i in (1, 4)
    }
    assert words[1].startswith("deadline steps: boosted for its promised step"), words
    assert "waits behind best effort until its promised step" in words[4], words
