"""The prioritizer under injected Slurm faults: a property test over hundreds of seeded cycles.

A small Slurm-like cluster in memory (jobs arrive, run, finish; requeue refuses Requeue=0 jobs;
users flip Requeue=0 on their own running jobs; arrays; jobs with and without a declared
checkpoint handler) is driven through ``slurm_dl.slurm.faults.FaultyBackend``, which makes Slurm
calls refuse, time out, vanish, half-succeed, print garbage or kill the daemon, at random with a
seed. After every cycle the invariants must hold:

1. a cycle whose snapshot could be read is saved (the store's cycle number advances);
2. attained service never decreases;
3. no job is signalled twice for one preemption (signals never outnumber its preemption rows);
4. no preemption row stays open past grace + requeue timeout (plus one cycle);
5. a job that did not opt in is never signalled, and never requeued (the site does not allow
   requeue without a handler here).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import JobNotFoundError, JobPendingError, SlurmError
from slurm_dl.core.model import ClusterSnapshot, Job, JobState, Node
from slurm_dl.slurm.faults import FAULT_KINDS, READ_CALLS, Crash, FaultyBackend
from slurm_dl.slurm.protocol import JobEnd, SiteFactorResult
from slurm_dl.store import PREEMPTION_OPEN_STATES, Store

ROOT = Path(__file__).resolve().parents[2]
CYCLES_PER_EXAMPLE = 30
EXAMPLES = 20  # 600 cycles in all


@dataclasses.dataclass
class Hidden:
    """What only the cluster knows about a job."""

    duration: float
    opted_in: bool
    progress: float = 0.0  # work done and kept (a checkpointing job keeps it across requeues)
    run_started: float = 0.0
    saved: float = 0.0  # progress at the last checkpoint


class SlurmModel:
    """Jobs on 2 nodes × 8 GPUs, advanced by ``step``; the backend calls the cycle makes."""

    def __init__(self, dice: random.Random) -> None:
        self.dice = dice
        self.now = 10_000.0
        self.nodes = [Node("gpu01", 8, "h100"), Node("gpu02", 8, "h100")]
        self.jobs: dict[int, Job] = {}
        self.hidden: dict[int, Hidden] = {}
        self.next_id = 1
        self.signals: list[tuple[int, float]] = []
        self.requeues: list[int] = []
        self.finished_at: dict[int, float] = {}

    # -- the world -------------------------------------------------------------------------
    def arrive(self) -> None:
        d = self.dice
        kind = d.random()
        count = d.choice([1, 1, 1, 2, 8]) if kind > 0.1 else d.randrange(2, 6)
        array = self.next_id if kind <= 0.1 else None
        for _ in range(count if array else 1):
            jid = self.next_id
            self.next_id += 1
            opted = d.random() < 0.5
            gpus = d.choice([1, 2, 4, 8])
            comment = (
                d.choice(["dl:ckpt=1", "dl:ckpt=steps"]) if opted else d.choice(["", "my run"])
            )
            self.jobs[jid] = Job(
                jid,
                user=d.choice(["ann", "bob"]),
                account=d.choice(["a", "b"]),
                num_gpus=gpus,
                submit_time=self.now,
                time_limit=3600.0,
                comment=comment,
                requeue=opted or d.random() < 0.5,
                array_job_id=array,
            )
            self.hidden[jid] = Hidden(
                duration=d.choice([20.0, 60.0, 300.0, 1200.0]), opted_in=opted
            )

    def used(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for j in self.jobs.values():
            if j.state.active:
                used[j.nodes[0]] = used.get(j.nodes[0], 0) + j.num_gpus
        return used

    def step(self, dt: float) -> None:
        self.now += dt
        for jid, j in list(self.jobs.items()):
            h = self.hidden[jid]
            if (
                j.state is JobState.RUNNING
                and h.progress + (self.now - h.run_started) >= h.duration
            ):
                j.state = JobState.COMPLETED
                self.finished_at[jid] = self.now
            elif j.state.finished and self.now - self.finished_at.get(jid, self.now) > 30:
                del self.jobs[jid]  # MinJobAge: finished jobs leave squeue after a while
        if self.dice.random() < 0.6:
            self.arrive()
        for j in self.jobs.values():  # a user clears Requeue on a running job of theirs
            if j.state is JobState.RUNNING and j.requeue and self.dice.random() < 0.03:
                j.requeue = False
        used = self.used()
        for j in sorted(
            (j for j in self.jobs.values() if j.pending), key=lambda j: (-j.site_factor, j.job_id)
        ):
            for n in self.nodes:
                if n.gpus - used.get(n.name, 0) >= j.num_gpus:
                    j.state, j.start_time, j.nodes = JobState.RUNNING, self.now, (n.name,)
                    self.hidden[j.job_id].run_started = self.now
                    used[n.name] = used.get(n.name, 0) + j.num_gpus
                    break

    # -- the backend -------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        used = self.used()
        nodes = [dataclasses.replace(n, gpus_used=used.get(n.name, 0)) for n in self.nodes]
        return ClusterSnapshot(
            taken_at=self.now,
            jobs=[dataclasses.replace(j) for j in self.jobs.values()],
            nodes=nodes,
        )

    def set_site_factor(self, values: dict[int, int]) -> SiteFactorResult:
        missing = tuple(
            sorted(j for j in values if j not in self.jobs or self.jobs[j].state.finished)
        )
        for jid, v in values.items():
            if jid not in missing:
                self.jobs[jid].site_factor = v
        return SiteFactorResult(len(values) - len(missing), len(set(values.values())), missing)

    def _live(self, job_id: int) -> Job:
        j = self.jobs.get(job_id)
        if j is None or j.state.finished:
            raise JobNotFoundError(f"Invalid job id specified for job {job_id}")
        return j

    def _signal(self, job_id: int) -> None:
        j = self._live(job_id)
        self.signals.append((job_id, self.now))
        h = self.hidden[job_id]
        if h.opted_in:  # the handler checkpoints
            h.saved = h.progress + (self.now - h.run_started)
        else:  # an untrapped USR2 kills the batch shell
            j.state = JobState.FAILED
            self.finished_at[job_id] = self.now

    def job_end(self, job_id: int) -> JobEnd:
        j = self.jobs.get(job_id)
        if j is None:
            raise JobNotFoundError(f"scontrol show job: Invalid job id specified for job {job_id}")
        died = j.state is JobState.FAILED
        return JobEnd(
            j.state,
            exit_signal=12 if died else 0,
            end_time=self.finished_at.get(job_id),
            restarts=j.restarts,
        )

    def signal_batch(self, job_id: int, signal: str) -> None:
        self._signal(job_id)

    def signal_steps(self, job_id: int, signal: str) -> None:
        self._signal(job_id)

    def requeue(self, job_id: int) -> None:
        j = self.jobs.get(job_id)  # a finished batch job may be requeued while Slurm still has it
        if j is None or j.state is JobState.CANCELLED:
            raise JobNotFoundError(f"Invalid job id specified for job {job_id}")
        if not j.requeue:
            raise SlurmError(
                f"scontrol requeue: Requested operation is presently disabled for job {job_id}"
            )
        if j.state is JobState.PENDING:
            raise JobPendingError(f"scontrol requeue: Job is pending execution for job {job_id}")
        self.requeues.append(job_id)
        self.finished_at.pop(job_id, None)
        h = self.hidden[job_id]
        h.progress = h.saved if h.opted_in else 0.0
        j.state, j.nodes, j.start_time, j.restarts = JobState.PENDING, (), None, j.restarts + 1


def run_seed(seed: int, rate: float, tmp: Path) -> int:
    """Drive one seeded history; assert the invariants after every cycle; return cycles run."""
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    pc = config.preemption
    dice = random.Random(seed)
    cluster = SlurmModel(dice)
    backend = FaultyBackend(cluster, rate=rate, seed=seed + 1)
    db = f"sqlite:///{tmp / f'faults-{seed}.db'}"
    prio = Prioritizer(config, backend, Store(db))
    attained: dict[int, float] = {}
    for _ in range(CYCLES_PER_EXAMPLE):
        cluster.step(config.prioritizer.interval_seconds)
        store = Store(db)
        before = store.ledger_cycle()
        injected_before = len(backend.injected)
        try:
            prio.run_cycle()
        except Crash:
            prio = Prioritizer(
                config, backend, Store(db)
            )  # killed mid-cycle: a new daemon, same store
            continue
        except SlurmError:
            faults = backend.injected[injected_before:]
            assert faults and faults[0].call in READ_CALLS, (
                f"a cycle failed on a write fault (it must be local): {faults}"
            )
            continue
        # 1. Slurm could be read: the cycle was saved
        assert store.ledger_cycle() == before + 1
        # 2. attained service never decreases
        ledger = store.load_ledger()
        for jid, rec in ledger.jobs.items():
            assert rec.attained_gpu_s >= attained.get(jid, 0.0) - 1e-6, jid
            attained[jid] = rec.attained_gpu_s
        rows = store.preemptions()
        # 3. never two signals for one preemption
        for jid in {j for j, _ in cluster.signals}:
            sent = sum(1 for j, _ in cluster.signals if j == jid)
            assert sent <= sum(1 for r in rows if r.victim_job_id == jid), (jid, sent, rows)
        # 4. no row open past grace + timeout (+ one cycle)
        limit = pc.grace_seconds + pc.requeue_timeout_seconds + config.prioritizer.interval_seconds
        for r in rows:
            if r.state in PREEMPTION_OPEN_STATES:
                assert cluster.now - r.signalled_at <= limit, r
        # 5. only jobs that opted in are signalled or requeued
        for jid, _ in cluster.signals:
            assert cluster.hidden[jid].opted_in, f"job {jid} was signalled but never opted in"
        for jid in cluster.requeues:
            assert cluster.hidden[jid].opted_in, f"job {jid} was requeued but never opted in"
    return CYCLES_PER_EXAMPLE


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**31 - 1), rate=st.sampled_from([0.05, 0.2, 0.5]))
def test_invariants_hold_under_random_slurm_faults(tmp_path, seed, rate):
    assert run_seed(seed, rate, tmp_path) == CYCLES_PER_EXAMPLE


def test_the_model_preempts_at_all_without_faults(tmp_path):
    """Guard against a vacuous property: with no faults the histories do preempt and requeue."""
    signalled = requeued = 0
    for seed in range(4):
        config = load_config(ROOT / "site-configs" / "testbed.toml")
        cluster = SlurmModel(random.Random(seed))
        prio = Prioritizer(config, cluster, Store(f"sqlite:///{tmp_path / f'plain-{seed}.db'}"))
        for _ in range(CYCLES_PER_EXAMPLE):
            cluster.step(config.prioritizer.interval_seconds)
            prio.run_cycle()
        signalled += len(cluster.signals)
        requeued += len(cluster.requeues)
    assert signalled > 0 and requeued > 0


@pytest.mark.parametrize("kind", [k for k in FAULT_KINDS if k != "crash"])
def test_a_refused_requeue_closes_its_row_and_the_cycle_is_saved(tmp_path, kind):
    """Every fault kind on requeue: the row ends (or waits within its timeout), the store saves."""
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    cluster = SlurmModel(random.Random(1))
    cluster.nodes = [Node("gpu01", 8, "h100")]
    cluster.jobs[1] = Job(
        1,
        account="a",
        num_gpus=8,
        submit_time=cluster.now,
        time_limit=3600.0,
        comment="dl:ckpt=1",
        requeue=True,
    )
    cluster.hidden[1] = Hidden(duration=10**6, opted_in=True)
    cluster.arrive = lambda: None  # type: ignore[method-assign]
    cluster.step(0)
    backend = FaultyBackend(cluster, rules={"requeue": kind})
    store = Store(f"sqlite:///{tmp_path / 'one.db'}")
    prio = Prioritizer(config, backend, store)
    cluster.step(config.preemption.min_runtime_seconds + 1)
    cluster.jobs[2] = Job(2, account="b", num_gpus=8, submit_time=cluster.now, time_limit=600.0)
    cluster.hidden[2] = Hidden(duration=60.0, opted_in=False)
    for _ in range(12):
        prio.run_cycle()
        cluster.step(config.prioritizer.interval_seconds)
    rows = store.preemptions(victim=1)
    assert rows and store.ledger_cycle() == 12
    assert (
        rows[0].state
        in {
            "refuse": ("refused",),
            "timeout": ("requeueing", "requeued"),
            "vanish": ("finished",),
            "partial": ("refused",),
            "garbage": ("refused",),
        }[kind]
    ), rows[0].state
