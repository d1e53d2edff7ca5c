"""tag: write the decision into ``admin_comment`` (see :mod:`slurm_dl.core.tags`), discarding what was there.

With tagging switched off, a user-supplied ``admin_comment`` that looks like a slurm-dl tag is
still removed, so nobody can forge one.
"""

from __future__ import annotations


from ..config import SiteConfig
from ..tags import (
    MAX_DEADLINE,
    MAX_GPUS,
    MAX_LEAD_S,
    TAG_PREFIX,
    JobTag,
    encode_tag,
    safe_value,
    soft_steps_valid,
)
from .decision import Draft
from .request import JobRequest


def tag(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft:
    changes = dict(draft.changes)
    if config.filter.tag:
        changes["admin_comment"] = encode_tag(
            JobTag(
                job_class=draft.job_class,
                checkpointable=draft.checkpointable,
                signal_target=draft.signal_target if draft.checkpointable else "batch",
                gpus=min(
                    draft.counted_gpus, MAX_GPUS
                ),  # larger only when validation is off; shards count
                shape=draft.shape,
                deadline=draft.deadline
                if draft.deadline is not None and draft.deadline <= MAX_DEADLINE
                else None,
                original=safe_value(req.original_request()),
                signal=draft.signal if draft.checkpointable else None,
                lead_s=min(draft.lead_s, MAX_LEAD_S)
                if draft.checkpointable and draft.lead_s is not None
                else None,
                gpu_types=draft.gpu_types or None,
                shards=draft.shards,
                soft_deadlines=draft.soft_deadlines
                if soft_steps_valid(draft.soft_deadlines)
                else None,
                elastic=draft.elastic,
            )
        )
    elif req.admin_comment and req.admin_comment.lstrip().startswith(TAG_PREFIX[:3]):
        changes["admin_comment"] = ""
    return draft.evolve(changes=changes)
