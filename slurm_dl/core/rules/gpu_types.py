"""Which GPU types a job accepts: the set the prioritizer may steer it within. Pure.

- A job that names a type (``--gres=gpu:v100:2``, ``--gpus=h100:4``) keeps it: one type.
- Otherwise every type of the site may do, narrowed by what the job says:
  its partitions (only the types whose nodes are in them), its ``--constraint`` (node features
  that are type names: ``--constraint='a100|h100'``; ``gpu_a100`` also reads as ``a100``), a GPU
  memory need (``dl:gpu_mem=40G`` in the comment: types with less memory are out), and its
  shape (a type whose nodes cannot hold its GPUs per node, or whose GPUs are fewer than it asks).

The set is recorded in the job's tag (``types=a100+h100``); an empty one is refused.
"""

from __future__ import annotations

import re
from typing import Sequence

from ..config import SiteConfig
from ..model import Job, JobClass
from ..steering import Lever, type_levers
from ..throughput import ThroughputModel
from ..units import UnitError, parse_memory_mb
from .request import JobRequest
from ..site_shape import site_shape

_TOKEN = re.compile(r"[A-Za-z0-9_.-]+")
SIZE = "too few: "  # marks a type ruled out by the job's size alone


def feature_types(features: str | None, types: list[str]) -> set[str]:
    """GPU types a ``--constraint`` expression names (``a100|h100``, ``[a100|h100]&ib``)."""
    if not features:
        return set()
    by_name = {t.lower(): t for t in types}
    out = set()
    for token in _TOKEN.findall(features[:4096]):
        low = token.lower().removeprefix("gpu_").removeprefix("gpu-")
        if low in by_name:
            out.add(by_name[low])
    return out


def partition_types(partitions: list[str], config: SiteConfig) -> set[str] | None:
    """GPU types with nodes in any of ``partitions`` (None: none of them is in the site config)."""
    known = {p.name for p in config.partitions}
    named = [p for p in partitions if p in known]
    if not named:
        return None
    return {
        g.gpu_type for g in config.node_groups if not g.partitions or set(g.partitions) & set(named)
    }


def memory_need_mb(req: JobRequest) -> int | None:
    """The GPU memory the job says it needs (``dl:gpu_mem=40G``), in MB; None if it says none."""
    text = req.hints.get("gpu_mem")
    if not text:
        return None
    try:
        mb, _ = parse_memory_mb(text[:40])
    except (UnitError, ValueError):
        return None
    return mb


def accepted_types(
    req: JobRequest, config: SiteConfig, job_class: JobClass | None = None
) -> tuple[list[str], list[str]]:
    """(the GPU types the job may run on, in the site's order; why each other type is out)."""
    types = config.gpu_type_names
    named = {a.gpu_type for a in req.all_gpu_asks if a.gpu_type}
    if named:
        return [t for t in types if t in named], [
            f"{t}: the job names {', '.join(sorted(named))}" for t in types if t not in named
        ]
    out: list[str] = []
    why: list[str] = []
    own_part = (
        (req.partition or config.class_config(job_class).partition)
        if job_class is not None
        else req.partition
    )
    parts = partition_types([p.strip() for p in (own_part or "").split(",") if p.strip()], config)
    by_feature = feature_types(req.features, types)
    need_mb = memory_need_mb(req)
    mem = {g.name: g.memory_gb for g in config.gpu_types}
    shape = site_shape(config)
    per_node = req.gpus_on_one_node
    for t in types:
        if parts is not None and t not in parts:
            why.append(f"{t}: not in partition {req.partition}")
        elif by_feature and t not in by_feature:
            why.append(f"{t}: not in --constraint={req.features[:40]}")
        elif need_mb is not None and mem.get(t) is not None and mem[t] * 1024 < need_mb:
            why.append(f"{t}: {mem[t]:g} GB per GPU, the job needs {need_mb / 1024:g} GB")
        elif per_node is not None and per_node > shape.gpus_per_node_by_type.get(t, 0):
            why.append(f"{t}: {SIZE}no node has {per_node} of them")
        elif req.total_gpus > shape.gpus_total_by_type.get(t, 0):
            why.append(
                f"{t}: {SIZE}the cluster has {shape.gpus_total_by_type.get(t, 0)}, the job asks {req.total_gpus}"
            )
        else:
            out.append(t)
    return out, why


_MODELS: dict[int, tuple[SiteConfig, ThroughputModel, dict[str, Lever]]] = {}


def site_model(config: SiteConfig) -> tuple[ThroughputModel, dict[str, Lever]]:
    """The site's throughput model and each type's lever (memoised per config object)."""
    hit = _MODELS.get(id(config))
    if hit is not None and hit[0] is config:
        return hit[1], hit[2]
    model = ThroughputModel.from_config(config)
    levers = type_levers(config.node_groups, [p.name for p in config.partitions])
    if len(_MODELS) >= 16:
        _MODELS.clear()
    _MODELS[id(config)] = (config, model, levers)
    return model, levers


def first_steer(
    req: JobRequest,
    job_class: JobClass,
    types: Sequence[str],
    config: SiteConfig,
    partition: str | None = None,
) -> dict[str, str]:
    """Where a job that accepts several types starts out: its fastest type by the site's
    throughput model, through that type's lever (the prioritizer moves it each cycle as room
    comes and goes). The partition lever only replaces the default partition or per-type ones
    (a job in another partition, e.g. its class's, keeps it and gets the feature lever); a job
    whose own --constraint says more than types keeps it. ``partition``: the job's, or its
    class's when it named none."""
    model, levers = site_model(config)
    job = Job(
        job_id=0,
        user=req.user_name or "",
        name=req.name or "",
        num_gpus=req.total_gpus,
        job_class=job_class,
    )
    fastest = model.best_types(job, types)[0]
    lever = levers.get(fastest)
    if lever is None:
        return {}
    asked = [p.strip() for p in (partition or "").split(",") if p.strip()]
    swappable = {config.default_partition} | {
        lv.partition for lv in levers.values() if lv.partition
    }
    if lever.partition is not None and all(p in swappable for p in asked):
        return {"partition": lever.partition}
    own = set(_TOKEN.findall(req.features or ""))
    if own and not own <= set(types) | {"gpu_" + t for t in types}:
        return {}
    return {"features": lever.feature or fastest}
