"""History-predicted shortest-first (Helios' QSSF): predict a job's GPU-time from the finished
jobs most like it (:mod:`slurm_dl.core.policy.history`: the same user, job name, GPU count,
partition and time limit, falling back to coarser keys when a key has fewer than ``min_jobs``
finished jobs), else a site default; shortest prediction first.

The prediction is the mean GPU-seconds of the matching finished jobs that used more than the
job has already attained (a requeued or running job that outlived its key's jobs falls back to
a coarser key, and is never predicted below what it has used). ``history_keys="user-name"`` is
Helios' own lookup (user and job name, user, account).

Non-preemptive by default (``firstfit``: jobs that do not fit are skipped); ``preemptive=True``
ranks running jobs too. Predictions are cached per ledger revision.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..model import Job
from .base import PolicyContext, PriorityPolicy
from .history import HistoryLearner, HistoryView, features

SCORE_SCALE_LOG10 = 9.0
"""Scores map predictions on a log scale: 1 GPU-s → ~1.0, 10^9 GPU-s (31 GPU-years) → 0.0."""


class QssfPolicy(PriorityPolicy):
    name = "qssf"
    discipline = "firstfit"

    def __init__(self, config=None, *, default_gpu_s: float | None = None, preemptive: bool = False,
                 history_keys: str | Sequence[Sequence[str]] | None = None,
                 min_jobs: int | None = None) -> None:
        q = config.policy.qssf if config is not None else None
        if q is None:
            from ..config import QssfConfig
            q = QssfConfig()
        if default_gpu_s is None:
            default_gpu_s = q.default_gpu_s
        if not default_gpu_s > 0:
            raise ValueError(f"qssf: default_gpu_s must be positive, got {default_gpu_s}")
        self.default_gpu_s = float(default_gpu_s)
        keys = q.history_keys if history_keys is None else history_keys
        n = q.min_jobs if min_jobs is None else int(min_jobs)
        HistoryLearner(keys, min_jobs=n)  # fail early on bad settings
        self.history_keys = keys
        self._view = HistoryView(lambda: HistoryLearner(keys, min_jobs=n))
        if preemptive:
            self.discipline = "preemptive"
            self.preemptive = True
        self.config = config
        self._cache: dict[tuple, float] = {}
        self._cache_rev: tuple[int, int] | None = None

    def predict(self, job: Job, ctx: PolicyContext) -> float:
        """Predicted total GPU-seconds of ``job`` (never less than what it has already used)."""
        led = ctx.ledger
        got = job.attained_gpu_s
        if led is None:
            return max(self.default_gpu_s, got)
        rev = (id(led), led.revision)
        if rev != self._cache_rev:
            self._cache.clear()
            self._cache_rev = rev
            self._view.sync(led)
        ck = (job.user, job.account, job.name, job.num_gpus, job.partition, job.time_limit, got)
        pred = self._cache.get(ck)
        if pred is None:
            p = self._view.learner.predict(features(*ck[:6]), got)
            pred = self._cache[ck] = self.default_gpu_s if p is None else p
        return max(pred, got)

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (self.predict(job, ctx), job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        return max(0.0, 1.0 - math.log10(1.0 + self.predict(job, ctx)) / SCORE_SCALE_LOG10)
