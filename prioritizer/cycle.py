"""One prioritizer cycle: snapshot → ledger → scores → SiteFactor pushes → preemption → save.

The backend (``slurm_dl.slurm``'s protocol), the store and the planner are passed in; the cycle
reads no clock (``now`` is the snapshot's ``taken_at``) and never sleeps. With ``dry_run`` it
computes everything and changes nothing: no Slurm writes, no store writes.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import Counter
from itertools import repeat
from operator import attrgetter, is_, neg
from dataclasses import dataclass, field
from typing import Any

from slurm_dl.core.config import SiteConfig
from slurm_dl.core.errors import SlurmError, StoreError
from slurm_dl.core.explain import explain_job
from slurm_dl.core.fairness import entitled
from slurm_dl.core.ledger import Ledger, half_life_of
from slurm_dl.core.model import ClusterSnapshot, Job, JobClass, JobState
from slurm_dl.core.preemption import RESUME_CHECKPOINT, resume_kind, waits_only_for_gpus
from slurm_dl.core.rights import refused_for_rights
from slurm_dl.core.steering import plan_moves
from slurm_dl.core.policy import PolicyContext, get_policy
from slurm_dl.core.policy.base import PriorityPolicy, in_order_of, rank_scores
from slurm_dl.core.policy.admission import DeadlineAdmission, demotion_message, held_message
from slurm_dl.core.policy.deadline import DEMOTED_TAG, SOFT_FROM_TAG, admit_deadlines
from slurm_dl.core.sitefactor import SiteFactorScale, plan_pushes, site_factors
from slurm_dl.slurm.protocol import SlurmBackend
from slurm_dl.store import PREEMPTION_OPEN_STATES, CycleWrite, Store
from slurm_dl.store.energy import energy_segments

from . import preempt
from .explain_cache import ExplanationCache
from .power import PowerService
from .idle_watch import IdleWatcher
from .jobs import (
    STEPS_SET_ASIDE,
    CycleChanges,
    apply_ledger,
    apply_tags,
    class_demotions,
    reopen_returned,
    seed_unknown_running,
    steps_set_aside,
)
from .planning import plan_intents
from .steer import ShardSteering, SteerReport, Steering, gpu_type_entry, steer

log = logging.getLogger("slurm_dl.prioritizer")
_PENDING = JobState.PENDING
_JOB_ID, _SUBMIT_TIME = attrgetter("job_id"), attrgetter("submit_time")
_STATE, _JOB_CLASS = attrgetter("state"), attrgetter("job_class")

DECISION_RETENTION_S = 7 * 86400.0
PRUNE_EVERY_CYCLES = 100
SETTLE_MIN_S = 30.0
"""After a preemption closes, its waiting job gets this long to start before another is planned."""
KEEP_FINISHED_S = 600.0
"""How long an ended job's ledger record is kept: a victim requeued after it ended (or a job out
of one snapshot) comes back with its attained service."""


def _soon_eligible(job: Job, now: float) -> bool:
    """A pending job whose begin time comes within a minute (one just requeued waits
    ``cred_expire``): steered now, it starts on the right type when it may."""
    return (
        job.pending
        and job.state_reason == "BeginTime"
        and job.eligible_time is not None
        and job.eligible_time <= now + 60.0
    )


@dataclass(slots=True)
class CycleReport:
    cycle: int
    now: float
    dry_run: bool
    pending: int = 0
    running: int = 0
    pushed_jobs: int = 0
    push_calls: int = 0
    unchanged: int = 0
    deferred: int = 0
    signalled: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    planned: list[dict[str, Any]] = field(default_factory=list)
    pushes: dict[int, list[int]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    refused: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    jobs_by_class: dict[str, dict[str, int]] = field(default_factory=dict)  # state -> class -> jobs
    closed: list[tuple[int, str]] = field(
        default_factory=list
    )  # preemptions closed: (victim, state)
    lost_work: list[str] = field(
        default_factory=list
    )  # the account of each victim requeued before its checkpoint finished
    steered: dict[int, str] = field(default_factory=dict)  # waiting jobs moved to a GPU type
    slurm_s: float = (
        0.0  # wall seconds in the snapshot and the SiteFactor updates (slurmctld's pace)
    )
    updates_tried: int = 0  # changes asked of Slurm: SiteFactors, GPU-type moves, preemption steps
    updates_failed: int = 0  # ... of which Slurm refused or failed
    denied: dict[str, int] = field(default_factory=dict)
    """Changes Slurm refused for lack of rights, by action (site_factor, partition, features,
    preemption): the daemon's user lacks operator rights, or the filter does not trust it."""
    telemetry_ages: dict[str, float] | None = None
    """Per node, the age of its gpu-agent's newest sample (None: no telemetry configured)."""
    telemetry_stale_after_s: float = 0.0  # ... and how old one may be (core.idle.freshness)
    power: dict[str, Any] | None = None  # the power service's step, this cycle (see power.py)

    @property
    def outcome(self) -> str:
        """ok; degraded (some Slurm updates failed); failed (every update it tried failed)."""
        if self.updates_failed and self.updates_failed >= self.updates_tried:
            return "failed"
        return "degraded" if self.updates_failed else "ok"

    def deny(self, action: str, n: int = 1) -> None:
        self.denied[action] = self.denied.get(action, 0) + n

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__slots__}
        d["pushes"] = {str(v): ids for v, ids in self.pushes.items()}
        d["outcome"] = self.outcome
        return d

    def summary(self) -> str:
        mode = " (dry run)" if self.dry_run else ""
        return (
            f"cycle {self.cycle}{mode}: {self.pending} pending, {self.running} running; "
            f"SiteFactor {self.pushed_jobs} job(s) in {self.push_calls} call(s), {self.unchanged} unchanged"
            f"{f', {self.deferred} deferred to the next cycle' if self.deferred else ''}; "
            f"signalled {self.signalled or '-'}, requeued {self.requeued or '-'}"
            + (f", refused {[r['job'] for r in self.refused]}" if self.refused else "")
            + (
                f"; {len(self.errors)} Slurm call(s) failed, retried next cycle"
                if self.errors
                else ""
            )
            + ("; every Slurm update failed" if self.outcome == "failed" else "")
            + (
                f"; Slurm refused {sum(self.denied.values())} update(s) for lack of rights"
                if self.denied
                else ""
            )
            + f"; took {self.seconds.get('total', 0.0):.2f} s"
        )


