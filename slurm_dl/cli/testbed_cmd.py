"""``slurm-dl testbed up|down|status|env --dir DIR``: the local GPU test cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from ..testbed import Testbed, services
from ..testbed.conf import render_env_exports
from ..testbed.shape import MAX_NODES, describe, parse_gpus
from .common import expected_errors, fail

app = typer.Typer(
    help="""A real local Slurm test cluster with fake GPUs.

    \b
    Example:
      slurm-dl testbed up --dir /tmp/tb
      eval "$(slurm-dl testbed env --dir /tmp/tb)"
      slurm-dl testbed down --dir /tmp/tb
    """,
    no_args_is_help=True,
)

# site-configs/ of a source checkout (an editable install); absent from a wheel.
_TESTBED_TOML = Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml"

DirOption = typer.Option(
    Path(".testbed"), "--dir", help="state directory (conf, logs, spool, pids, devices)"
)


@app.command("up")
def up(
    dir: Path = DirOption,
    nodes: Optional[int] = typer.Option(
        None, "--nodes", min=1, max=MAX_NODES, help="number of slurmd nodes [default: 4]"
    ),
    gpus_per_node: Optional[int] = typer.Option(
        None, "--gpus-per-node", min=0, max=64, help="fake GPUs per node [default: 8]"
    ),
    gpu_type: Optional[str] = typer.Option(
        None, "--gpu-type", help="GPU type name in Gres (gpu:TYPE:N) [default: h100]"
    ),
    gpus: Optional[str] = typer.Option(
        None,
        "--gpus",
        help="instead of the options --nodes, --gpu-type and --gpus-per-node: node groups of "
        "several GPU "
        "types, e.g. h100:2x8,v100:2x8 (TYPE:NODESxGPUS, separated by commas), with typed GRES, "
        "a feature and a partition per type, and the default partition gpu over all nodes",
    ),
    accounting: bool = typer.Option(
        False,
        "--accounting",
        help="add slurmdbd with a private MariaDB (sacct, sshare, fair-share)",
    ),
    site_config: Optional[Path] = typer.Option(
        None,
        "--site-config",
        help="slurm-dl config to copy to DIR/site.toml with its database in DIR "
        "(default: this checkout's site-configs/testbed.toml, with the GPU types, partitions and "
        "node groups of --gpus; written once unless given or the GPU types change)",
    ),
    slurm: str = typer.Option(
        None,
        "--slurm",
        help="Slurm release: 22.05 (this machine's), 24.11 or 26.05 "
        "(run from a Debian root built once); default: the directory's last, else 22.05",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the status as JSON"),
    shard_nodes: int = typer.Option(
        0,
        "--shard-nodes",
        min=0,
        help="with --shards-per-gpu: the first N nodes also offer their GPUs as Slurm "
        "shards (GPU sharing)",
    ),
    shards_per_gpu: int = typer.Option(
        0, "--shards-per-gpu", min=0, help="shards each GPU of a shard node offers (1 to 128)"
    ),
    power_save: bool = typer.Option(
        False,
        "--power-save",
        help="turn on Slurm's power saving: an idle node is powered down (its slurmd "
        "stopped) and powered up again (slurmd started) when a job needs it",
    ),
) -> None:
    """Start slurmctld and the slurmd nodes (idempotent) and wait until every node is idle.

    \b
    Examples:
      slurm-dl testbed up --dir /tmp/tb --nodes 2 --gpus-per-node 4
      slurm-dl testbed up --dir /tmp/mixed --gpus h100:2x8,v100:2x8
      slurm-dl testbed up --dir /tmp/ps --power-save
    """
    with expected_errors():
        groups = None
        if gpus is not None:
            if (nodes, gpus_per_node, gpu_type) != (None, None, None):
                raise fail(
                    "--gpus gives the whole shape: leave out --nodes, --gpus-per-node and --gpu-type"
                )
            try:
                groups = parse_gpus(gpus)
            except ValueError as e:
                raise fail(f"--gpus: {e}") from None
        tb = Testbed(
            dir,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            gpu_type=gpu_type,
            gpus=groups,
            accounting=accounting,
            slurm=slurm,
            shard_nodes=shard_nodes,
            shards_per_gpu=shards_per_gpu,
            power_save=power_save,
        )
        t0 = time.monotonic()
        status = tb.up()
        took = time.monotonic() - t0
        template = site_config or (_TESTBED_TOML if _TESTBED_TOML.is_file() else None)
        if template is not None:
            tb.write_site_config(
                template,
                replace=site_config is not None or tb.reshaped,
                own_shape=site_config is None,
            )
    recovery = tb.recovery.to_dict() if tb.recovery else None
    if as_json:
        typer.echo(
            json.dumps({**status.to_dict(), "seconds": round(took, 3), "recovered": recovery})
        )
        return
    if tb.recovery is not None:
        typer.echo(tb.recovery.message())
    typer.echo(
        f"testbed up in {took:.1f} s: Slurm {status.slurm}, {describe(tb.groups)} "
        f"{'with accounting (slurmdbd + MariaDB) ' if accounting else ''}under {tb.state_dir}"
    )
    typer.echo(
        f"use it:  eval \"$(slurm-dl testbed env --dir {dir})\"; sinfo; sbatch --gpus=2 --wrap 'echo $CUDA_VISIBLE_DEVICES'"
    )
    typer.echo(f"stop it: slurm-dl testbed down --dir {dir}")


@app.command("down")
def down(dir: Path = DirOption, as_json: bool = typer.Option(False, "--json")) -> None:
    """Stop every process started for DIR (daemons, job steps), also after a crash.

    \b
    Example:
      slurm-dl testbed down --dir /tmp/tb
    """
    with expected_errors():
        tb = Testbed(dir)
        running = (
            {n: p for n, p in services.find(tb.state_dir).items() if p}
            if tb.state_dir.is_dir()
            else {}
        )
        stopped = tb.down()
    gone = {n: p for n, p in running.items() if p in stopped}
    if as_json:
        typer.echo(
            json.dumps(
                {"state_dir": str(tb.state_dir), "stopped_pids": stopped, "stopped_services": gone}
            )
        )
    else:
        also = f", among them {services.describe(gone)}" if gone else ""
        typer.echo(f"testbed {tb.state_dir}: stopped {len(stopped)} process(es){also}")


@app.command("status")
def status(dir: Path = DirOption, as_json: bool = typer.Option(False, "--json")) -> None:
    """Which daemons run and what state slurmctld reports for each node. Exit 1 when not up.

    \b
    Example:
      slurm-dl testbed status --dir /tmp/tb
    """
    with expected_errors():
        st = Testbed(dir).status()
    if as_json:
        typer.echo(json.dumps(st.to_dict()))
    else:
        if not st.daemons:
            typer.echo(f"testbed {st.state_dir}: never started")
        else:
            typer.echo(f"{'slurm':<16} {st.slurm}")
            typer.echo(f"{'gpus':<16} {st.gpus}")
        for name, pid in st.daemons.items():
            off = "powered down" if name in st.powered_off else "not running"
            typer.echo(f"{name:<16} {'running pid ' + str(pid) if pid else off}")
        for node, state in st.nodes.items():
            typer.echo(f"node {node:<11} {state}")
        for name, pid in st.services.items():
            label = services.SERVICES[name][0]
            typer.echo(f"{label:<16} {'running pid ' + str(pid) if pid else 'not running'}")
    if not st.up:
        raise typer.Exit(1)


@app.command("env")
def env(dir: Path = DirOption) -> None:
    """Print the export lines (SLURM_CONF, SLURM_DL_CONFIG, and PATH for another release's
    clients) that point Slurm's commands and slurm-dl at the testbed.

    \b
    Example:
      eval "$(slurm-dl testbed env --dir /tmp/tb)"
    """
    with expected_errors():
        tb = Testbed(dir)
        if not tb.slurm_conf.exists():
            raise fail(
                f"no testbed at {tb.state_dir} (run `slurm-dl testbed up --dir {dir}` first)"
            )
    typer.echo(render_env_exports(tb.exports()), nl=False)
