"""reshape: a per-job GPU count becomes nodes × GPUs per node with the fewest nodes.

``--gpus=16`` on 8-GPU nodes becomes ``-N2 --gpus-per-node=8``; a multi-node job also gets
``--switches=K@T`` with the fewest leaf switches that can hold it when the site has a topology
(none when it needs every leaf; see :mod:`.topology`). A count that
has no even split over the fewest nodes (13 GPUs on 8-GPU nodes) is left for Slurm to spread
and tagged ``shape=spread``.
"""

from __future__ import annotations


from ..config import SiteConfig
from ..packing import request_shape
from .decision import Draft, FilterContext
from .request import JobRequest, parse_gpu_tres
from ..site_shape import site_shape
from .topology import switch_changes


def fewest_nodes_shape(
    gpus: int, gpus_per_node: int, nodes_available: int
) -> tuple[int, int] | None:
    """``(nodes, gpus_per_node)`` for the fewest nodes with an even split, or None if none fits.

    The shape comes from the packing code (:func:`slurm_dl.core.packing.request_shape`), so the filter,
    the prioritizer and the simulator agree on what "fewest nodes" means.
    """
    if gpus <= 0 or gpus_per_node <= 0 or -(-gpus // gpus_per_node) > nodes_available:
        return None  # (checked first: request_shape lists one part per node)
    shape = request_shape(gpus, gpus_per_node)
    if shape.gpus_per_node is None or shape.num_nodes > nodes_available:
        return None
    return shape.num_nodes, shape.gpus_per_node


def _nodes_of_type(config: SiteConfig, gpu_type: str | None) -> tuple[int, int]:
    """(GPUs per node, node count) of the widest nodes of the type (any type when untyped)."""
    return site_shape(config).nodes_with_most_gpus.get(gpu_type, (0, 0))


def shape_text(nodes: int, per_node: int) -> str:
    """The tag's shape for nodes × GPUs per node (``any`` without GPUs, ``spread`` if out of range)."""
    if per_node <= 0:
        return "any"
    return f"{nodes}x{per_node}" if 1 <= nodes <= 9999 and per_node <= 999 else "spread"


def _gres(gpu_type: str | None, count: int, prefix: str = "gres:") -> str:
    return f"{prefix}gpu:{gpu_type}:{count}" if gpu_type else f"{prefix}gpu:{count}"


def _gres_prefix(req: JobRequest) -> str:
    """How this Slurm spells a GRES in a job's TRES strings: 22.05 ``gres:gpu:2``, 23.02 and later
    ``gres/gpu:2`` (which alone they accept back). Written in the style the job came with."""
    texts = (req.tres_per_job, req.tres_per_node, req.tres_per_socket, req.tres_per_task)
    return "gres/" if any(t and "gres/" in t for t in texts) else "gres:"


def reshape(
    req: JobRequest, draft: Draft, config: SiteConfig, ctx: FilterContext | None = None
) -> Draft:
    def switches(nodes: int, per_node: int, gpu_type: str | None) -> dict[str, int]:
        return switch_changes(nodes, per_node, gpu_type, req.req_switch is not None, config, ctx)

    job_asks, job_others = parse_gpu_tres(req.tres_per_job)
    node_asks, node_others = parse_gpu_tres(req.tres_per_node)
    changes = dict(draft.changes)
    notices = list(draft.notices)
    if req.gpus_per_task or req.gpus_per_socket:  # GPUs bound to tasks or sockets: kept as asked
        nodes, per_node = req.nodes, req.gpus_on_one_node or 0
        fixed = req.min_nodes is not None and req.max_nodes in (None, req.min_nodes)
        exact = fixed and per_node * nodes == req.total_gpus
        changes.update(switches(nodes, per_node if exact else 1, req.gpu_type))
        return draft.evolve(
            changes=changes,
            shape=shape_text(nodes, per_node) if exact else "spread",
            gpus=req.total_gpus,
        )
    if node_asks:  # the user fixed the shape already
        nodes = req.nodes
        per_node = sum(a.count for a in node_asks)
        changes.update(switches(nodes, per_node, req.gpu_type))
        return draft.evolve(changes=changes, shape=shape_text(nodes, per_node), gpus=req.total_gpus)
    if (
        len(job_asks) != 1
        or job_asks[0].count == 0
        or req.min_nodes not in (None, 1)
        or req.max_nodes not in (None, 1)
    ):
        shape = "any" if not req.total_gpus else "spread"
        return draft.evolve(shape=shape, gpus=req.total_gpus)
    ask = job_asks[0]
    per_node_max, node_count = _nodes_of_type(config, ask.gpu_type)
    found = fewest_nodes_shape(ask.count, per_node_max, node_count)
    if found is None:
        notices.append(
            f"slurm-dl: {ask.count} GPUs do not split evenly over the fewest {per_node_max}-GPU nodes; "
            "Slurm will spread the job (tagged shape=spread)"
        )
        return draft.evolve(notices=tuple(notices), shape="spread", gpus=ask.count)
    nodes, per_node = found
    changes["tres_per_node"] = ",".join(
        [_gres(ask.gpu_type, per_node, _gres_prefix(req)), *node_others]
    )
    changes["tres_per_job"] = ",".join(job_others)
    changes["min_nodes"] = nodes
    changes["max_nodes"] = nodes
    changes.update(switches(nodes, per_node, ask.gpu_type))
    return draft.evolve(changes=changes, shape=f"{nodes}x{per_node}", gpus=ask.count)
