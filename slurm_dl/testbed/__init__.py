"""A real local Slurm test cluster: one slurmctld and N slurmd on 127.0.0.1 with fake GPUs.

    tb = Testbed(Path(state_dir), nodes=4, gpus_per_node=8, gpu_type="h100")
    tb.up(); env = tb.env(); ...; tb.down()
    mixed = Testbed(Path(other_dir), gpus="h100:2x8,v100:2x8")   # several GPU types

Modules: ``shape`` (pure: node groups of one GPU type each, and how a mixed testbed is laid out),
``conf`` (pure: parameters -> slurm.conf/gres.conf/topology.conf text), ``site_shape`` (pure: a
mixed testbed's site config), ``process``
(start/stop by pid, marker-checked), ``install`` (finding Slurm), ``client`` (node states and
submit-and-wait helpers), ``services`` (slurm-dl's filter service and prioritizer beside the
cluster), ``cluster`` (the ``Testbed`` itself).
"""

from .client import job_fields, submit, wait_for_job_state
from .cluster import Testbed, TestbedStatus
from .conf import ClusterParams, TestbedLayout
from .shape import GpuGroup, parse_gpus

__all__ = [
    "ClusterParams",
    "GpuGroup",
    "Testbed",
    "TestbedLayout",
    "TestbedStatus",
    "job_fields",
    "parse_gpus",
    "submit",
    "wait_for_job_state",
]
