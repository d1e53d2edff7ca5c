"""``[power]``: powering idle GPU nodes down ahead of demand, and the node power model the
what-if counts energy with."""

from __future__ import annotations

from pydantic import Field, model_validator

from .base import SECONDS_PER_DAY, Strict, num

GPU_BUSY_WATTS = 300.0  # one GPU running a job, where the site names no draw
GPU_IDLE_WATTS = 60.0  # one powered idle GPU, likewise


def _below_idle(busy_key: str, busy: float, idle_key: str, idle: float) -> list[str]:
    """A busy draw under the idle one is a typo: name it."""
    if busy < idle:
        return [f"{busy_key}: got {busy:g}; allowed: at least {idle_key} ({idle:g})"]
    return []


class GpuWatts(Strict):
    """The draw of one GPU of a type, busy and idle."""

    busy_watts: float = num(
        GPU_BUSY_WATTS, ge=0, le=10_000, description="one GPU running a job, in W"
    )
    idle_watts: float = num(
        GPU_IDLE_WATTS, ge=0, le=10_000, description="one powered idle GPU, in W"
    )

    @model_validator(mode="after")
    def _busy_at_least_idle(self) -> "GpuWatts":
        problems = _below_idle("busy_watts", self.busy_watts, "idle_watts", self.idle_watts)
        if problems:
            raise ValueError(problems[0])
        return self


class PowerConfig(Strict):
    """Keep powered only the GPU nodes the forecast demand needs, plus a buffer."""

    enabled: bool = Field(
        default=False,
        description="power idle GPU nodes down ahead of demand (through Slurm's power "
        "saving); off: every node stays powered",
    )
    step_minutes: int = num(
        10, ge=1, le=24 * 60, description="how often the planner decides, in minutes"
    )
    buffer_nodes: int = num(
        2,
        ge=0,
        le=100_000,
        description="spare powered nodes per node group on top of the forecast demand",
    )
    buffer_fraction: float = num(
        0.03,
        ge=0,
        le=1,
        description="more spare nodes where a group is large: this fraction of its nodes, "
        "if that is more than buffer_nodes",
    )
    min_powered_nodes: int = num(
        1,
        ge=0,
        le=100_000,
        description="never fewer powered nodes than this in a node group",
    )
    max_cycles_per_node_per_day: int = num(
        2,
        ge=0,
        le=1000,
        description="power cycles (down, then up) a node may make per day; a node that has "
        "made them stays powered until the next day (0: never power down)",
    )
    forecast_hours: float = num(
        8.0,
        gt=0,
        le=7 * 24,
        description="how far ahead the forecast looks, in hours; a node group is powered "
        "down at most once in this time",
    )
    forecast_quantile: float = num(
        0.8,
        gt=0,
        le=1,
        description="how sure the forecast is to cover the demand's peak in its look-ahead "
        "(a quantile of the rises seen in the history: higher keeps more powered)",
    )
    # --- the node power model (the what-if's energy accounting) ---------------------------
    gpu_busy_watts: float = num(
        GPU_BUSY_WATTS,
        ge=0,
        le=10_000,
        description="one GPU running a job, in W (types not named)",
    )
    gpu_idle_watts: float = num(
        GPU_IDLE_WATTS,
        ge=0,
        le=10_000,
        description="one powered idle GPU, in W (types not named)",
    )
    gpu_types: dict[str, GpuWatts] = Field(
        default_factory=dict,
        max_length=1000,
        description="per GPU type (a gpu_types name): its busy and idle watts",
    )
    node_busy_watts: float = num(
        400.0,
        ge=0,
        le=100_000,
        description="a node's draw beside its GPUs (CPUs, memory, fans) while it runs a job, in W",
    )
    node_idle_watts: float = num(
        200.0,
        ge=0,
        le=100_000,
        description="a powered idle node's draw beside its GPUs, in W",
    )
    off_watts: float = num(
        15.0,
        ge=0,
        le=100_000,
        description="a powered-down node's draw (its BMC), in W",
    )
    boot_seconds: float = num(
        300.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="from power-up to a node that takes jobs, in seconds",
    )
    shutdown_seconds: float = num(
        60.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="from power-down to a node that draws off_watts, in seconds",
    )

    @model_validator(mode="after")
    def _busy_at_least_idle(self) -> "PowerConfig":
        problems = _below_idle(
            "gpu_busy_watts", self.gpu_busy_watts, "gpu_idle_watts", self.gpu_idle_watts
        ) + _below_idle(
            "node_busy_watts", self.node_busy_watts, "node_idle_watts", self.node_idle_watts
        )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def gpu_watts(self, gpu_type: str) -> GpuWatts:
        """The busy and idle draw of one GPU of ``gpu_type`` (the defaults where unnamed)."""
        named = self.gpu_types.get(gpu_type)
        if named is not None:
            return named
        return GpuWatts(busy_watts=self.gpu_busy_watts, idle_watts=self.gpu_idle_watts)

    def buffer_for(self, group_nodes: int) -> int:
        """Spare powered nodes for a node group of ``group_nodes`` nodes."""
        return max(self.buffer_nodes, int(self.buffer_fraction * group_nodes + 0.5))

    @property
    def step_seconds(self) -> int:
        return self.step_minutes * 60

    @property
    def forecast_steps(self) -> int:
        """The look-ahead in planner steps (at least one)."""
        return max(1, round(self.forecast_hours * 60 / self.step_minutes))
