"""The prioritizer's GPU-telemetry step: keep a window of the agents' samples, fold them into each
job's stored utilisation summary, decide idle allocations (slurm_dl.core.idle.decide) and act on them.

The summaries live in the store (saved with the cycle), so a restarted daemon carries each job's
idle clock, its warning and the action taken: it neither resets the clock nor warns twice.

Actions, each once per idle spell and only when enforced (not ``dry_run``, not ``report``):
``warn`` — a log line and/or a ``[slurm-dl: …]`` note appended to the job's comment
(``[telemetry] warn_via``); ``deprioritize`` — the job is marked so the cycle holds its SiteFactor
at the bottom and the preemption planner takes it first (it is requeued by the normal
signal → checkpoint → requeue path, never cancelled); ``cancel`` — the job is cancelled if it
opted in to preemption (it can resume), and deprioritized otherwise: slurm-dl never cancels a
job that did not opt in. An action
never comes before a warning: a job that reaches it unwarned is warned this cycle, acted on next.
A job whose GPUs are used again starts over (``ok``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.energy import EnergySegment, SegmentKey, merge, segments_of
from slurm_dl.core.errors import SlurmError
from slurm_dl.core.idle.decide import (
    IdleDecision,
    Verdict,
    carried_idle_since,
    decide,
    horizon_minutes,
    merge_window,
    on_job_nodes,
    utilisation_entry,
)
from slurm_dl.core.idle.freshness import (
    Freshness,
    age_words,
    freshness,
    job_sampled_at,
    stale_after_seconds,
)
from slurm_dl.core.idle.notice import action_note, comment_with_note, warning_note
from slurm_dl.core.model import Job
from slurm_dl.core.share_hint import KIND as GPU_USE, RunUse, share_hint
from slurm_dl.telemetry.attribution import summarize
from slurm_dl.telemetry.reader import read_exposition_dir
from slurm_dl.telemetry.samples import JobGpuSample
from slurm_dl.telemetry.summary import JobUtilisationSummary, fold_samples

log = logging.getLogger("slurm_dl.prioritizer")
RUNS_KEPT, NAMES_KEPT = 100, 20_000  # share hints: runs per (user, name), names remembered

Decision = tuple[int, str, int | None, str]


@dataclass(slots=True)
class IdleStep:
    """One cycle's telemetry results: explanation entries, decision rows, summaries to save."""

    entries: dict[int, dict] = field(default_factory=dict)
    rows: list[Decision] = field(default_factory=list)
    changed: dict[int, JobUtilisationSummary] = field(default_factory=dict)


