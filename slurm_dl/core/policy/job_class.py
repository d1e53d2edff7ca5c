"""Class weights from the site config: serving and interactive work above batch training.

Highest class weight first, then submit time. Non-preemptive (``firstfit``).
"""

from __future__ import annotations

from typing import Mapping

from ..model import Job, JobClass
from .base import PolicyContext, PriorityPolicy


class ClassPolicy(PriorityPolicy):
    name = "class"
    discipline = "firstfit"

    def __init__(self, config=None, *, weights: Mapping[str, float] | None = None) -> None:
        from ..config.job_classes import default_classes

        classes = config.classes if config is not None else default_classes()
        w = {c: cc.weight for c, cc in classes.items()}
        if weights is not None:
            w.update({JobClass.parse(str(k)): float(v) for k, v in weights.items()})
        if any(not v > 0 for v in w.values()):
            raise ValueError(f"class weights must be positive, got {w}")
        self.weights: dict[JobClass, float] = w
        self._max = max(w.values())
        self.config = config

    def weight(self, job: Job) -> float:
        return self.weights.get(job.job_class, 1.0)

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        return (-self.weight(job), job.submit_time, job.job_id)

    def score(self, job: Job, ctx: PolicyContext) -> float:
        return self.weight(job) / self._max

    def bind_score(self, ctx: PolicyContext):
        cls = type(self)
        if cls.score is not ClassPolicy.score or cls.weight is not ClassPolicy.weight:
            return None
        weight, top = self.weights.get, self._max
        return lambda job: weight(job.job_class, 1.0) / top
