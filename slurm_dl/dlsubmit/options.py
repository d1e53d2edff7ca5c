"""dlsubmit's options, and which job kinds take which: each subcommand lists only its own.

Typer reads a command's options from its function signature, so each kind's command is one
function whose signature is built from the table below (``command_for``).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from typer.core import TyperCommand

from ..cli.config_file import ConfigOrBuiltinOpt

ALL_KINDS = ("train", "infer", "serve", "sweep")
_CKPT_KINDS = ("train", "infer", "sweep")

_CMD_HELP = {
    "train": "the command to run, after --",
    "infer": "the command to run per item, after --; {item} is the item",
    "serve": "the server command, after --; {port} is the port to listen on",
    "sweep": "the command per parameter set, after --; {param} is the set",
}

# name -> (annotation, default Option/Argument factory, kinds that take it)
_OPTIONS: dict[str, tuple[Any, Callable[[str], Any], tuple[str, ...]]] = {
    "gpus": (
        str,
        lambda k: typer.Option(
            "1",
            "--gpus",
            "-g",
            metavar="N",
            help={
                "train": "GPUs in total, split evenly over --nodes; elastic: MIN-MAX "
                "(8-32) or a set (8,16,32) of totals it can run at",
                "sweep": "GPUs for each task (each parameter set)",
            }.get(k, "GPUs in total"),
        ),
    ),
    "nodes": (int, lambda k: typer.Option(1, "--nodes", "-N", metavar="N", help="nodes to span")),
    "time": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--time",
            "-t",
            metavar="TIME",
            help="time limit as Slurm takes it: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
            "(default: the site's for this kind of job)",
        ),
    ),
    "name": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--name",
            "-J",
            metavar="NAME",
            help="job name"
            + (
                "; runs with the same name share checkpoints (resume each other)"
                if k in _CKPT_KINDS
                else ""
            ),
        ),
    ),
    "resume": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--resume",
            metavar="RUN",
            help="continue an earlier run: use its checkpoint directory (the RUN printed at submission)",
        ),
    ),
    "partition": (
        Optional[str],
        lambda k: typer.Option(
            None, "--partition", "-p", metavar="NAME", help="Slurm partition (default: the site's)"
        ),
    ),
    "account": (
        Optional[str],
        lambda k: typer.Option(
            None, "--account", "-A", metavar="NAME", help="Slurm account to charge"
        ),
    ),
    "gpu_type": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--gpu-type",
            metavar="TYPES",
            help="GPU type, or types the job accepts, e.g. h100 or a100,h100 (default: any)",
        ),
    ),
    "gpu_mem": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--gpu-mem",
            metavar="SIZE",
            help="GPU memory the job needs, e.g. 40G: smaller GPUs are ruled out",
        ),
    ),
    "deadline": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--deadline",
            metavar="WHEN",
            help="finish by then (YYYY-MM-DDTHH:MM UTC, Unix seconds, or 6h after "
            "submission); the job's --time must fit before it",
        ),
    ),
    "deadline_steps": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--deadline-steps",
            metavar="STEPS",
            help="what the result is worth by when, e.g. 4h=10,6h=5,10h=2 (after submission); "
            "--time must fit before the last",
        ),
    ),
    "share": (
        bool,
        lambda k: typer.Option(
            False,
            "--share",
            help="run on part of a GPU (a Slurm shard) where the site offers them; 1 GPU only",
        ),
    ),
    "cpus_per_gpu": (
        Optional[int],
        lambda k: typer.Option(None, "--cpus-per-gpu", metavar="N", help="CPU cores per GPU"),
    ),
    "mem_per_gpu": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--mem-per-gpu",
            metavar="SIZE",
            help="memory per GPU with a unit, e.g. 80G or 512M",
        ),
    ),
    "qos": (
        Optional[str],
        lambda k: typer.Option(
            None, "--qos", "-q", metavar="QOS", help="Slurm QOS, as sbatch --qos"
        ),
    ),
    "constraint": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--constraint",
            "-C",
            metavar="FEATURES",
            help="node features, as sbatch --constraint",
        ),
    ),
    "dependency": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--dependency",
            "-d",
            metavar="DEPS",
            help="start after other jobs, as sbatch --dependency, e.g. afterok:1234",
        ),
    ),
    "mail_type": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--mail-type",
            metavar="TYPES",
            help="mail on these events, as sbatch --mail-type, e.g. END,FAIL",
        ),
    ),
    "mail_user": (
        Optional[str],
        lambda k: typer.Option(
            None, "--mail-user", metavar="ADDRESS", help="where the mail goes (default: you)"
        ),
    ),
    "output": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--output",
            "-o",
            metavar="FILE",
            help="log file; %j is the job id (default: NAME-%j.out in this directory)",
        ),
    ),
    "checkpoint_dir": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--checkpoint-dir",
            metavar="DIR",
            help="checkpoint directory (default: checkpoints/NAME with --name, else a new one per run)",
        ),
    ),
    "max_restarts": (
        Optional[int],
        lambda k: typer.Option(
            None,
            "--max-restarts",
            metavar="N",
            help="most restarts after preemption (default: site's)",
        ),
    ),
    "grace_seconds": (
        Optional[int],
        lambda k: typer.Option(
            None,
            "--grace",
            metavar="SECONDS",
            help="seconds between the checkpoint signal (USR2) and the end",
        ),
    ),
    "launcher": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--launcher",
            metavar="WHICH",
            help="auto (torchrun if installed), torchrun, or none (run the command once per node)",
        ),
    ),
    "requeue_on_timeout": (
        bool,
        lambda k: typer.Option(
            False,
            "--requeue-on-timeout",
            help="at the time limit, checkpoint and queue again to continue",
        ),
    ),
    "ckpt_glob": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--ckpt-glob",
            metavar="PATTERNS",
            help="what a checkpoint in the checkpoint directory is called, as name "
            "patterns separated by commas (default: *.pt, *.ckpt, *.safetensors and other "
            "common formats, checkpoint-* and global_step* directories); the newest match "
            "is RESUME_FROM",
        ),
    ),
    "env": (
        Optional[list[str]],
        lambda k: typer.Option(
            None,
            "--env",
            "-e",
            metavar="NAME=VALUE",
            help="environment variable for the job (repeat)",
        ),
    ),
    "inputs": (
        Optional[str],
        lambda k: typer.Option(
            None, "--inputs", metavar="FILE", help="file with one item per line (required)"
        ),
    ),
    "param": (
        Optional[list[str]],
        lambda k: typer.Option(None, "--param", metavar="VALUE", help="one parameter set (repeat)"),
    ),
    "params_file": (
        Optional[Path],
        lambda k: typer.Option(
            None, "--params-file", metavar="FILE", help="one parameter set per line"
        ),
    ),
    "parallel": (
        Optional[int],
        lambda k: typer.Option(
            None, "--parallel", metavar="N", help="array tasks running at once (default: all)"
        ),
    ),
    "endpoint_file": (
        Optional[str],
        lambda k: typer.Option(
            None,
            "--endpoint-file",
            metavar="FILE",
            help="where 'host port' is written when the server is up (default: NAME.endpoint here)",
        ),
    ),
    "preemptible": (
        Optional[bool],
        lambda k: typer.Option(
            None,
            "--preemptible/--no-preemptible",
            help="may the server be stopped and restarted? (default: site's)",
        ),
    ),
    "config": (Optional[Path], lambda k: ConfigOrBuiltinOpt),
    "dry_run": (
        bool,
        lambda k: typer.Option(
            False,
            "--dry-run",
            help="print the filter's verdict and what it changes, the cluster check and the sbatch "
            "command; submit nothing (exit 2 when the job would be refused)",
        ),
    ),
    "show_script": (
        bool,
        lambda k: typer.Option(
            False, "--show-script", help="with --dry-run: also print the whole script"
        ),
    ),
    "as_json": (bool, lambda k: typer.Option(False, "--json", help="machine-readable output")),
}

_KINDS_OF = {
    "nodes": ("train",),
    "launcher": ("train",),
    "resume": _CKPT_KINDS,
    "checkpoint_dir": _CKPT_KINDS,
    "requeue_on_timeout": _CKPT_KINDS,
    "ckpt_glob": ("train", "sweep"),
    "inputs": ("infer",),
    "param": ("sweep",),
    "params_file": ("sweep",),
    "parallel": ("sweep",),
    "endpoint_file": ("serve",),
    "preemptible": ("serve",),
    "share": ("infer", "serve", "sweep"),
}


def options_for(kind: str) -> list[str]:
    return [n for n in _OPTIONS if kind in _KINDS_OF.get(n, ALL_KINDS)]


def command_for(kind: str, run: Callable[..., None], doc: str) -> Callable[..., None]:
    """A function Typer can read: ``command`` (after --) then this kind's options; calls
    ``run(kind, **values)`` with every option name present (absent ones as None/False)."""
    params = [
        inspect.Parameter(
            "command",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=typer.Argument(
                None, metavar="-- COMMAND", help=_CMD_HELP[kind], show_default=False, hidden=True
            ),
            annotation=Optional[list[str]],
        )
    ]
    annotations: dict[str, Any] = {"command": Optional[list[str]], "return": None}
    for name in options_for(kind):
        annotation, make, *_ = _OPTIONS[name]
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=make(kind), annotation=annotation
            )
        )
        annotations[name] = annotation

    def command(**values: Any) -> None:
        for name in _OPTIONS:
            values.setdefault(name, False if _OPTIONS[name][0] is bool else None)
        run(kind, **values)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = annotations
    command.__name__ = kind
    command.__doc__ = doc
    return command


class HintingCommand(TyperCommand):
    """An unknown option: another kind's option is named as such, and one after the program's
    name usually means a forgotten ``--`` before the program: say so."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        from typer._click.exceptions import NoSuchOption, UsageError

        try:
            rest = super().parse_args(ctx, args)
        except NoSuchOption as e:
            opt = e.option_name
            owners = [
                k
                for n, kinds in _KINDS_OF.items()
                for k in kinds
                if "--" + n.replace("_", "-") == opt or (n == "grace_seconds" and opt == "--grace")
            ]
            if owners:
                e.message = f"{opt} applies to {' and '.join(owners)} jobs, not {self.name}"
                e.possibilities = []
            elif "--" not in args:
                e.message = (
                    f"No such option: {opt}\n"
                    f"If {opt} is your program's, put -- before the program:\n"
                    f"  {ctx.command_path} [OPTIONS] -- python3 train.py {opt} ..."
                )
                e.possibilities = []
            raise
        command = ctx.params.get("command") or []
        if command and command[0] == "--":  # a second --: all of it is the program's
            ctx.params["command"] = command[1:]
        elif message := own_options_after_dashes(ctx.command_path, command):
            raise UsageError(message, ctx)
        return rest


# Options that change what dlsubmit itself does (submit or not, what it prints): after the --
# they go to the program, so "-- python3 train.py --dry-run" would submit a real job.
_OWN_AFTER_DASHES = ("--dry-run", "--show-script", "--json")


def own_options_after_dashes(command_path: str, command: list[str]) -> str | None:
    """Why a command after ``--`` that holds one of dlsubmit's own options is refused, and the
    two ways to say what was meant; None when it holds none."""
    own = [a for a in command if a in _OWN_AFTER_DASHES]
    if not own:
        return None
    opts = " ".join(dict.fromkeys(own))
    program = [a for a in command if a not in _OWN_AFTER_DASHES]
    shown = " ".join(program) if len(" ".join(program)) <= 30 else " ".join(program[:2]) + " ..."
    them = "it" if len(set(own)) == 1 else "them"
    return (
        f"{opts} comes after --, so it would go to your program, not to\n"
        f"dlsubmit; nothing was submitted.\n"
        f"  for dlsubmit, put {them} before the --:\n"
        f"    {command_path} [OPTIONS] {opts} -- {shown}\n"
        f"  for your program, start the command with a second --:\n"
        f"    {command_path} [OPTIONS] -- -- {shown} {opts}"
    )