class IdleWatcher:
    def __init__(
        self,
        cfg: TelemetryConfig,
        read: Callable[[], list[JobGpuSample]] | None = None,
        site: Any = None,
    ) -> None:
        self.cfg = cfg
        self.site = site  # the SiteConfig: which jobs opted in to preemption
        self.read = read or (lambda: read_exposition_dir(cfg.exposition_dir or "", cfg.agent_user))
        self.window: list[JobGpuSample] = []
        self.summaries: dict[int, JobUtilisationSummary] = {}
        self.loaded = False
        self.runs: OrderedDict[tuple[str, str], list[RunUse]] = OrderedDict()
        """Ended jobs' GPU use per (user, job name), newest names last (the store's gpu-use rows):
        bounded, the last RUNS_KEPT runs of each of the last NAMES_KEPT names."""
        self.running: dict[int, tuple[Job, bool]] = {}  # running job -> (job, on shards)
        self.hinted: set[int] = set()  # jobs whose comment has the share hint
        self._written: dict[int, str] = {}  # comments this step wrote (job -> text)
        self.freshness: Freshness | None = None  # the last read's sample ages (metrics)
        self._stale_said: set[str] = set()  # nodes logged as stale (once until fresh again)
        self._blind_said = False  # "no fresh samples" logged (once until fresh again)
        self.energy: dict[SegmentKey, EnergySegment] = {}  # live jobs' energy sums (core.energy)
        self.unsaved: dict[SegmentKey, EnergySegment] = {}  # ... grown since the last save

    def load_runs(self, rows: Iterable[Any]) -> None:
        """Ended jobs' GPU use, from the store's ``gpu-use`` decision rows (once, at start)."""
        self.runs = OrderedDict()
        for run in (RunUse.from_reason(row.reason) for row in rows):
            if run is not None:
                self._remember(run)

    def _remember(self, run: RunUse) -> None:
        key = (run.user, run.name)
        kept = self.runs.pop(key, [])
        kept.append(run)
        self.runs[key] = kept[-RUNS_KEPT:]
        while len(self.runs) > NAMES_KEPT:
            self.runs.popitem(last=False)

    def load(
        self,
        summaries: dict[int, JobUtilisationSummary],
        energy: Iterable[EnergySegment] = (),
    ) -> None:
        """The stored summaries and energy segments of the jobs alive now (once, at start)."""
        self.summaries = dict(summaries)
        self.energy = {seg.key: seg for seg in energy}
        self.loaded = True

    def saved(self) -> None:
        """The cycle's write (with :attr:`unsaved`) committed."""
        self.unsaved = {}

    def _count_energy(self, mine: list[JobGpuSample], running: dict[int, Job]) -> None:
        """Fold the window's energy sums into the known segments; what grew is to be saved.
        The window is re-read every cycle: a segment counts only its largest sum, once."""
        owners = {jid: (j.user, j.account) for jid, j in running.items()}
        for seg in merge(self.energy, segments_of(mine, owners)):
            self.unsaved[seg.key] = seg

    def deprioritized(self, live: Iterable[int]) -> set[int]:
        """Live jobs held at the bottom: deprioritized and not busy again since."""
        return {
            j
            for j in live
            if (s := self.summaries.get(j)) is not None
            and s.verdict == Verdict.DEPRIORITIZE.value
            and s.action == Verdict.DEPRIORITIZE.value
        }

    def step(self, jobs: Iterable[Job], now: float, backend: Any, *, dry_run: bool) -> IdleStep:
        """Per running job: its utilisation entry, the decision rows to store and its updated summary."""
        jobs = list(jobs)
        self._written = {}
        running = {j.job_id: j for j in jobs if j.running}
        new = self.read()
        self._note_freshness(freshness(new, now, self.cfg))
        self.window = merge_window(self.window, new, now - horizon_minutes(self.cfg) * 60.0)
        mine = on_job_nodes(self.window, running)  # each job's samples from its own nodes only
        sampled_at = job_sampled_at(mine)
        self._count_energy(mine, running)
        limit = stale_after_seconds(self.cfg)
        carried = carried_idle_since(
            self.summaries, mine, self.cfg
        )  # before this window is folded in
        decisions = {
            d.job_id: d for d in decide(mine, running, self.cfg, carried=carried, site=self.site)
        }
        out = IdleStep()
        by_job: dict[int, list[JobGpuSample]] = {}
        for s in mine:
            by_job.setdefault(s.job_id, []).append(s)
        for jid, util in summarize(mine).items():
            summary = self.summaries.get(jid) or JobUtilisationSummary(jid)
            before = _state(summary)
            fold_samples(summary, by_job[jid], self.cfg.idle_util_percent)
            d = decisions.get(jid)
            if d is not None:
                self._advance(summary, d, running[jid], backend, now, dry_run, out.rows)
            self.summaries[jid] = summary
            if (
                _state(summary) != before
            ):  # saved only when something changed (agents sample slower than cycles)
                summary.updated_at = now
                out.changed[jid] = summary
            out.entries[jid] = {
                **utilisation_entry(util, d),
                **summary.explained(),
                "sampled_at": sampled_at.get(jid),
                "stale_after_s": limit,
            }
        for jid in set(running) - set(
            out.entries
        ):  # no samples this window: what is stored, if anything
            if jid in self.summaries:
                stored = self.summaries[jid]
                out.entries[jid] = {
                    **stored.explained(),
                    "sampled_at": stored.last_sample_at,
                    "stale_after_s": limit,
                }
        shared = {s.job_id for s in mine if s.share_bytes is not None}
        for jid, job in running.items():
            self.running[jid] = (job, jid in shared or self.running.get(jid, (job, False))[1])
        live = {j.job_id for j in jobs}
        for jid in [j for j in self.summaries if j not in live]:
            self._ended(self.summaries.pop(jid), now, out.rows)
        for key in [k for k in self.energy if k[0] not in live]:
            del self.energy[key]  # stored; a job that comes back is read from its new sums
        for jid in [j for j in self.running if j not in live]:
            del self.running[jid]
            self.hinted.discard(jid)
        self._hints(running, out, backend, dry_run)
        return out

    def _note_freshness(self, f: Freshness) -> None:
        """Log, once each, a node whose newest sample turned stale and a read with no fresh
        sample at all (idle detection then has nothing to go on); and when they recover."""
        self.freshness = f
        where = self.cfg.exposition_dir
        for node in f.stale:
            if node not in self._stale_said:
                log.warning(
                    "telemetry: %s.prom in %s: newest sample %s old (more than %s): is the "
                    "gpu-agent on %s running? Its jobs' idle time is not counted meanwhile",
                    node,
                    where,
                    age_words(f.ages[node]),
                    age_words(f.limit),
                    node,
                )
        back = sorted(self._stale_said - set(f.stale))
        if back:
            log.info("telemetry: fresh samples again from %s", ", ".join(back))
        self._stale_said = set(f.stale)
        if not f.fresh and not self._blind_said:
            log.warning(
                "idle GPUs: no gpu-agent sample newer than %s in %s (%s): idle detection is "
                "off until the agents write again; slurm-dl doctor says which files",
                age_words(f.limit),
                where,
                f"{len(f.stale)} stale file(s)" if f.stale else "no agent file",
            )
        elif f.fresh and self._blind_said:
            log.info("idle GPUs: fresh gpu-agent samples again; idle detection resumes")
        self._blind_said = not f.fresh

    def _ended(self, summary: JobUtilisationSummary, now: float, rows: list[Decision]) -> None:
        """Remember what an ended job did with its GPUs (a ``gpu-use`` row: share hints later)."""
        job, shared = self.running.get(summary.job_id, (None, False))
        if job is None or not summary.samples:
            return
        run = RunUse(
            job.job_id,
            job.user,
            job.name,
            job.num_gpus,
            shared or not job.num_gpus,
            summary.peak_gpu_mem_bytes,
            round(summary.mean_util_percent, 2),
            summary.samples,
            summary.last_sample_at or now,
        )
        self._remember(run)
        rows.append((job.job_id, GPU_USE, None, run.to_reason()))

    def _hints(self, running: dict[int, Job], out: IdleStep, backend: Any, dry_run: bool) -> None:
        """A running 1-GPU job whose name's last runs used a small part of their GPU: told a shard would do."""
        sharing = getattr(self.site, "sharing", None)
        if sharing is None or not sharing.groups or not sharing.suggest_after_runs:
            return
        for jid, job in running.items():
            if job.num_gpus != 1 or self.running.get(jid, (job, False))[1]:
                continue
            hint = share_hint(
                self.runs.get((job.user, job.name), ()),
                job.user,
                job.name,
                runs=sharing.suggest_after_runs,
                gpu_mem_bytes=_gpu_memory_bytes(self.site, job.gpu_type),
                max_fraction=sharing.suggest_max_fraction,
            )
            if hint is None:
                continue
            out.entries.setdefault(jid, {})["share_hint"] = hint
            if (
                jid not in self.hinted
                and not dry_run
                and "[slurm-dl: " not in self._comment_of(job)
            ):
                self.hinted.add(jid)  # once; never over an idle warning
                out.rows.append((jid, "share-hint", None, hint))
                self._comment(job, hint, backend)

    def _advance(
        self,
        s: JobUtilisationSummary,
        d: IdleDecision,
        job: Job,
        backend: Any,
        now: float,
        dry_run: bool,
        rows: list[Decision],
    ) -> None:
        s.idle_since = d.idle_since
        if (
            d.verdict is Verdict.OK
        ):  # in use again, or a new spell under the limit: the next warning is a new one
            s.warned_at = None
        enforce = d.enforce and not dry_run
        verdict = d.verdict
        if verdict in (Verdict.DEPRIORITIZE, Verdict.CANCEL) and enforce and s.warned_at is None:
            verdict = Verdict.WARN  # never act on a job that was not warned first
        done = s.warned_at is not None if verdict is Verdict.WARN else s.action == verdict.value
        if verdict is Verdict.OK or (s.verdict == verdict.value and (done or not enforce)):
            s.verdict = (
                verdict.value
            )  # nothing new (a step only reported before is taken once enforced)
            return
        note = d.reason if enforce else d.reason + " (report only)"
        rows.append((d.job_id, f"idle-{verdict.value}", None, note))
        mode = "" if enforce else " [report only]"
        if "log" in self.cfg.warn_via or verdict is not Verdict.WARN:
            log.warning("idle GPUs: job %d: %s -> %s%s", d.job_id, d.reason, verdict.value, mode)
        s.verdict = verdict.value
        if not enforce:
            return
        if verdict is Verdict.WARN:
            s.warned_at = now
            self._comment(job, warning_note(d, self.cfg), backend)
            return
        s.action, s.action_at = verdict.value, now
        self._comment(job, action_note(d), backend)
        if (
            verdict is Verdict.CANCEL and d.opted_in
        ):  # decide() never cancels a job that did not opt in
            try:
                backend.cancel(d.job_id)
            except SlurmError as e:  # the job may have ended meanwhile; the next cycle sees it gone
                log.warning("idle GPUs: cancelling job %d failed: %s", d.job_id, e)

    def _comment_of(self, job: Job) -> str:
        """The job's comment as this step left it (the job itself is the snapshot's: unchanged)."""
        return self._written.get(job.job_id, job.comment) or ""

    def _comment(self, job: Job, note: str, backend: Any) -> None:
        if "comment" not in self.cfg.warn_via:
            return
        text = comment_with_note(self._comment_of(job), note)
        if text is None:
            log.warning(
                "idle GPUs: job %d: its comment leaves no room for a note; warned in the log only",
                job.job_id,
            )
            return
        setter = getattr(backend, "set_comment", None)
        if setter is None:
            log.warning("idle GPUs: job %d: this backend cannot write job comments", job.job_id)
            return
        try:
            setter(job.job_id, text)
            self._written[job.job_id] = text
        except SlurmError as e:  # a failed note must not stop the cycle; the log has the warning
            log.warning("idle GPUs: job %d: writing the comment failed: %s", job.job_id, e)


def _gpu_memory_bytes(site: Any, gpu_type: str | None) -> int:
    """The memory of the job's GPU type; else of the smallest type the site describes (0: unknown)."""
    mems = {g.name: g.memory_gb for g in getattr(site, "gpu_types", []) if g.memory_gb}
    gb = mems.get(gpu_type or "") or (min(mems.values()) if mems else 0)
    return int(gb * 2**30)


def _state(s: JobUtilisationSummary) -> tuple:
    return (s.samples, s.idle_since, s.verdict, s.warned_at, s.action, s.action_at)
