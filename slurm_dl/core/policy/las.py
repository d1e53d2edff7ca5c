"""Least attained service first, in K+1 discrete queues (Tiresias' 2D-LAS, or by run time).

Attained service is, with ``service="gpu-seconds"`` (Tiresias' 2D-LAS, the default without a
site config), GPUs × executed seconds (``Job.attained_gpu_s``, kept across requeues); with
``service="seconds"`` (the site config's default) the executed seconds alone. 2D-LAS lets narrow
jobs through first, so a user who splits one 8-GPU job into eight 1-GPU jobs gets ahead of
everyone with whole jobs; by run time the pieces rank exactly like the whole, and it is fair
share (which charges GPU-seconds) that weighs width. Queue ``k`` holds jobs with
``thresholds[k-1] <= attained < thresholds[k]``; queue 0 runs first.

Within a queue the order is FIFO by **submit time** (then job id). Tiresias' simulator appends a
job to a queue when it enters it; ordering by submit time instead keeps the key a function of
the job alone (no hidden per-queue state to lose when the daemon restarts) and gives the same
order for jobs that never change queue.

Starvation guard (Tiresias' "promote knob"): a pending job that has run before
(``executed_s > 0``) and has waited longer than ``S × executed_s`` in total is promoted to
queue 0. Waited is ``Job.waited_s`` where the prioritizer's ledger counts it (time pending, not
held, past the eligible time: Slurm resets a requeued job's submit time, and a hold is not
waiting), else ``now - submit_time - executed_s`` (the simulator). A job held now is never
promoted, and its held time never counts, so holding a job gains it nothing.

With hysteresis: a running job stays promoted while it has waited more than
``S/2 × executed_s``, so a promoted job runs until it has executed twice what it had when
promoted, instead of losing the promotion the moment it starts (which would let the next pass
preempt it straight away). The rule needs no memory of past promotions (the ledger keeps the
wait), so it survives a daemon restart. A promoted job queues after the
jobs that are in queue 0 on their own merit (Tiresias appends it to the end of queue 0), so a
new short job is not held up behind the long jobs the guard lifts.

Key fields must be current as of ``ctx.now`` (the caller accrues attained service first).
"""

from __future__ import annotations

import bisect
import math

from ..model import Job
from .base import PolicyContext, PriorityPolicy, policy_settings

TIRESIAS_THRESHOLDS_GPU_S = (3250.0, 7200.0, 18000.0)
"""Tiresias' published default queue thresholds (GPU-seconds)."""


