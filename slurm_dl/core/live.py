"""What each user holds in live jobs, as the filter's quotas count it: deadline jobs and GPUs
per class, from the filter's own tags on Slurm's pending and running jobs (a pending array
counts each of its waiting tasks). Pure.

Only live jobs count: a cancelled or finished job drops out of Slurm's job list and so out of
the count, and a job whose answer reached the shim too late went in untagged and is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .model import Job
from .tags import parse_tag


@dataclass(slots=True)
class UserLive:
    deadline_jobs: int = 0
    class_gpus: dict[str, int] = field(default_factory=dict)

    def add(self, job_class: str, gpus: int, has_deadline: bool, tasks: int = 1) -> None:
        """Count a job; an array's pending record counts as its ``tasks`` jobs."""
        tasks = max(1, tasks)
        self.deadline_jobs += tasks if has_deadline else 0
        self.class_gpus[job_class] = self.class_gpus.get(job_class, 0) + max(0, gpus) * tasks


def live_counts(jobs: Iterable[Job]) -> dict[str, UserLive]:
    """Per user: tagged deadline jobs and GPUs per class over pending and running jobs."""
    out: dict[str, UserLive] = {}
    for job in jobs:
        if not (job.pending or job.running):
            continue
        tag = parse_tag(job.admin_comment)
        if tag is None:
            continue
        gpus = job.num_gpus if job.running and job.num_gpus else tag.gpus
        if job.shards > 0:
            gpus = max(gpus, shard_gpus(job, tag.gpus))
        out.setdefault(job.user, UserLive()).add(
            tag.job_class.value,
            gpus,
            tag.deadline is not None or bool(tag.soft_deadlines),
            job.array_tasks,
        )
    return out


def shard_gpus(job: Job, tagged: int = 0) -> int:
    """The GPUs a job on GPU shards counts as: its tag's count (the filter's: a GPU on each
    node for fewer shards than a GPU has), and at least one GPU on each of its nodes (a job
    tagged before shards were counted, or submitted around the filter)."""
    return max(tagged, job.num_nodes or 1, 1)
