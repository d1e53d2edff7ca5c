"""Does the site config describe the cluster? Its node groups, GPU types and counts, CPUs,
memory, partitions and time limits against slurm.conf's ``NodeName`` / ``PartitionName`` lines
and gres.conf. Pure: text in, one :class:`Difference` per mismatch out, each with its fix.

Read as Slurm reads them: ``Key=Value`` words, case-insensitive keys, ``NodeName=DEFAULT`` and
``PartitionName=DEFAULT`` lines set defaults for the lines after them, ``Nodes=ALL``, hostlist
expressions (``gpu[01-04]``), ``Gres=gpu:TYPE:COUNT`` (several gres comma-separated), gres.conf
``Type=`` and ``File=``/``Count=`` for a node whose slurm.conf line names no type. Memory: the
site config's ``memory_gb`` is GiB (``RealMemory`` / 1024).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from .hostlist import compress_hostlist, expand_hostlist
from .model import Node, Partition
from .units import time_seconds

if TYPE_CHECKING:
    from .config import SiteConfig

_UNLIMITED = ("UNLIMITED", "INFINITE", "N/A")


@dataclass(frozen=True)
class Difference:
    what: str  # the site config's item, or slurm.conf's
    detail: str
    fix: str

    def line(self) -> str:
        return f"{self.what}: {self.detail}"


@dataclass
class SlurmNode:
    name: str
    cpus: int | None = None
    memory_mb: int | None = None
    gpus: int = 0
    gpu_type: str | None = None  # None: untyped gres
    partitions: list[str] = field(default_factory=list)


@dataclass
class SlurmPartition:
    name: str
    nodes: list[str]
    default: bool = False
    max_time_minutes: int | None = None  # None: no limit


@dataclass
class SlurmCluster:
    nodes: dict[str, SlurmNode]
    partitions: dict[str, SlurmPartition]


def _words(line: str) -> dict[str, str]:
    try:
        parts = shlex.split(line, comments=False, posix=True)
    except ValueError:
        parts = line.split()
    out: dict[str, str] = {}
    for p in parts:
        if "=" in p:
            k, v = p.split("=", 1)
            out[k.lower()] = v
    return out


def _lines(text: str) -> list[str]:
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    return out


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    m = re.match(r"^\d+", v.strip())
    return int(m.group(0)) if m else None


def _gres_gpu(value: str) -> tuple[int, str | None]:
    """``gpu:h100:8,shard:2`` -> (8, 'h100'); several typed gpu entries: their sum, the first type."""
    count, gtype = 0, None
    for item in value.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0].strip().lower() != "gpu":
            continue
        if len(parts) == 1:
            count += 1
        elif len(parts) == 2:
            n = _int(parts[1])
            if n is None:
                gtype, count = gtype or parts[1], count + 1
            else:
                count += n
        else:
            gtype = gtype or parts[1]
            count += _int(parts[2]) or 0
    return count, gtype


def _max_time_minutes(value: str | None) -> int | None:
    if value is None or value.strip().upper() in _UNLIMITED:
        return None
    s = time_seconds(value)
    return None if s is None else s // 60


def parse_slurm_cluster(slurm_conf: str, gres_conf: str = "") -> SlurmCluster:
    nodes: dict[str, SlurmNode] = {}
    parts: dict[str, SlurmPartition] = {}
    node_default: dict[str, str] = {}
    part_default: dict[str, str] = {}
    for line in _lines(slurm_conf):
        w = _words(line)
        if "nodename" in w:
            if w["nodename"].upper() == "DEFAULT":
                node_default.update({k: v for k, v in w.items() if k != "nodename"})
                continue
            merged = {**node_default, **w}
            gpus, gtype = _gres_gpu(merged.get("gres", ""))
            mem = _int(merged.get("realmemory"))
            for name in expand_hostlist(w["nodename"]):
                nodes[name] = SlurmNode(
                    name,
                    cpus=_int(merged.get("cpus") or merged.get("procs")),
                    memory_mb=mem,
                    gpus=gpus,
                    gpu_type=gtype,
                )
        elif "partitionname" in w:
            if w["partitionname"].upper() == "DEFAULT":
                part_default.update({k: v for k, v in w.items() if k != "partitionname"})
                continue
            merged = {**part_default, **w}
            spec = merged.get("nodes", "")
            members = (
                list(nodes) if spec.upper() == "ALL" else (expand_hostlist(spec) if spec else [])
            )
            parts[w["partitionname"]] = SlurmPartition(
                w["partitionname"],
                members,
                default=merged.get("default", "").upper() == "YES",
                max_time_minutes=_max_time_minutes(merged.get("maxtime")),
            )
    for p in parts.values():
        for n in p.nodes:
            if n in nodes:
                nodes[n].partitions.append(p.name)
    _apply_gres_conf(nodes, gres_conf)
    return SlurmCluster(nodes, parts)


def cluster_of(nodes: Sequence[Node], partitions: Sequence[Partition]) -> SlurmCluster:
    """The live cluster as slurmctld sees it, from the backend's own nodes and partitions."""
    out = {
        n.name: SlurmNode(
            n.name,
            cpus=n.cpus or None,
            memory_mb=n.memory_mb or None,
            gpus=n.gpus,
            gpu_type=n.gpu_type,
            partitions=list(n.partitions),
        )
        for n in nodes
    }
    parts = {
        p.name: SlurmPartition(
            p.name,
            list(p.nodes),
            default=p.default,
            max_time_minutes=None if p.max_time_s is None else int(p.max_time_s // 60),
        )
        for p in partitions
    }
    for p in parts.values():  # a node's partitions as the partitions list them, too
        for name in p.nodes:
            if name in out and p.name not in out[name].partitions:
                out[name].partitions.append(p.name)
    return SlurmCluster(out, parts)


def _apply_gres_conf(nodes: dict[str, SlurmNode], text: str) -> None:
    """gres.conf's ``Type=`` for nodes whose slurm.conf ``Gres=`` names none."""
    for line in _lines(text):
        w = _words(line)
        if w.get("name", "").lower() != "gpu" or "type" not in w:
            continue
        names = expand_hostlist(w["nodename"]) if "nodename" in w else list(nodes)
        for n in names:
            if n in nodes and nodes[n].gpu_type is None and nodes[n].gpus:
                nodes[n].gpu_type = w["type"]


def compare(
    cfg: "SiteConfig", cluster: SlurmCluster, source: str = "slurm.conf"
) -> list[Difference]:
    """Every way the site config and Slurm's config disagree, each with its fix. ``source``: what
    the cluster was read from, as the messages name it (``slurm.conf``, ``sinfo``)."""
    out: list[Difference] = []
    add = out.append
    described: set[str] = set()
    for g in cfg.node_groups:
        names = expand_hostlist(g.nodes)
        described.update(names)
        what = f"node group {g.name!r}"
        missing = [n for n in names if n not in cluster.nodes]
        if missing:
            add(
                Difference(
                    what,
                    f"nodes {compress_hostlist(missing)} are not in {source}",
                    'set nodes = "..." to slurm.conf\'s NodeName hosts, or remove the group',
                )
            )
        present = [cluster.nodes[n] for n in names if n in cluster.nodes]
        for attr, label, want, fix_key in (
            ("gpus", "GPUs per node", g.gpus_per_node, "gpus_per_node"),
            ("gpu_type", "GPU type", g.gpu_type, "gpu_type"),
            ("cpus", "CPUs", g.cpus, "cpus"),
        ):
            odd = [n for n in present if getattr(n, attr) is not None and getattr(n, attr) != want]
            for value in sorted({getattr(n, attr) for n in odd}, key=str):
                hosts = compress_hostlist([n.name for n in odd if getattr(n, attr) == value])
                shown = f'"{value}"' if isinstance(value, str) else value
                add(
                    Difference(
                        what,
                        f"{label} {want} here, {value} in {source} ({hosts})",
                        f"set {fix_key} = {shown} (or fix slurm.conf's NodeName line)",
                    )
                )
        untyped = [n.name for n in present if n.gpus and n.gpu_type is None]
        if untyped:
            add(
                Difference(
                    what,
                    f"{source} gives no GPU type for {compress_hostlist(untyped)}, "
                    f"so a job asking for {g.gpu_type} cannot be placed by type",
                    f"Gres=gpu:{g.gpu_type}:{g.gpus_per_node} on the NodeName line (and Type= in gres.conf)",
                )
            )
        for mem in sorted({n.memory_mb for n in present if n.memory_mb is not None}):
            gib = mem / 1024
            if abs(gib - g.memory_gb) > max(1.0, 0.01 * g.memory_gb):
                hosts = compress_hostlist([n.name for n in present if n.memory_mb == mem])
                add(
                    Difference(
                        what,
                        f"memory {g.memory_gb:g} GB here, {mem} MB ({gib:g} GB) in "
                        f"{source} ({hosts})",
                        f"set memory_gb = {int(gib)}",
                    )
                )
        for pname in g.partitions:
            p = cluster.partitions.get(pname)
            if p is None:
                continue  # named below, once per partition
            outside = [n.name for n in present if n.name not in p.nodes]
            if outside:
                add(
                    Difference(
                        what,
                        f"in partition {pname!r} here, but {pname} in {source} does not hold "
                        f"{compress_hostlist(outside)}",
                        f"remove {pname!r} from the group's partitions, or add the nodes to "
                        f"PartitionName={pname}",
                    )
                )
    unknown = sorted(
        (n for n in cluster.nodes.values() if n.gpus and n.name not in described),
        key=lambda n: n.name,
    )
    shapes: dict[tuple[int, str | None], list[str]] = {}
    for n in unknown:
        shapes.setdefault((n.gpus, n.gpu_type), []).append(n.name)
    for (gpus, gtype), names in shapes.items():
        add(
            Difference(
                source,
                f"GPU nodes {compress_hostlist(names)} ({gpus} x {gtype or 'untyped'} each) "
                "are in no node group: jobs there are not ranked as they run",
                f'add a [[node_groups]] with nodes = "{compress_hostlist(names)}", '
                f'gpus_per_node = {gpus}, gpu_type = "{gtype or "NAME"}"',
            )
        )
    slurm_types = sorted({n.gpu_type for n in cluster.nodes.values() if n.gpu_type})
    for t in cfg.gpu_types:
        if slurm_types and t.name not in slurm_types:
            add(
                Difference(
                    f"GPU type {t.name!r}",
                    f"no node in {source} has it (its types: {', '.join(slurm_types)})",
                    "name the types as slurm.conf's Gres=gpu:TYPE:N does, or remove the entry",
                )
            )
    slurm_gpus = sum(n.gpus for n in cluster.nodes.values())
    if slurm_gpus != cfg.total_gpus:
        add(
            Difference(
                "GPUs in all",
                f"{cfg.total_gpus} here, {slurm_gpus} in {source}",
                "make the node groups describe slurm.conf's GPU nodes (see above)",
            )
        )
    for p in cfg.partitions:
        what = f"partition {p.name!r}"
        sp = cluster.partitions.get(p.name)
        if sp is None:
            have = ", ".join(sorted(cluster.partitions)) or "none"
            add(
                Difference(
                    what,
                    f"not in {source} (it has: {have})",
                    "rename it to a slurm.conf partition, or add PartitionName=" + p.name,
                )
            )
            continue
        if p.default != sp.default and (p.default or sp.default):
            add(
                Difference(
                    what,
                    f"default = {str(p.default).lower()} here, Default={'YES' if sp.default else 'NO'} "
                    f"in {source}",
                    f"set default = {str(sp.default).lower()}",
                )
            )
        if p.max_time_minutes is None and sp.max_time_minutes is not None:
            add(
                Difference(
                    what,
                    f"no time limit here, MaxTime is {sp.max_time_minutes} min in {source}: "
                    "longer jobs the filter admits wait forever",
                    f"set max_time_minutes = {sp.max_time_minutes}",
                )
            )
        elif (
            p.max_time_minutes is not None
            and sp.max_time_minutes is not None
            and p.max_time_minutes > sp.max_time_minutes
        ):
            add(
                Difference(
                    what,
                    f"max_time_minutes = {p.max_time_minutes} here, MaxTime is "
                    f"{sp.max_time_minutes} min in {source}: jobs the filter admits wait forever",
                    f"set max_time_minutes = {sp.max_time_minutes}",
                )
            )
    return out