class LasPolicy(PriorityPolicy):
    name = "las"
    discipline = "preemptive"
    preemptive = True

    def __init__(
        self,
        config=None,
        *,
        thresholds_gpu_s: list[float] | tuple[float, ...] | None = None,
        starvation_factor: float | None | str = "config",
        service: str | None = None,
    ) -> None:
        las = policy_settings(config).las
        if service is None:
            service = las.service
        if service not in ("gpu-seconds", "seconds"):
            raise ValueError(f"LAS service must be 'gpu-seconds' or 'seconds', got {service!r}")
        self.service = service
        self.by_time = service == "seconds"
        if thresholds_gpu_s is None:
            thresholds_gpu_s = las.thresholds_gpu_s
        th = tuple(float(t) for t in thresholds_gpu_s)
        if (
            not th
            or any(not math.isfinite(t) or t <= 0 for t in th)
            or any(b <= a for a, b in zip(th, th[1:]))
        ):
            raise ValueError(
                f"LAS thresholds must be positive and strictly increasing, got {list(th)}"
            )
        if starvation_factor == "config":
            starvation_factor = las.starvation_factor
        if starvation_factor is not None and not starvation_factor > 0:
            raise ValueError(
                f"LAS starvation_factor must be positive or None, got {starvation_factor}"
            )
        self.config = config
        self.thresholds: tuple[float, ...] = th
        self.starvation_factor: float | None = starvation_factor

    # --- the queue of a job --------------------------------------------------------------
    def queue_of(self, attained_gpu_s: float) -> int:
        """0 for the least attained service; ``len(thresholds)`` for the last queue."""
        return bisect.bisect_right(self.thresholds, attained_gpu_s)

    def _waited(self, job: Job, now: float) -> float:
        w = job.waited_s
        return now - job.submit_time - job.executed_s if w is None else w

    def _promotion_factor(self, running: bool) -> float:
        s = self.starvation_factor
        return 0.5 * s if running else s

    def promoted(self, job: Job, now: float) -> bool:
        """True when the starvation guard lifts this job to queue 0 (``S/2`` while it runs)."""
        if self.starvation_factor is None or job.executed_s <= 0.0:
            return False
        if (
            job.state_reason and job.held
        ):  # (a cheap test first: the simulator's jobs have no reason)
            return False
        return self._waited(job, now) > self._promotion_factor(job.running) * job.executed_s

    def attained(self, job: Job) -> float:
        """The job's attained service in this policy's unit (GPU-seconds or seconds)."""
        if self.by_time:
            n = job.norm_executed_s
            return round(job.executed_s if n is None else n, 6)
        return job.attained_gpu_s

    def _standing(self, job: Job, now: float) -> tuple[int, int]:
        """(queue, 1 if lifted there by the starvation guard else 0)."""
        if self.starvation_factor is not None and self.promoted(job, now):
            return (0, 1)
        return (bisect.bisect_right(self.thresholds, self.attained(job)), 0)

    def queue(self, job: Job, ctx: PolicyContext) -> int:
        return self._standing(job, ctx.now)[0]

    def queue_for(
        self, attained: float, executed_s: float, waited_s: float, running: bool = False
    ) -> int:
        """The same queue from plain numbers (for callers that keep their own job state):
        ``attained`` in this policy's unit, ``waited_s`` the total time spent not running since
        submission."""
        s = self.starvation_factor
        if (
            s is not None
            and executed_s > 0.0
            and waited_s > self._promotion_factor(running) * executed_s
        ):
            return 0
        return bisect.bisect_right(self.thresholds, attained)

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (*self._standing(job, ctx.now), job.submit_time, job.job_id)

    def tiebreak(self, job: Job, ctx: PolicyContext) -> tuple:
        """In the combined policy too, promoted jobs follow the jobs in queue 0 on their own."""
        if self.starvation_factor is None:
            return ()
        return (self._standing(job, ctx.now)[1],)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        """1.0 in the first queue down to 0.0 in the last."""
        return 1.0 - self.queue(job, ctx) / len(self.thresholds)

    def score_and_tiebreak(self):
        """Score and tiebreak from one look at the job's standing (not for a subclass that
        changes either)."""
        cls = type(self)
        if any(
            getattr(cls, m) is not getattr(LasPolicy, m)
            for m in ("score", "tiebreak", "queue", "_standing")
        ):
            return None
        standing, n, guard = (
            self._standing,
            len(self.thresholds),
            self.starvation_factor is not None,
        )

        def both(job: Job, ctx: PolicyContext) -> tuple[float, tuple]:
            q, lifted = standing(job, ctx.now)
            return 1.0 - q / n, ((lifted,) if guard else ())

        return both

    def bind_score_and_tiebreak(self, ctx: PolicyContext):
        """``score_and_tiebreak`` at ``ctx.now``: a job that has not run cannot be lifted by
        the starvation guard, so its queue is a lookup of its attained service."""
        if self.score_and_tiebreak() is None or type(self).promoted is not LasPolicy.promoted:
            return None
        now, thresholds, n, place = (
            ctx.now,
            self.thresholds,
            len(self.thresholds),
            bisect.bisect_right,
        )
        guard, promoted = self.starvation_factor is not None, self.promoted
        own = type(self).attained is LasPolicy.attained
        attained = None if own and not self.by_time else self.attained
        lifted, unlifted = ((1,), (0,)) if guard else ((), ())
        score_of = [
            1.0 - q / n for q in range(n + 1)
        ]  # per queue: the same floats as computed each time
        top = score_of[0]

        if own and self.by_time:  # ``attained`` inlined: run time, at the speed it ran where known

            def both(job: Job) -> tuple[float, tuple]:
                if guard and job.executed_s > 0.0 and promoted(job, now):
                    return top, lifted
                t = job.norm_executed_s
                return score_of[
                    place(thresholds, round(job.executed_s if t is None else t, 6))
                ], unlifted

            return both

        def both(job: Job) -> tuple[float, tuple]:
            if guard and job.executed_s > 0.0 and promoted(job, now):
                return top, lifted
            return score_of[
                place(thresholds, job.attained_gpu_s if attained is None else attained(job))
            ], unlifted

        return both

    def next_key_change(self, job: Job, ctx: PolicyContext) -> float | None:
        now = ctx.now
        s = self.starvation_factor
        if job.running:
            out: float | None = None
            got = self.attained(job)
            rate = 1.0 if self.by_time else job.num_gpus
            i = bisect.bisect_right(self.thresholds, got)
            if i < len(self.thresholds) and rate > 0:
                out = now + (self.thresholds[i] - got) / rate
            if s is not None and job.executed_s > 0.0 and self.promoted(job, now):
                lapse = now + (self._waited(job, now) / (0.5 * s) - job.executed_s)
                out = lapse if out is None else min(out, lapse)
            return out
        if job.pending and s is not None and job.executed_s > 0.0 and not self.promoted(job, now):
            if job.state_reason and job.held:  # its wait does not grow until it is released
                return None
            if bisect.bisect_right(self.thresholds, self.attained(job)) > 0:
                return now + (s * job.executed_s - self._waited(job, now))
        return None


class TiresiasLasPolicy(LasPolicy):
    """2D-LAS with Tiresias' published defaults (3,250 / 7,200 / 18,000 GPU-s), unless overridden."""

    name = "las-tiresias"

    def __init__(
        self, config=None, *, thresholds_gpu_s=None, starvation_factor="config", service=None
    ) -> None:
        super().__init__(
            config,
            thresholds_gpu_s=TIRESIAS_THRESHOLDS_GPU_S
            if thresholds_gpu_s is None
            else thresholds_gpu_s,
            starvation_factor=starvation_factor,
            service="gpu-seconds" if service is None else service,
        )
