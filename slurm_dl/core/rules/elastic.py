"""elastic: a job that may run at a range (``dl:elastic=8-32``) or a set (``dl:elastic=8,16,32``)
of GPU counts, named in ``--comment``. The job is submitted at its maximum (the caps and every
other rule check that size); this rule checks the sizes and puts them in the tag, which only the
filter writes, so a hand-written ``admin_comment`` never makes a job elastic.

A size must fit the node shapes: on one node, or as whole nodes of the GPU type it runs on.
A range keeps every count between its ends that fits; both ends must fit.
"""

from __future__ import annotations

from ..config import SiteConfig
from ..elastic_sizes import ElasticSizes, fits_nodes, parse_sizes
from ..site_shape import site_shape
from .decision import Draft, Rejection
from .request import JobRequest

HINT = "elastic"
_FIX = "Fix: --comment=dl:elastic=MIN-MAX (8-32) or a set (8,16,32) in rising order."


def _reject(message: str) -> Rejection:
    return Rejection("elastic", f"slurm-dl: {message}. {_FIX}")


def elastic(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft | Rejection:
    text = req.hints.get(HINT)
    if text is None:
        return draft
    try:
        sizes = parse_sizes(text)
    except ValueError as e:
        return _reject(str(e))
    if draft.shards is not None or draft.gpus < 1:
        return _reject(f"elastic GPUs {text!r} need a job on whole GPUs (--gpus=N)")
    per_node, nodes = site_shape(config).nodes_with_most_gpus.get(req.gpu_type, (0, 0))
    bad = _unfit(sizes, per_node, nodes)
    if bad is not None:
        return _reject(
            f"elastic GPUs {text!r}: {bad} GPUs fit no node shape here "
            f"(up to {per_node} on one node, or whole nodes of {per_node}, at most {nodes})"
        )
    if draft.gpus != sizes.high:
        return _reject(
            f"elastic GPUs {text!r}: the job asks for {draft.gpus} GPUs; submit it at its "
            f"maximum, {sizes.high} (Slurm shrinks it when it must)"
        )
    if not draft.checkpointable:
        return _reject(
            f"elastic GPUs {text!r}: a resize restarts the job from its checkpoint, so it must "
            "save one on the preemption signal (a checkpointable class, dl:ckpt=1)"
        )
    return draft.evolve(elastic=sizes)


def _unfit(sizes: ElasticSizes, per_node: int, nodes: int) -> int | None:
    """The first size that fits no node shape (a range: its ends), or None."""
    ends = (sizes.low, sizes.high) if sizes.is_range else sizes.choices
    for gpus in ends:
        if not fits_nodes(gpus, per_node, nodes):
            return gpus
    return None
