"""Site configuration: one TOML file per site, validated with pydantic.

A bad file fails loudly: :class:`~slurm_dl.core.errors.ConfigError` lists every problem as
``key.path: got VALUE; allowed: …``. Unknown keys are errors too (a typo must not be ignored).

Every reader (``slurm-dl config check``, the filter service, the prioritizer, dlsubmit) goes
through :func:`parse_config` (the TOML file itself is read in the CLI layer, by
``slurm_dl.cli.config_file.load_config``; a prior or a throughput matrix it names is read while
it is validated, by ``side_files``), so they accept exactly the same files. Every number has a finite
range stated on its field: ``inf``, ``nan`` (TOML allows both), booleans and strings are refused
where a number is expected, and so are values far outside what a site could mean.

The models live by section (``site``, ``cluster``, ``job_classes``, ``filter`` for caps and the
filter, ``policy``, ``preemption``, ``prioritizer``, ``telemetry``, ``throughput``, ``sharing``,
``simulate``, ``power``, ``slurm``); :class:`SiteConfig` (``site_config``) is their root.
Every public name is importable from here.
"""

from __future__ import annotations

from .base import MAX_GPU_S, MAX_WEIGHT, MINUTES_PER_YEAR, SECONDS_PER_30_DAYS, SECONDS_PER_DAY, num
from .cluster import GpuType, NodeGroup, Partition, Switch, TopologyConfig
from .filter import Caps, FilterConfig
from .job_classes import JobClassConfig
from .policy import (
    CombinedConfig,
    ComponentName,
    DeadlineConfig,
    FairShareConfig,
    GittinsConfig,
    HistoryKeys,
    LasConfig,
    PolicyConfig,
    PolicyName,
    QssfConfig,
)
from .elastic import ElasticConfig
from .power import GpuWatts, PowerConfig
from .preemption import PreemptionConfig
from .prioritizer import PrioritizerConfig
from .problems import parse_config
from .risks import config_warnings
from .sharing import SharingConfig, SharingGroup
from .side_files import MAX_PRIOR_SAMPLES, read_matrix_csv, read_prior_csv
from .simulate import SimulateConfig
from .slurm import BackendName, SlurmConfig
from .site import SiteInfo
from .site_config import SiteConfig, cluster_only
from .telemetry import TelemetryConfig
from .throughput import ThroughputConfig

__all__ = [
    "MAX_GPU_S",
    "MAX_PRIOR_SAMPLES",
    "MAX_WEIGHT",
    "MINUTES_PER_YEAR",
    "SECONDS_PER_30_DAYS",
    "SECONDS_PER_DAY",
    "Caps",
    "CombinedConfig",
    "ComponentName",
    "DeadlineConfig",
    "FairShareConfig",
    "FilterConfig",
    "GittinsConfig",
    "GpuType",
    "HistoryKeys",
    "JobClassConfig",
    "LasConfig",
    "NodeGroup",
    "Partition",
    "PolicyConfig",
    "PolicyName",
    "PowerConfig",
    "ElasticConfig",
    "GpuWatts",
    "PreemptionConfig",
    "PrioritizerConfig",
    "QssfConfig",
    "SharingConfig",
    "SharingGroup",
    "SimulateConfig",
    "SiteConfig",
    "SlurmConfig",
    "BackendName",
    "cluster_only",
    "SiteInfo",
    "Switch",
    "TelemetryConfig",
    "ThroughputConfig",
    "TopologyConfig",
    "config_warnings",
    "num",
    "parse_config",
    "read_matrix_csv",
    "read_prior_csv",
]