class Prioritizer:
    """Holds the ledger between cycles; everything durable lives in the store."""

    def __init__(
        self,
        config: SiteConfig,
        backend: SlurmBackend,
        store: Store,
        *,
        dry_run: bool = False,
        planner=plan_intents,
    ) -> None:
        self.config = config
        self.backend = backend
        self.store = store
        self.dry_run = dry_run
        self.planner = planner
        self.policy = get_policy(config.policy.mix, config)
        self.scale = SiteFactorScale.from_config(config)
        self.ledger: Ledger | None = None
        self.known_site_factors: dict[int, int] | None = None
        self.cycle_no = 0
        self._deadline_notes: dict[
            int, str
        ] = {}  # job -> why its deadline is ignored (logged once)
        self._class_notes: dict[int, str] = {}  # job -> why its class was demoted (logged once)
        self._move_notes: dict[int, str] = {}  # job -> why Slurm refused its move (logged once)
        dc = config.policy.deadline
        self.admission = DeadlineAdmission(dc.admission_share) if dc.admission else None
        """Deadlines promised so far; kept in the ledger, so a restart neither breaks a promise
        nor decides a job's deadline twice."""
        self._admission_restored = False
        self.idle = (
            IdleWatcher(config.telemetry, site=config) if config.telemetry.exposition_dir else None
        )
        self.explain_cache = ExplanationCache()  # which explanations a cycle rebuilds
        self._ranked_ids: list[int] = []  # the last cycle's ranking (see _rank)
        self._changes = CycleChanges()  # the cycle's own changes to its jobs, undone by the next
        self.shard_steering = (
            ShardSteering(config) if any(g.shards_per_gpu for g in config.sharing.groups) else None
        )
        """GPU sharing: waiting shard jobs packed onto GPUs already shared."""
        self.steering = Steering(config) if len(config.gpu_types) > 1 else None
        """Several GPU types: charges at each type's speed, waiting jobs steered between types."""
        self.idle_site_factor = -self.scale.maximum
        self.power = (
            PowerService(config.power, backend, dry_run=dry_run) if config.power.enabled else None
        )
        """Node power saving: idle nodes powered down ahead of demand, up again before it."""
        self.push_limit: int | None = None
        """Fewer SiteFactor updates per cycle than configured while slurmctld answers slowly (set by the loop)."""
        """SiteFactor of a job deprioritized for idle GPUs: below every job the policy scores."""

    def _load(self) -> Ledger:
        if self.ledger is None:
            self.ledger = self.store.load_ledger()
            self.cycle_no = self.store.ledger_cycle()
        self.ledger.half_life_s = half_life_of(self.config)  # the site's setting, not saved
        return self.ledger

    def _steer(
        self,
        snap: ClusterSnapshot,
        jobs: list[Job],
        scores: dict[int, float],
        work: Ledger,
        report: "CycleReport",
        decisions: list,
    ) -> SteerReport:
        """Several GPU types: each waiting job that accepts several goes where it runs best.
        GPU sharing: each waiting shard job to the node whose shared GPUs it fills."""
        if self.shard_steering is not None:
            now = snap.taken_at
            order = sorted(
                (j for j in jobs if j.shards > 0 and j.pending and waits_only_for_gpus(j, now)),
                key=lambda j: (-scores[j.job_id], j.submit_time, j.job_id),
            )
            changed, errors = self.shard_steering.step(
                self.backend, snap, order, dry_run=self.dry_run
            )
            for jid, choice in changed.items():
                decisions.append(
                    (jid, "shard_node", None, f"steered to {choice.node}: {choice.why}")
                )
            report.errors.extend(errors)
        if self.steering is None:
            return SteerReport()
        self.steering.learn(work.runs)
        now = snap.taken_at
        order = sorted(
            (
                j
                for j in jobs
                if j.num_gpus > 0
                and not j.shards
                and (waits_only_for_gpus(j, now) or _soon_eligible(j, now))
            ),
            key=lambda j: (-scores[j.job_id], j.submit_time, j.job_id),
        )
        st = steer(
            self.steering,
            self.backend,
            snap,
            order,
            dry_run=self.dry_run,
            running=[j for j in jobs if j.running],
        )
        for jid, gpu_type in st.moved.items():
            decisions.append(
                (jid, "gpu_type", None, f"steered to {gpu_type}: {st.choices[jid].why}")
            )
        report.steered = dict(st.moved)
        report.errors.extend(st.errors)
        report.updates_tried += st.tried
        report.updates_failed += len(st.errors)
        for jid, (action, why) in st.refused.items():
            report.deny(action)
            if self._move_notes.get(jid) != why:  # recorded once per job and reason
                self._move_notes[jid] = why
                log.warning("job %d: %s", jid, why)
                decisions.append((jid, "gpu_type", None, why))
        for jid in [j for j in self._move_notes if j not in st.refused]:
            del self._move_notes[jid]
        return st

    def _moves(self, snap: ClusterSnapshot, jobs: list[Job], rows, excluded, busy, ctx) -> list:
        """Opted-in running jobs to move to a faster GPU type that frees with nobody waiting
        (under fair share, also where jobs wait, for jobs of accounts below their share or
        asking no more than it)."""
        pc = self.config.preemption
        if self.steering is None or not pc.move_min_speedup:
            return []
        now = snap.taken_at
        moves_of: dict[int, int] = {}  # each move goes to a faster type: at most one per type
        for r in rows:
            if r.victim_job_id == r.need_job_id:
                moves_of[r.victim_job_id] = moves_of.get(r.victim_job_id, 0) + 1

        def can_move(j: Job) -> bool:
            ran = now - j.start_time if j.start_time is not None else 0.0
            return (
                resume_kind(j, self.config)[0] == RESUME_CHECKPOINT
                and ran >= pc.min_runtime_seconds
                and moves_of.get(j.job_id, 0) < len(j.accepted_types) - 1
                and j.job_id not in busy
                and (j.job_id, j.restarts) not in excluded
                and max(j.restarts, j.preemptions) < pc.max_restarts
            )

        waiting = [
            j for j in jobs if waits_only_for_gpus(j, now) and j.num_gpus > 0 and not j.shards
        ]
        running = [j for j in jobs if j.state is JobState.RUNNING]
        behind: set[str] = set()
        standings_of = getattr(self.policy, "standings_of", None)
        if getattr(self.policy, "leases", False) and standings_of is not None:
            behind = {a for a, s in standings_of(jobs, ctx).items() if entitled(s)}
        moves = plan_moves(
            running,
            waiting,
            snap.nodes,
            self.steering.model,
            min_speedup=pc.move_min_speedup,
            can_move=can_move,
            behind=behind,
            restart_s=pc.restart_delay_seconds,
        )
        return [
            preempt.PreemptionIntent(
                m.job_id, (m.job_id,), f"move from {m.from_type} to {m.to_type}: {m.why}"
            )
            for m in moves
        ]

    def _said_before(self, job_id: int, kind: str, why: str) -> bool:
        """Whether the store's latest ``kind`` decision for the job already says ``why``."""
        try:
            said = [d.reason for d in self.store.decisions(job_id) if d.kind == kind]
        except StoreError:
            return False
        return bool(said) and said[-1] == why

    def run_cycle(self) -> CycleReport:
        t0 = time.perf_counter()
        self._changes.undo()  # the last cycle's own changes to its jobs (see CycleChanges)
        ledger = self._load()
        waited = getattr(
            self.backend, "call_s", None
        )  # a test double may not count its waits on Slurm
        t_call = time.perf_counter()
        snap = self.backend.snapshot()
        t_snap = time.perf_counter()
        slurm_s = t_snap - t_call
        now = snap.taken_at
        jobs = [j for j in snap.jobs if j.state is _PENDING or j.state.active]
        work = self._account(snap, jobs, ledger)
        demoted = class_demotions(jobs, self.config)
        for j in jobs if demoted else ():
            if j.job_id in demoted:
                self._changes.set(j, "job_class", JobClass.TRAIN)
        ignored_deadlines = self._admit(jobs, now, snap.total_gpus(), ledger)
        ctx = PolicyContext(now=now, ledger=work, config=self.config, total_gpus=snap.total_gpus())
        ranked, scores = self._rank(jobs, ctx)
        t_score = time.perf_counter()

        pending = [j for j in jobs if j.state is _PENDING]
        report = CycleReport(
            cycle=self.cycle_no + 1,
            now=now,
            dry_run=self.dry_run,
            pending=len(pending),
            running=len(jobs) - len(pending),
        )
        decisions: list[tuple[int, str, int | None, str]] = self._notes(demoted, ignored_deadlines)
        push = self._push(jobs, pending, scores, report, decisions)
        if isinstance(waited, float):  # only the waits on Slurm, not the parsing of what it said
            slurm_s = self.backend.call_s - waited
        else:
            slurm_s += push.slurm_s
        report.slurm_s = round(slurm_s, 4)
        steered = self._steer(snap, jobs, scores, work, report, decisions)
        if self.power is not None and self.power.due(now):
            report.power = self.power.step(snap.nodes, pending, now).summary()
        t_push = time.perf_counter()

        prep = self._preempt(snap, jobs, scores, ctx, ledger, push.idle_low, report)
        waiting_class = zip(
            map(is_, map(_STATE, jobs), repeat(_PENDING)), map(_JOB_CLASS, jobs)
        )  # C-level
        for (state, job_class), n in Counter(waiting_class).items():
            by_class = report.jobs_by_class.setdefault("pending" if state else "running", {})
            by_class[job_class.value] = by_class.get(job_class.value, 0) + n
        t_pre = time.perf_counter()

        explanations, idle_changed = self._explain(
            snap, jobs, ranked, scores, ctx, push, prep, steered, decisions
        )
        t_explain = time.perf_counter()
        if self.idle is not None and self.idle.freshness is not None:
            report.telemetry_ages = dict(self.idle.freshness.ages)
            report.telemetry_stale_after_s = self.idle.freshness.limit
        if not self.dry_run:
            self._save(now, jobs, ledger, push, decisions, explanations, idle_changed)
        t_end = time.perf_counter()
        report.seconds = {
            "snapshot": round(t_snap - t0, 4),
            "score": round(t_score - t_snap, 4),
            "push": round(t_push - t_score, 4),
            "preempt": round(t_pre - t_push, 4),
            "save": round(t_end - t_pre, 4),
            "total": round(t_end - t0, 4),
            "explain": round(t_explain - t_pre, 4),
            "store": round(t_end - t_explain, 4),  # the parts of "save"
        }
        return report

    def _rank(
        self, jobs: list[Job], ctx: PolicyContext
    ) -> tuple[list[Job] | None, dict[int, float]]:
        """The policy's scores, and its order when the scores are its ranks (the inherited
        ``scores``): that order is the ranking explanations show, not sorted again."""
        if type(self.policy).scores is PriorityPolicy.scores:
            # handed over as the last cycle ranked them: the same order, sorted in fewer steps
            ranked = self.policy.order(in_order_of(jobs, self._ranked_ids), ctx)
            self._ranked_ids = list(map(_JOB_ID, ranked))
            return ranked, rank_scores(ranked)
        return None, self.policy.scores(jobs, ctx)

    def _account(self, snap: ClusterSnapshot, jobs: list[Job], ledger: Ledger) -> Ledger:
        """Charge the snapshot's service to the ledger (to a copy in a dry run), and give each job
        what the policies read: its tag's class, checkpointing and deadline, its service and
        waiting time from the ledger. Returns the ledger the cycle works with."""
        now = snap.taken_at
        speeds = self.steering.speeds if self.steering is not None else None
        for j in jobs:  # first: the ledger counts a waiting job's GPUs as its tag does
            apply_tags(j)
        if not self.dry_run:
            reopen_returned(jobs, ledger)
        known = ledger.jobs
        for j in [j for j in jobs if j.job_id not in known]:
            seed_unknown_running(j, ledger, now)
        if not self.dry_run:
            ledger.observe(snap.jobs, now, speeds)
            ledger.forget_finished(now, KEEP_FINISHED_S)
            work = ledger
        else:
            work = Ledger.from_dict(ledger.to_dict(compact=True), ledger.half_life_s)
            work.observe(snap.jobs, now, speeds)
        for j, rec in zip(jobs, map(work.jobs.get, map(_JOB_ID, jobs))):
            apply_ledger(j, rec)
        return work

    def _admit(
        self, jobs: list[Job], now: float, total_gpus: int, ledger: Ledger
    ) -> dict[int, str]:
        """Deadlines the prioritizer honours (quota, horizon; admission when configured): the
        others are dropped from their jobs (until the next cycle: CycleChanges). Returns
        ``{job_id: why}`` for each one dropped."""
        ignored_deadlines = admit_deadlines(jobs, self.config)
        for (
            j
        ) in jobs:  # Slurm's own deadline and the filter's steps (22.05 hides --deadline from it)
            if j.deadline is not None and j.job_id not in ignored_deadlines and steps_set_aside(j):
                ignored_deadlines[j.job_id] = STEPS_SET_ASIDE
        change = self._changes.set
        for j in jobs if ignored_deadlines else ():
            if j.job_id in ignored_deadlines:
                change(j, "deadline", None)
                change(j, "soft_deadlines", ())
        if self.admission is None:
            return ignored_deadlines
        # a deadline the cluster cannot keep: best effort, said once
        if not self._admission_restored:  # promises made before a restart are kept
            self._admission_restored = True
            try:
                self.admission.restore(ledger.admission)
            except ValueError as e:
                log.warning("deadline admission starts afresh: %s", e)
        admission = self.admission if not self.dry_run else copy.deepcopy(self.admission)
        for jid, why in admission.step(jobs, now, total_gpus).items():
            ignored_deadlines[jid] = demotion_message(why)
        held = admission.held
        if not self.dry_run:
            saved = admission.to_dict()
            if saved != ledger.admission:
                ledger.admission = saved
                ledger.revision += 1
        for j in jobs:
            if j.job_id in held:  # owes nothing and is owed nothing until it can start
                ignored_deadlines[j.job_id] = held_message(held[j.job_id])
                change(j, "deadline", None)
                change(j, "soft_deadlines", ())
            elif j.job_id in admission.demoted:
                change(j, "tags", {**j.tags, DEMOTED_TAG: admission.demoted[j.job_id]})
            elif j.deadline is None and j.soft_deadlines and j.job_id in admission.admitted:
                # the soft step promised: boosted for it only (steps before it given up)
                change(j, "tags", {**j.tags, SOFT_FROM_TAG: repr(admission.admitted[j.job_id])})
        return ignored_deadlines

    def _notes(self, demoted: dict[int, str], ignored_deadlines: dict[int, str]) -> list:
        """Decisions for class demotions and ignored deadlines, each recorded once per job and reason."""
        decisions: list[tuple[int, str, int | None, str]] = []
        for j, why in demoted.items():
            if self._class_notes.get(j) != why:
                first = j not in self._class_notes
                self._class_notes[j] = why
                if first and self._said_before(j, "class", why):  # before a restart
                    continue
                log.info("job %d: %s", j, why)
                decisions.append((j, "class", None, why))
        for j in [j for j in self._class_notes if j not in demoted]:
            del self._class_notes[j]
        for j, why in ignored_deadlines.items():
            if self._deadline_notes.get(j) != why:
                first = j not in self._deadline_notes
                self._deadline_notes[j] = why
                if first and self._said_before(j, "deadline", why):  # before a restart
                    continue
                log.info("job %d: %s", j, why)
                decisions.append((j, "deadline", None, why))
        for j in [j for j in self._deadline_notes if j not in ignored_deadlines]:
            del self._deadline_notes[j]
        return decisions

    def _push(
        self,
        jobs: list[Job],
        pending: list[Job],
        scores: dict[int, float],
        report: CycleReport,
        decisions: list,
    ) -> "_Pushed":
        """Map waiting jobs' scores to SiteFactor and update those that changed (bounded per cycle)."""
        pending_ids = list(map(_JOB_ID, pending))
        pending_scores = dict(zip(pending_ids, map(scores.__getitem__, pending_ids)))
        desired = site_factors(pending_scores, self.scale)
        if self.known_site_factors is None:  # read once; kept in step with every save after that
            self.known_site_factors = self.store.site_factors()
        stored = self.known_site_factors
        current = {j.job_id: (j.site_factor or stored.get(j.job_id, 0)) for j in pending}
        # Slurm's SiteFactor that the store does not hold (a kill -9 after the update, before the
        # save): recorded as Slurm has it, so the rows stay what a reset must undo
        adopted = {
            j.job_id: sf for j in pending if (sf := j.site_factor) and stored.get(j.job_id) != sf
        }
        idle_low: set[int] = set()
        if (
            self.idle is not None
        ):  # idle jobs deprioritized by the telemetry step: SiteFactor at the bottom
            if not self.idle.loaded:
                ids = [j.job_id for j in jobs]
                self.idle.load(
                    self.store.utilisation_summaries(ids), energy_segments(self.store, ids)
                )
                self.idle.load_runs(self.store.decisions_of_kind("gpu-use"))
            idle_low = self.idle.deprioritized(j.job_id for j in jobs)
            for jid in [j.job_id for j in jobs if j.job_id in idle_low] if idle_low else ():
                desired[jid] = self.idle_site_factor
                current.setdefault(jid, stored.get(jid, 0))
        limit = self.config.prioritizer.max_pushes_per_cycle or None
        if self.push_limit is not None:
            limit = min(limit, self.push_limit) if limit is not None else self.push_limit
        pushes = plan_pushes(desired, current, limit)
        report.pushes, report.unchanged, report.deferred = (
            pushes.by_value,
            pushes.unchanged,
            pushes.deferred,
        )
        pushed: dict[int, int] = {}
        slurm_s = 0.0
        if pushes.by_value and not self.dry_run:
            wanted = pushes.assignments()
            report.updates_tried += len(wanted)
            t_call = time.perf_counter()
            try:
                result = self.backend.set_site_factor(
                    wanted
                )  # one Slurm call per value (backend groups)
            except SlurmError as e:  # nothing known to be pushed; the next cycle tries again
                log.warning("SiteFactor update failed, retried next cycle: %s", e)
                report.errors.append(f"SiteFactor update: {e}")
                report.updates_failed += len(wanted)
                if refused_for_rights(f"{e} {e.stderr}"):
                    report.deny("site_factor", len(wanted))
            else:
                missing = set(getattr(result, "missing", ()))
                pushed = {j: v for j, v in wanted.items() if j not in missing}
                report.push_calls = int(getattr(result, "calls", len(pushes.by_value)))
            finally:
                slurm_s = time.perf_counter() - t_call
        for j, v in pushed.items():
            if j in idle_low:
                decisions.append(
                    (
                        j,
                        "priority",
                        v,
                        f"idle GPUs: SiteFactor {v} (bottom; was {current.get(j, 0)})",
                    )
                )
                continue
            decisions.append(
                (
                    j,
                    "priority",
                    v,
                    f"score {pending_scores[j]:.4f} -> SiteFactor {v} "
                    f"(was {current.get(j, 0)}) under {self.policy.name}",
                )
            )
        report.pushed_jobs = len(pushed) if not self.dry_run else pushes.jobs
        return _Pushed(pushed, current, idle_low, slurm_s, adopted)

    def _preempt(
        self,
        snap: ClusterSnapshot,
        jobs: list[Job],
        scores: dict[int, float],
        ctx: PolicyContext,
        ledger: Ledger,
        idle_low: set[int],
        report: CycleReport,
    ) -> preempt.PreemptionReport:
        """Advance open preemptions and start those the planner finds worth it (when enabled)."""
        prep = preempt.PreemptionReport()
        pc = self.config.preemption
        now = snap.taken_at
        learnt = {
            j.job_id: rec.checkpoint_s
            for j in snap.jobs
            if j.running
            and (rec := ledger.jobs.get(j.job_id)) is not None
            and rec.checkpoint_s is not None
        }
        if pc.enabled:
            try:
                preempt.advance_open(
                    self.store,
                    self.backend,
                    snap,
                    pc,
                    prep,
                    dry_run=self.dry_run,
                    checkpoint_s=learnt,
                )
                rows = self.store.preemptions()
                settle = max(SETTLE_MIN_S, 3 * self.config.prioritizer.interval_seconds)
                busy = frozenset(
                    r.need_job_id
                    for r in rows
                    if r.state in PREEMPTION_OPEN_STATES or now - r.updated_at < settle
                )
                extra = {"prefer_victims": frozenset(idle_low)} if idle_low else {}
                if getattr(self.policy, "leases", False):  # fair share: the shared lease decision
                    extra["policy"] = self.policy
                    extra["in_flight"] = frozenset(
                        r.victim_job_id for r in rows if r.state in PREEMPTION_OPEN_STATES
                    )
                    if self.steering is not None:  # victims on the type a job runs fastest on
                        extra["speeds"] = self.steering.model
                excluded = preempt.excluded_runs(
                    rows
                )  # refused, or signalled/requeued in their current run
                intents = self.planner(
                    snap, jobs, scores, self.config, ctx, busy_needs=busy, refused=excluded, **extra
                )
                intents += self._moves(snap, jobs, rows, excluded, busy, ctx)
                preempt.start(
                    self.store,
                    self.backend,
                    snap,
                    intents,
                    self.config,
                    prep,
                    dry_run=self.dry_run,
                    excluded=excluded,
                    checkpoint_s=learnt,
                )
            except (
                SlurmError
            ) as e:  # each call's refusals are handled in place; this is the safety net
                log.warning("preemption step stopped this cycle: %s", e)
                report.errors.append(f"preemption: {e}")
            if not self.dry_run:
                for v in [*prep.signalled, *prep.requeued_unsignalled]:
                    rec = ledger.jobs.get(v)
                    if (
                        rec is not None
                    ):  # a preemption costs its victim a restart whichever way it goes
                        rec.preemptions += 1
                        if v in prep.signalled:
                            rec.last_checkpoint_signal = now
                        ledger.revision += 1
                report.lost_work = preempt.learn_checkpoints(ledger, prep)
        report.signalled, report.requeued = prep.signalled, prep.requeued
        report.refused = [{"job": v, "why": why} for v, why in prep.refused]
        denied = sum(1 for _, why in prep.refused if refused_for_rights(why))
        report.updates_tried += len(prep.signalled) + len(prep.requeued) + len(prep.refused)
        report.updates_failed += len(prep.refused)
        if denied:
            report.deny("preemption", denied)
        report.planned = [
            {"need": i.need, "victims": list(i.victims), "reason": i.reason} for i in prep.planned
        ]
        report.closed = list(prep.closed)
        return prep

    def _explain(
        self,
        snap: ClusterSnapshot,
        jobs: list[Job],
        ranked: list[Job] | None,
        scores: dict[int, float],
        ctx: PolicyContext,
        push: "_Pushed",
        prep: preempt.PreemptionReport,
        steered: SteerReport,
        decisions: list,
    ):
        """The cycle's explanations (see ``explain_cache``) and the GPU telemetry step's changes.
        ``ranked``: the jobs highest score first when the policy's order gave the scores."""
        now = snap.taken_at
        free = sum(n.gpus_free for n in snap.nodes)
        victims_of: dict[int, list[int]] = {}
        for i in prep.planned:
            victims_of.setdefault(i.need, []).extend(i.victims)
        # ranked: highest score first, then submission, then job id (a C-level key per job)
        order = (
            ranked
            if ranked is not None
            else [
                jobs[t[3]]
                for t in sorted(
                    zip(
                        map(neg, map(scores.__getitem__, map(_JOB_ID, jobs))),
                        map(_SUBMIT_TIME, jobs),
                        map(_JOB_ID, jobs),
                        range(len(jobs)),
                    )
                )
            ]
        )
        idle_changed, gpu_notes = {}, {}
        if (
            self.idle is not None
        ):  # GPU telemetry: utilisation in the explanations, idle-allocation policy
            step = self.idle.step(jobs, now, self.backend, dry_run=self.dry_run)
            gpu_notes = dict(step.entries)
            for jid in push.idle_low:
                if jid not in gpu_notes:  # e.g. requeued, pending at the bottom
                    gpu_notes[jid] = self.idle.summaries[jid].explained()
            decisions.extend(step.rows)
            idle_changed = step.changed
        cache = self.explain_cache
        noted = cache.noted
        held = (
            push.current if not push.pushed else {**push.current, **push.pushed}
        )  # waiting jobs' SiteFactor now

        def build(j, rank):
            e = explain_job(
                j,
                ctx,
                self.policy,
                score=scores[j.job_id],
                site_factor=held.get(j.job_id) if j.state is _PENDING else None,
                rank=rank,
                ranked=len(order),
            )
            if j.job_id in gpu_notes:
                e["gpu_utilisation"] = gpu_notes[j.job_id]
            if self.steering is not None and j.accepted_types:
                e["gpu_types"] = gpu_type_entry(
                    j,
                    self.steering.model,
                    steered.choices.get(j.job_id),
                    steered.refused.get(j.job_id, (None, None))[1],
                )
            return e

        explanations = cache.step(
            order,
            ctx,
            scores,
            held,
            free,
            victims_of,
            self.cycle_no + 1,
            build,
            always=set(gpu_notes) | noted | set(steered.choices),
        )
        return explanations, idle_changed

    def _save(
        self,
        now: float,
        jobs: list[Job],
        ledger: Ledger,
        push: "_Pushed",
        decisions: list,
        explanations,
        idle_changed,
    ) -> None:
        """Write the cycle in one transaction; forget SiteFactors of jobs that left; prune now and then."""
        self.cycle_no += 1
        stored = self.known_site_factors
        live = set(map(_JOB_ID, jobs))
        gone = [j for j in stored if j not in live]
        try:
            self.store.save_cycle(
                CycleWrite(
                    now=now,
                    cycle=self.cycle_no,
                    ledger=ledger,
                    pushed={**push.adopted, **push.pushed},
                    decisions=decisions,
                    explanation_parts=explanations,
                    forget_jobs=gone,
                    utilisation=idle_changed,
                    energy=list(self.idle.unsaved.values()) if self.idle is not None else [],
                )
            )
        except StoreError:
            self.explain_cache = (
                ExplanationCache()
            )  # nothing was written: the next cycle writes all
            raise
        if self.idle is not None:
            self.idle.saved()
        stored.update(push.adopted)
        stored.update(push.pushed)
        for j in gone:
            stored.pop(j, None)
        if self.cycle_no % PRUNE_EVERY_CYCLES == 0:
            self.store.prune(now - DECISION_RETENTION_S)


@dataclass(slots=True)
class _Pushed:
    """What the SiteFactor step did: updates Slurm took, waiting jobs' SiteFactor before them,
    jobs held at the bottom for idle GPUs, seconds waiting on Slurm."""

    pushed: dict[int, int]
    current: dict[int, int]
    idle_low: set[int]
    slurm_s: float
    adopted: dict[
        int, int
    ]  # Slurm's SiteFactor of jobs whose stored row is stale (recorded with the cycle)
