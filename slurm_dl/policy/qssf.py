"""History-predicted shortest-first (Helios' QSSF): predict a job's GPU-time from finished jobs
of the same user and job name, else the same user, else the same account (the ledger's
``history_by_key``; mean of the recent ones), else a site default; shortest prediction first.

Non-preemptive by default (``firstfit``: jobs that do not fit are skipped); ``preemptive=True``
ranks running jobs too. Predictions are cached per ledger revision.
"""

from __future__ import annotations

import math

from ..ledger import history_keys
from ..model import Job
from .base import PolicyContext, PriorityPolicy

SCORE_SCALE_LOG10 = 9.0
"""Scores map predictions on a log scale: 1 GPU-s → ~1.0, 10^9 GPU-s (31 GPU-years) → 0.0."""


class QssfPolicy(PriorityPolicy):
    name = "qssf"
    discipline = "firstfit"

    def __init__(self, config=None, *, default_gpu_s: float | None = None, preemptive: bool = False) -> None:
        if default_gpu_s is None:
            default_gpu_s = config.policy.qssf.default_gpu_s if config is not None else 3600.0
        if not default_gpu_s > 0:
            raise ValueError(f"qssf: default_gpu_s must be positive, got {default_gpu_s}")
        self.default_gpu_s = float(default_gpu_s)
        if preemptive:
            self.discipline = "preemptive"
            self.preemptive = True
        self.config = config
        self._cache: dict[tuple[str, str, str], float] = {}
        self._cache_rev: tuple[int, int] | None = None

    def predict(self, job: Job, ctx: PolicyContext) -> float:
        """Predicted total GPU-seconds of ``job`` (never less than what it has already used)."""
        led = ctx.ledger
        if led is None:
            return max(self.default_gpu_s, job.attained_gpu_s)
        rev = (id(led), led.revision)
        if rev != self._cache_rev:
            self._cache.clear()
            self._cache_rev = rev
        ck = (job.user, job.name, job.account)
        pred = self._cache.get(ck)
        if pred is None:
            pred = self.default_gpu_s
            for k in history_keys(*ck):
                past = led.history_by_key.get(k)
                if past:
                    pred = sum(past) / len(past)
                    break
            self._cache[ck] = pred
        return max(pred, job.attained_gpu_s)

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (self.predict(job, ctx), job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        return max(0.0, 1.0 - math.log10(1.0 + self.predict(job, ctx)) / SCORE_SCALE_LOG10)
