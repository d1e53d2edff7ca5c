"""share: small jobs go to GPU shards where the site offers them (``[sharing]``).

A 1-GPU job of a sharing class (``[sharing] classes``, by default inference and interactive),
or one that asks with the hint ``dl:share=1`` (``dlsubmit --share``), becomes one Slurm shard
(``--gres=shard:1``) on a node group that offers shards, with a notice that says how to keep a
whole GPU (``dl:share=0``). A job that says how much GPU memory it needs (``dl:gpu_mem=10G``,
``dlsubmit --gpu-mem 10G``) gets as many shards as hold that memory (``shard_memory_gb``, else
the GPU's memory / ``shards_per_gpu``), and keeps a whole GPU when that would be all of one. Jobs of several GPUs and training jobs never share; a training job
that asks for a shard, by hint or with ``--gres=shard:N``, is refused with the reason. A job
that names a GPU type no sharing group has, or a partition outside the sharing groups', keeps
its whole GPU.

A job that asks for shards itself (``--gres=shard:K``) is read by :func:`shard_request`: it
counts as ``ceil(K / shards_per_gpu)`` GPUs on each of its nodes (one, since K must be fewer
than a GPU's shards) in the tag, the class caps and the prioritizer's accounting, and is
refused when no node can serve it: K of a GPU's shards or more (a whole GPU: ``--gpus=1``),
no sharing group where it may run, shards asked per job or per socket, or shards and whole
GPUs together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import SiteConfig
from ..model import JobClass
from .decision import CODE_NODE_COUNT, ESLURM_INVALID_GRES, Draft, Rejection
from .request import JobRequest, parse_gpu_tres, parse_shard_tres
from ..units import UnitError, parse_memory_mb

PREFIX = "slurm-dl: "
_YES, _NO = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


def _asks_shard(req: JobRequest) -> bool:
    texts = (req.tres_per_job, req.tres_per_node, req.tres_per_task, req.tres_per_socket)
    return any(a.count > 0 for t in texts for a in parse_shard_tres(t)[0]) or any(
        parse_shard_tres(t)[1] for t in texts
    )


@dataclass(frozen=True, slots=True)
class ShardRequest:
    """A job's own shard request: ``per_node`` shards on each of ``nodes`` nodes, of GPUs that
    offer ``per_gpu`` shards each (None: the site config names no sharing group)."""

    per_node: int
    nodes: int
    per_gpu: int | None

    @property
    def gpus(self) -> int:
        """The GPUs it counts as: ``ceil(per_node / per_gpu)`` on each node (one without ``per_gpu``)."""
        return self.nodes * (-(-self.per_node // self.per_gpu) if self.per_gpu else 1)

    @property
    def tag(self) -> tuple[int, int] | None:
        """The tag's ``shards`` (K, S), when the site says S."""
        return (
            (self.per_node, self.per_gpu)
            if self.per_gpu and self.per_node <= self.per_gpu
            else None
        )


def _shard_refusal(text: str) -> Rejection:
    return Rejection("validate.shards", PREFIX + text, ESLURM_INVALID_GRES)


