"""The options ``slurm-dl simulate`` and ``slurm-dl tune`` share, declared once.

Where the two commands differ in what an option defaults to (the preemption cost without a
site config; ``tune`` takes no ``[simulate]`` defaults for ``--via-slurm``; ``tune``'s
``--trials`` search batches by ``--jobs``), the declaration takes the command's own words for
it. ``--policy`` (repeatable in ``simulate``, one in ``tune``), ``--config`` (``simulate``
compares several) and ``--seed`` (not the same seed) are each command's own."""

from __future__ import annotations

import typer

TraceOpt = typer.Option(..., "--trace", help="trace file")
FormatOpt = typer.Option(
    "philly",
    "--format",
    help="philly | chronus | tiresias | csv | openb | sacct-json | sacct | helios",
)
StartOpt = typer.Option(
    None, "--start", help="keep jobs submitted at or after (YYYY-MM-DD[ HH:MM:SS] or seconds)"
)
EndOpt = typer.Option(None, "--end", help="keep jobs submitted before this time")
NodesOpt = typer.Option(None, "--nodes", min=1, help="one shared cluster of this many nodes")
GpusPerNodeOpt = typer.Option(
    None, "--gpus-per-node", min=1, help="GPUs per node (default 8 or the site config)"
)
ClusterPerVcOpt = typer.Option(
    None, "--cluster-per-vc", help="CSV vc,nodes: each VC its own cluster"
)
NoFairnessOpt = typer.Option(
    False, "--no-fairness", help="skip the isolated runs that give rho (shared cluster)"
)
ViaSlurmOpt = typer.Option(
    False,
    "--via-slurm",
    help="run the replays as a Slurm job array (tasks without GPUs; a "
    "private work folder in the current directory, removed after)",
)
ReportOpt = typer.Option(
    None, "--report", help="write a self-contained HTML report, DIR/index.html"
)
JsonOpt = typer.Option(False, "--json", help="print one JSON object")


def preempt_cost_opt(default: str):
    """``--preempt-cost``; ``default``: what the command replays without it."""
    return typer.Option(
        None,
        "--preempt-cost",
        help="restart cost in seconds, or 'helios' (7 s 1 GPU, 30 s 2-8, "
        f"60 s above); default: {default}",
    )


def jobs_opt(note: str = ""):
    """``--jobs``/``-j``; ``note``: what else the command says of it."""
    return typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        help="replays run in this many processes at once (default: "
        f"every core; 1: one after the other){note}",
    )


def partition_opt(default: str):
    """``--partition`` (with ``--via-slurm``); ``default``: the partition without it."""
    return typer.Option(
        None, "--partition", help=f"--via-slurm: the partition of the array (default: {default})"
    )


def time_opt(default: str):
    """``--time`` (with ``--via-slurm``); ``default``: each task's limit without it."""
    return typer.Option(
        None,
        "--time",
        help=f"--via-slurm: each task's time limit, minutes or H:MM:SS (default: {default})",
    )
