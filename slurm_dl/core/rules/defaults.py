"""defaults: per-class time limit and partition when missing, requeue on for jobs that declared a
checkpoint handler (``dl:ckpt``); every other job keeps its own requeue setting.

The checkpoint signal (``--signal=B:USR2@grace``) cannot be set here: job_submit/lua neither
reads nor writes ``warn_signal``/``warn_time``/``warn_flags`` on 22.05, 24.11 or 26.05
("_set_job_field: unrecognized field", verified on the testbed; none in their sources). dlsubmit's scripts carry it,
and the prioritizer signals the batch shell itself before a requeue.
"""

from __future__ import annotations


from ..config import SiteConfig
from .decision import Draft
from .request import JobRequest


def defaults(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft:
    cls = config.class_config(draft.job_class)
    changes = dict(draft.changes)
    if req.time_limit_min is None:
        changes["time_limit"] = cls.default_time_minutes
    if (
        req.partition is None and cls.partition and "partition" not in changes
    ):  # (not over a steered one)
        changes["partition"] = cls.partition
    if draft.checkpointable and req.requeue is None:
        changes["requeue"] = 1
    return draft.evolve(changes=changes)
