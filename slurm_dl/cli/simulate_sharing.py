"""``slurm-dl simulate --placement ...``: the GPU-sharing inflation experiment on an openb
task list and fleet (slurm_dl.sim.sharing), each placement side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import typer

from ..core.errors import SlurmDLError, TraceError

MEASURE = (
    "the trace's tasks arrive, each once in a random order, then drawn at random, and never "
    "leave, until the GPUs they ask reach the fleet's; unallocated GPUs: capacity then held "
    "by no task"
)


def run_sharing(
    trace: Path, fmt: str, fleet: Path | None, placements: Sequence[str], seed: int, as_json: bool
) -> None:
    from ..sim import sharing
    from ..sim.workloads.traces import read_text

    bad = [p for p in placements if p not in sharing.PLACEMENTS]
    if bad:
        raise SlurmDLError(f"--placement: got {bad[0]!r}; allowed: {', '.join(sharing.PLACEMENTS)}")
    if fmt != "openb":
        raise SlurmDLError(
            f"--placement: needs --format openb (tasks with gpu_milli); got --format {fmt}"
        )
    if fleet is None:
        raise SlurmDLError(
            "--placement: needs --fleet FILE (the openb node list: cpu_milli, memory_mib, gpu, model)"
        )
    try:
        tasks = sharing.read_tasks(read_text(trace), str(trace))
        nodes = sharing.read_nodes(read_text(fleet), str(fleet))
    except ValueError as e:
        raise TraceError(str(e)) from None
    results = {}
    for p in dict.fromkeys(placements):
        results[p] = sharing.inflate(tasks, nodes, p, seed=seed).summary()
    gpus = sum(len(n.free) for n in nodes)
    doc = {
        "experiment": "inflation",
        "measure": MEASURE,
        "trace": str(trace),
        "fleet": str(fleet),
        "tasks_in_trace": len(tasks),
        "nodes": len(nodes),
        "gpus": gpus,
        "seed": seed,
        "placements": results,
    }
    if len(results) == 1:
        doc.update(next(iter(results.values())))
    if as_json:
        typer.echo(json.dumps(doc))
        return
    typer.echo(f"{len(tasks)} tasks, {len(nodes)} nodes, {gpus} GPUs; seed {seed}")
    typer.echo("inflation: tasks arrive until the GPUs asked reach the fleet's")
    typer.echo(
        f"{'placement':<10} {'scheduled':>9} {'unallocated':>11} {'idle':>8} {'1st fail':>8}"
    )
    for p, r in results.items():
        ff = r["first_failure_arrived_pct"]
        typer.echo(
            f"{p:<10} {100 * r['scheduled_fraction']:>8.1f}% {r['unallocated_gpus']:>11.1f} "
            f"{r['idle_gpus']:>8.1f} {'-' if ff is None else f'{ff:.1f}%':>8}"
        )
    typer.echo("unallocated: GPUs held by no task; idle: GPUs no task asked for (a whole GPU")
    typer.echo("taken by a fraction is allocated, its rest idle); 1st fail: GPUs asked when the")
    typer.echo("first task found no room, in % of the fleet's")
