"""History-predicted shortest-first (Helios' QSSF): predict a job's GPU-time from what is known
of it at submission and from the finished jobs most like it; shortest prediction first.

* A job that asks a time limit (``use_time_limit``) is predicted as that limit times the ratio
  of run time to time limit learnt from finished jobs like it (Tsafrir et al.'s correction of
  users' estimates; 1 while nothing is learnt), times its GPUs.
* Any other job: its run time learnt from finished jobs
  (:mod:`slurm_dl.core.policy.history`: the same user, job name, GPU count, partition and time
  limit, then coarser keys; a key counts once it has ``min_jobs`` finished jobs), each key's
  mean shrunk towards the coarser keys' estimate as if that were ``shrink_jobs`` more jobs
  (0: the most specific key alone, Helios' lookup); times its GPUs. Else a site default.

Run times are learnt per GPU so that keys mixing GPU counts pool like with like. A job is
never predicted below what it has used. ``history_keys="user-name"`` is Helios' own lookup
(user and job name, user, account).

Preemptive by default (the config's ``preemptive``): SRTF on predicted sizes. Pending and
running jobs are ranked together by predicted GPU-time minus attained service; a job that
outlives its prediction ranks first and is not preempted for one predicted shorter. The
prediction of a job without a time limit is not conditioned on its own attained service
there: the expected remaining run of a job that has run long grows with its age (heavy-tailed
run times), so a conditioned prediction makes running jobs swap places again and again, each
swap a restart (heavy Philly: 565,000 preemptions for 24,000 jobs and 2.3x SRTF, against
1.4x without). With ``preemptive=False`` (the queue order alone, ``firstfit``: jobs that do
not fit are skipped) a requeued job's prediction counts only finished jobs that ran longer
than it already has (one that outlived its key's jobs falls back to a coarser key).
Predictions are cached per ledger revision.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..model import Job
from .base import PolicyContext, PriorityPolicy, policy_settings
from .history import (
    HistoryLearner,
    HistoryView,
    features,
    has_batch,
    job_batch,
    limit_ratio,
    per_gpu_seconds,
    without_limit,
)

SCORE_SCALE_LOG10 = 9.0
"""Scores map predictions on a log scale: 1 GPU-s → ~1.0, 10^9 GPU-s (31 GPU-years) → 0.0."""


class QssfPolicy(PriorityPolicy):
    name = "qssf"
    discipline = "firstfit"

    def __init__(
        self,
        config=None,
        *,
        default_gpu_s: float | None = None,
        preemptive: bool | None = None,
        history_keys: str | Sequence[Sequence[str]] | None = None,
        min_jobs: int | None = None,
        shrink_jobs: float | None = None,
        use_time_limit: bool | None = None,
        batch_min_jobs: int | None = None,
    ) -> None:
        q = policy_settings(config).qssf
        if default_gpu_s is None:
            default_gpu_s = q.default_gpu_s
        if not default_gpu_s > 0:
            raise ValueError(f"qssf: default_gpu_s must be positive, got {default_gpu_s}")
        self.default_gpu_s = float(default_gpu_s)
        keys = q.history_keys if history_keys is None else history_keys
        n = q.min_jobs if min_jobs is None else int(min_jobs)
        self.shrink_jobs = float(q.shrink_jobs if shrink_jobs is None else shrink_jobs)
        if not self.shrink_jobs >= 0:
            raise ValueError(f"qssf: shrink_jobs must be 0 or more, got {self.shrink_jobs}")
        self.use_time_limit = bool(q.use_time_limit if use_time_limit is None else use_time_limit)
        HistoryLearner(
            keys, min_jobs=n, batch_min_jobs=batch_min_jobs
        )  # fail early on bad settings
        self.history_keys = keys
        self._batched = has_batch(keys)  # look jobs up by their batch too
        self._view = HistoryView(
            lambda: HistoryLearner(
                keys, min_jobs=n, value=per_gpu_seconds, batch_min_jobs=batch_min_jobs
            )
        )
        ratio_keys = without_limit(keys)
        self._ratio = HistoryView(lambda: HistoryLearner(ratio_keys, min_jobs=n, value=limit_ratio))
        if q.preemptive if preemptive is None else preemptive:
            self.discipline = "preemptive"
            self.preemptive = True
        self.config = config
        self._cache: dict[tuple, float] = {}
        self._cache_rev: tuple[int, int] | None = None

    def predict(self, job: Job, ctx: PolicyContext) -> float:
        """Predicted total GPU-seconds of ``job`` (never less than what it has already used)."""
        led = ctx.ledger
        got = job.attained_gpu_s
        gpus = max(job.num_gpus, 1)
        limit = (
            job.time_limit
            if self.use_time_limit and job.time_limit and job.time_limit > 0
            else None
        )
        if led is None:
            return max(limit * gpus if limit else self.default_gpu_s, got)
        rev = (id(led), led.revision)
        if rev != self._cache_rev:
            self._cache.clear()
            self._cache_rev = rev
            self._view.sync(led)
            if self.use_time_limit:
                self._ratio.sync(led)
        if limit:  # the ratio's keys leave the limit out: one look-up per key, not per limit
            ck = (job.user, job.account, job.name, job.num_gpus, job.partition)
            r = self._cache.get(ck)
            if r is None:
                r = self._ratio.learner.shrunk_mean(features(*ck), 0.0, self.shrink_jobs)
                r = self._cache[ck] = 1.0 if r is None else min(r, 1.0)
            return max(limit * gpus * r, got)
        # queue order: conditioned on what a requeued job has shown; preemptive: not (see the
        # module docstring)
        above = 0.0 if self.preemptive else got / gpus
        ck = (
            job.user,
            job.account,
            job.name,
            job.num_gpus,
            job.partition,
            job.time_limit,
            job_batch(job) if self._batched else "",
            above,
        )
        pred = self._cache.get(ck)
        if pred is None:
            p = self._view.learner.shrunk_mean(features(*ck[:7]), above, self.shrink_jobs)
            pred = self._cache[ck] = self.default_gpu_s if p is None else p * gpus
        return max(pred, got)

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        p = self.predict(job, ctx)
        if self.preemptive:  # predicted remaining; on a tie a pending job first (as SRTF)
            return (p - job.attained_gpu_s, 0 if job.pending else 1, job.submit_time, job.job_id)
        return (p, job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        return max(0.0, 1.0 - math.log10(1.0 + self.predict(job, ctx)) / SCORE_SCALE_LOG10)