def shard_request(req: JobRequest, config: SiteConfig) -> ShardRequest | Rejection | None:
    """What the job's own GPU shard request counts as, or why no node can serve it (None: it
    asks for no shards)."""
    node_asks, node_bad = parse_shard_tres(req.tres_per_node)
    task_asks, task_bad = parse_shard_tres(req.tres_per_task)
    job_asks, job_bad = parse_shard_tres(req.tres_per_job)
    socket_asks, socket_bad = parse_shard_tres(req.tres_per_socket)
    bad = node_bad + task_bad + job_bad + socket_bad
    if bad:
        shown = bad[0].removeprefix("gres:").removeprefix("gres/")
        return _shard_refusal(
            f"cannot read the GPU shard request {shown[:40]!r}. "
            "Fix: --gres=shard:K with K a small number of shards."
        )
    if any(a.count for a in job_asks + socket_asks):
        return _shard_refusal(
            "GPU shards are asked per node. Fix: --gres=shard:K (K shards of one GPU on each node)."
        )
    per_task = sum(a.count for a in task_asks)
    tasks_here = req.ntasks_per_node or (-(-req.tasks // req.nodes) if per_task else 1)
    per_node = sum(a.count for a in node_asks) + per_task * tasks_here
    if per_node <= 0:
        return None
    if req.all_gpu_asks:
        return _shard_refusal(
            "a job asks for whole GPUs or for GPU shards, not both. "
            "Fix: --gpus=N alone, or --gres=shard:K alone."
        )
    nodes = req.nodes
    groups = {g.name: g for g in config.node_groups}
    offer = [
        (s, groups[s.node_group])
        for s in config.sharing.groups
        if s.shards_per_gpu and s.node_group in groups
    ]
    if not config.sharing.groups:
        return ShardRequest(per_node, nodes, None)
    types = {a.gpu_type for a in node_asks + task_asks if a.gpu_type}
    asked_parts = set(filter(None, (req.partition or "").split(",")))
    fits = [
        (s, g)
        for s, g in offer
        if (not types or types <= {g.gpu_type})
        and (not asked_parts or not g.partitions or asked_parts & set(g.partitions))
    ]
    asked = f"--gres=shard:{per_node}" if not per_task else f"{per_node} shards per node"
    if not fits:
        where = []
        if asked_parts:
            where.append(f"partition {','.join(sorted(asked_parts))[:40]}")
        if types:
            where.append(f"type {'+'.join(sorted(types))[:40]}")
        places = sorted({p for _, g in offer for p in g.partitions})
        fix = f"-p {places[0]}, or --gpus=1" if places and not types else "--gpus=1 for a whole GPU"
        return _shard_refusal(
            f"no node offers GPU shards for this job ({asked}"
            f"{', ' + ', '.join(where) if where else ''}); "
            + (f"partition(s) {', '.join(places)[:60]} offer them. " if places else "")
            + f"Fix: {fix}."
        )
    most = max(s.shards_per_gpu for s, _ in fits)
    if per_node >= most:
        whole = -(-per_node // most)
        what = (
            "all the shards of one GPU"
            if per_node == most
            else f"more shards than one GPU's {most}"
        )
        return Rejection(
            "validate.shards",
            f"{PREFIX}asked {asked}: {what}; a job's shards on a node "
            f"come from one GPU, which has {most} here. Fix: --gpus={whole} for whole GPUs, "
            f"or at most {most - 1} shards.",
            CODE_NODE_COUNT,
        )
    per_gpu = min(s.shards_per_gpu for s, _ in fits if s.shards_per_gpu > per_node)
    return ShardRequest(per_node, nodes, per_gpu)


def share(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft | Rejection:
    sharing = config.sharing
    if not sharing.groups:
        return draft
    hint = req.hints.get("share", "").lower()
    if draft.job_class is JobClass.TRAIN and (_asks_shard(req) or hint in _YES):
        return Rejection(
            "share.train",
            f"{PREFIX}a training job cannot run on a GPU shard: a shard shares its GPU with "
            "other jobs, and training needs whole GPUs. Fix: ask for whole GPUs (--gpus=N), "
            "or mark a small job as inference or interactive (--comment=dl:class=inference).",
        )
    if (
        hint in _NO
        or draft.gpus != 1
        or req.gpus_per_task
        or req.gpus_per_socket
        or _asks_shard(req)
        or req.cpus_per_tres
        or req.mem_per_tres
    ):  # per-GPU CPUs or memory: no GPU to count them by
        return draft
    mem_text = req.hints.get("gpu_mem", "")
    need_mb = _memory_mb(mem_text)
    if (
        draft.job_class not in sharing.classes
        and hint not in _YES
        and (need_mb is None or draft.job_class is JobClass.TRAIN)
    ):
        return draft
    groups = {g.name: g for g in config.node_groups}
    offer = [
        (s, groups[s.node_group])
        for s in sharing.groups
        if s.shards_per_gpu and s.node_group in groups
    ]
    asked_type = req.gpu_type
    asked_parts = set(filter(None, (req.partition or "").split(",")))
    fits = [
        (s, g)
        for s, g in offer
        if (asked_type is None or g.gpu_type == asked_type)
        and (not asked_parts or not g.partitions or asked_parts & set(g.partitions))
    ]
    if not fits:
        return draft
    memory = {t.name: t.memory_gb for t in config.gpu_types}
    sized = []
    for s, g in fits:
        shard_gb = s.shard_memory_gb or (
            memory[g.gpu_type] / s.shards_per_gpu if memory.get(g.gpu_type) else None
        )
        if need_mb is None:
            sized.append((s, g, 1, shard_gb))
        elif shard_gb and (k := max(1, math.ceil(need_mb / (shard_gb * 1024)))) < s.shards_per_gpu:
            sized.append((s, g, k, shard_gb))
    if not sized:  # the memory it needs is a whole GPU's (or no group says what a shard holds)
        return draft.evolve(
            notices=(
                *draft.notices,
                f"{PREFIX}this job keeps a whole GPU: its GPU memory "
                f"({mem_text}) needs all of one (GPU shards hold less)",
            )
        )
    fits = [(s, g) for s, g, k, _ in sized if k == sized[0][2]]
    s0, g0, shards, shard_gb = sized[0]
    job_asks, job_others = parse_gpu_tres(req.tres_per_job)
    _, node_others = parse_gpu_tres(req.tres_per_node)
    texts = (req.tres_per_job, req.tres_per_node)
    prefix = "gres/" if any(t and "gres/" in t for t in texts) else "gres:"
    changes = dict(draft.changes)
    changes["tres_per_node"] = ",".join([f"{prefix}shard:{shards}", *node_others])
    changes["tres_per_job"] = ",".join(job_others)
    changes["min_nodes"] = changes["max_nodes"] = 1
    parts = [p for _, g in fits for p in g.partitions if not asked_parts or p in asked_parts]
    if parts:
        changes["partition"] = ",".join(dict.fromkeys(parts))
    if need_mb is None:
        notice = (
            f"{PREFIX}this 1-GPU {draft.job_class.value} job runs on a GPU shard (1 of "
            f"{s0.shards_per_gpu} parts of a {g0.gpu_type}"
            f"{f', {s0.shard_memory_gb:g} GB of its memory' if s0.shard_memory_gb else ''}). "
            "For a whole GPU: --comment=dl:share=0"
        )
    else:
        notice = (
            f"{PREFIX}this 1-GPU {draft.job_class.value} job runs on {shards} GPU shard(s) "
            f"({shards} of {s0.shards_per_gpu} parts of a {g0.gpu_type}, {shards * shard_gb:.3g} GB "
            f"of its memory for the {mem_text} it needs). For a whole GPU: --comment=dl:share=0"
        )
    return draft.evolve(
        changes=changes,
        notices=(*draft.notices, notice),
        gpu_types=(g0.gpu_type,),
        shards=(shards, s0.shards_per_gpu),
    )


def _memory_mb(text: str) -> int | None:
    """The MB of a ``gpu_mem`` hint (``10G``); None when absent or not a size (a hint, not a request)."""
    if not text:
        return None
    try:
        return parse_memory_mb(text, "gpu_mem")[0]
    except UnitError:
        return None
