"""``slurm-dl gpu-agent``: sample this node's GPUs through NVML and publish per-job figures."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from .config_file import load_config
from ..core.errors import SlurmError, SlurmNotInstalledError
from .daemon_opts import LogFormatOpt, LogLevelOpt, setup_logging
from .config_file import ConfigOrBuiltinOpt, find_config
from .common import expected_errors
from ..telemetry.agent import DEFAULT_OUTPUT_DIR

HELP = (
    "Sample this node's GPUs through NVML (utilisation, memory, power, processes), attribute each GPU to "
    "the Slurm job holding it and write Prometheus text to OUTPUT_DIR/<node>.prom. Without GPUs or NVML "
    "it says so and exits 0 (or idles with --idle-without-gpus).\n\n"
    "\b\nExample:\n  slurm-dl gpu-agent --once --json --output-dir /tmp/agent"
)


def gpu_agent(
    once: bool = typer.Option(False, "--once", help="take one sample and exit"),
    interval: Optional[float] = typer.Option(
        None,
        "--interval",
        help="seconds between samples (default: [telemetry] sample_seconds of the site config)",
    ),
    output_dir: Path = typer.Option(
        DEFAULT_OUTPUT_DIR, "--output-dir", help="the directory the agent writes <node>.prom to"
    ),
    node: Optional[str] = typer.Option(
        None, "--node", help="Slurm node name (default: SLURMD_NODENAME or hostname)"
    ),
    config: Optional[Path] = ConfigOrBuiltinOpt,
    idle_without_gpus: bool = typer.Option(
        False,
        "--idle-without-gpus",
        help="without GPUs/NVML, sleep instead of exiting (for a unit on mixed nodes)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print each sample as JSON"),
    replay: Optional[Path] = typer.Option(
        None,
        "--replay",
        metavar="FILE",
        help="read recorded GPU readings (JSON) instead of NVML: a testbed or a demo without GPUs",
    ),
    log_level: str = LogLevelOpt,
    log_format: str = LogFormatOpt,
) -> None:
    from ..slurm import CliBackend
    from ..slurm.node_alloc import NodeAllocations
    from ..telemetry.agent import node_name, pid_jobs, sample_once, share_rules
    from ..telemetry.nvml import NvmlUnavailableError, load_nvml

    setup_logging("slurm-dl-gpu-agent", log_level, log_format)
    say = typer.echo if once else logging.getLogger("slurm_dl.gpu_agent").info  # a daemon logs
    with expected_errors():
        found = find_config(config)
        site = load_config(found) if found else None
        telemetry = site.telemetry if site else None
        period = (
            interval if interval is not None else (telemetry.sample_seconds if telemetry else 30.0)
        )
        idle_percent = telemetry.idle_util_percent if telemetry else 2.0
        name = node or node_name()
        shares = share_rules(site, name)
        try:
            if replay is not None:
                from ..telemetry.recorded import RecordedNvml

                nvml = RecordedNvml.from_file(replay)
            else:
                nvml = load_nvml()
            count = nvml.nvmlDeviceGetCount()
        except NvmlUnavailableError as e:
            _no_gpus(
                f"gpu-agent: {name}: {e}; no GPUs to sample, exiting", once, idle_without_gpus, say
            )
            return
        if count == 0:
            _no_gpus(
                f"gpu-agent: {name}: no GPUs (NVML sees 0 devices); nothing to sample, exiting",
                once,
                idle_without_gpus,
                say,
            )
            return
        backend = CliBackend()
        allocations = NodeAllocations(backend.gpu_allocations)  # no full queue read per sample
        said_local_error = False
        while True:
            try:
                result = sample_once(
                    nvml,
                    name,
                    allocations,
                    output_dir,
                    idle_util_percent=idle_percent,
                    shares=shares,
                    jobs_of_pids=lambda pids: pid_jobs(pids, slurm_pids=allocations.pids),
                )
            except SlurmError as e:
                if once or isinstance(e, SlurmNotInstalledError):
                    raise
                # slurmctld restarting, or briefly unreachable: keep the last file (an idle
                # clock must not restart because one lookup failed) and try again next time
                logging.getLogger("slurm_dl.gpu_agent").warning(
                    "gpu-agent: %s: cannot read Slurm's GPU allocations (%s); sample skipped, "
                    "next in %g s",
                    name,
                    e,
                    period,
                )
                time.sleep(period)
                continue
            if allocations.local_error and not said_local_error:
                said_local_error = True
                logging.getLogger("slurm_dl.gpu_agent").warning(
                    "gpu-agent: %s: `scontrol listpids` failed (%s); reading the whole queue from "
                    "slurmctld each sample instead (run the agent as root on the node)",
                    name,
                    allocations.local_error,
                )
            if as_json:
                typer.echo(
                    json.dumps(
                        {
                            "node": result.node,
                            "gpus": result.gpus,
                            "written": str(result.written),
                            "samples": [asdict(s) for s in result.samples],
                            "jobs": {str(k): asdict(v) for k, v in result.jobs.items()},
                        }
                    )
                )
            else:
                busy = ", ".join(
                    f"job {j}: {u.gpus} GPU(s) {u.mean_util_percent:.0f}%"
                    + (
                        " OVER its share's memory"
                        if u.share_bytes is not None and u.mem_used_bytes > u.share_bytes
                        else ""
                    )
                    for j, u in result.jobs.items()
                )
                say(
                    f"gpu-agent: {name}: {result.gpus} GPU(s) sampled -> {result.written}"
                    f"{'; ' + busy if busy else '; no Slurm job holds a GPU'}"
                )
            if once:
                return
            time.sleep(period)


def _no_gpus(message: str, once: bool, idle: bool, say=typer.echo) -> None:
    say(message)
    if idle and not once:
        while True:  # a unit on a CPU node stays up without restarting in a loop
            time.sleep(3600)
