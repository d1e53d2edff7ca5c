"""The prioritizer's GPU-telemetry step: keep a window of the agents' samples, summarise each
job's utilisation for the explanations, decide idle allocations (slurm_dl.idle) and act on them.

Actions: ``warn`` logs one line per job when it first reaches the warning; ``cancel`` cancels the
job through the backend; ``deprioritize`` records the decision and logs it (not yet fed to the
preemption planner). Nothing is done in a dry run or when the decision is not enforced.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from slurm_dl.config import TelemetryConfig
from slurm_dl.idle import IdleDecision, Verdict, decide, horizon_minutes, merge_window, utilisation_entry
from slurm_dl.model import Job
from slurm_dl.telemetry.attribution import summarize
from slurm_dl.telemetry.reader import read_exposition_dir
from slurm_dl.telemetry.samples import JobGpuSample

log = logging.getLogger("slurm_dl.prioritizer")

Decision = tuple[int, str, int | None, str]


class IdleWatcher:
    def __init__(self, cfg: TelemetryConfig, read: Callable[[], list[JobGpuSample]] | None = None) -> None:
        self.cfg = cfg
        self.read = read or (lambda: read_exposition_dir(cfg.exposition_dir or ""))
        self.window: list[JobGpuSample] = []
        self.last_verdict: dict[int, Verdict] = {}

    def step(self, jobs: Iterable[Job], now: float, backend: Any, *, dry_run: bool) -> tuple[dict[int, dict], list[Decision]]:
        """Per running job: its utilisation entry; and the decision rows to store."""
        running = {j.job_id: j for j in jobs if j.running}
        self.window = merge_window(self.window, self.read(), now - horizon_minutes(self.cfg) * 60.0)
        mine = [s for s in self.window if s.job_id in running]
        decisions = {d.job_id: d for d in decide(mine, running, self.cfg)}
        entries = {jid: utilisation_entry(u, decisions.get(jid)) for jid, u in summarize(mine).items()}
        rows: list[Decision] = []
        for jid, d in decisions.items():
            if d.verdict is not Verdict.OK and self.last_verdict.get(jid) is not d.verdict:
                rows.append((jid, f"idle-{d.verdict.value}", None, d.reason + ("" if d.enforce else " (report only)")))
                self._act(d, backend, dry_run)
            self.last_verdict[jid] = d.verdict
        for jid in [j for j in self.last_verdict if j not in running]:
            del self.last_verdict[jid]
        return entries, rows

    def _act(self, d: IdleDecision, backend: Any, dry_run: bool) -> None:
        mode = "" if d.enforce and not dry_run else " [report only]"
        log.warning("idle GPUs: job %d: %s -> %s%s", d.job_id, d.reason, d.verdict.value, mode)
        if mode or d.verdict is not Verdict.CANCEL:
            return
        try:
            backend.cancel(d.job_id)
        except Exception as e:  # the job may have ended meanwhile; the next cycle sees it gone
            log.warning("idle GPUs: cancelling job %d failed: %s", d.job_id, e)
