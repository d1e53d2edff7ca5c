"""``dlsubmit``: checkpoint-friendly sbatch scripts for training, inference, serving and sweeps.

    dlsubmit train --gpus 4 --time 120 --name resnet -- python3 train.py --lr 0.1
    dlsubmit infer --gpus 1 --inputs items.txt -- python3 infer.py {item}
    dlsubmit serve --gpus 1 -- python3 -m http.server {port}
    dlsubmit sweep --param lr=0.1 --param lr=0.01 --parallel 1 -- python3 train.py --hp {param}
    dlsubmit status [JOBID]    dlsubmit cancel JOBID    dlsubmit render train -- python3 train.py

The script comes from slurm_dl.render (pure); Slurm is reached only through slurm_dl.slurm.
"""

from __future__ import annotations

import getpass
import json
import shlex
import time
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import SlurmDLError
from ..model import JobState
from ..render import BUILTIN_SITE_NAME, KINDS, JobSpec, RenderedJob, render
from .common import expected_errors, fail
from .dlsubmit_defaults import site_config, user_defaults
from .dlsubmit_status import describe_jobs, forget_missing, output_path, print_status, save_record

app = typer.Typer(
    name="dlsubmit",
    help="Submit checkpoint-friendly deep-learning jobs (train, infer, serve, sweep) to Slurm.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

_CMD_HELP = "the command to run, after --; placeholders: {item} (infer), {port} (serve), {param} (sweep)"


def _env_pairs(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    out = []
    for v in values or []:
        key, sep, value = v.partition("=")
        if not sep:
            raise fail(f"--env {v!r}: expected NAME=VALUE")
        out.append((key, value))
    return tuple(out)


def _params(values: list[str] | None, params_file: Optional[Path]) -> tuple[str, ...]:
    params = list(values or [])
    if params_file is not None:
        try:
            text = params_file.read_text(encoding="utf-8")
        except OSError as e:
            raise fail(f"--params-file {params_file}: cannot read it: {e.strerror or e}") from None
        params += [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return tuple(params)


def _filter_verdict(job: RenderedJob, config: Any) -> dict[str, Any] | None:
    """What the site's job_submit filter would do with this job; None when the rules are absent."""
    try:
        from ..rules import FilterContext, decide
        from ..rules.sbatch_args import SbatchArgsError, parse_sbatch_args
    except ImportError:
        return None
    try:
        desc = parse_sbatch_args(job.filter_args(), user_name=getpass.getuser(), now=time.time())
    except SbatchArgsError as e:
        return {"action": "unknown", "message": f"the filter cannot read these options: {e}"}
    decision = decide(desc, config, FilterContext(now=time.time()))
    verdict = decision.to_wire()
    verdict["class"] = decision.job_class.value if decision.job_class else None
    return verdict


def _print_verdict(verdict: dict[str, Any] | None) -> None:
    if verdict is None:
        typer.echo("# filter: not installed here (slurm_dl.rules missing); no verdict")
        return
    if verdict["action"] == "accept":
        typer.echo(f"# filter: accept (class {verdict.get('class') or '-'})")
        for k, v in sorted(verdict.get("set", {}).items()):
            typer.echo(f"#   set {k} = {v!r}")
        for n in verdict.get("notices", []):
            typer.echo(f"#   note: {n}")
    else:
        typer.echo(f"# filter: {verdict['action']}: {verdict.get('message', '')}")


def _backend():
    try:
        from ..slurm import get_backend
    except ImportError as e:
        raise SlurmDLError(f"the Slurm backend (slurm_dl.slurm) is not available: {e}") from None
    return get_backend()


def _run_job(kind: str, command: list[str] | None, config: Optional[Path], dry_run: bool, as_json: bool,
             print_only: bool = False, **fields: Any) -> None:
    with expected_errors():
        site = site_config(config)
        spec = JobSpec(kind=kind, command=tuple(command or ()), **fields)  # type: ignore[arg-type]
        job = render(spec, site, user_defaults())
        if print_only:
            typer.echo(job.script, nl=False)
            return
        argv = [*job.sbatch_argv, "<script on stdin>"]
        if dry_run:
            verdict = _filter_verdict(job, site)
            if as_json:
                typer.echo(json.dumps({"script": job.script, "sbatch": argv, "directives": list(job.directives),
                                       "output": job.output, "checkpoint_dir": job.checkpoint_dir, "filter": verdict}))
            else:
                typer.echo(job.script, nl=False)
                typer.echo(f"# sbatch command: {shlex.join(job.sbatch_argv)} < script")
                _print_verdict(verdict)
            if verdict is not None and verdict["action"] == "reject":
                raise typer.Exit(2)  # as `slurm-dl filter check`: scripts can tell a rejected job apart
            return
        job_id = _backend().submit(job.script)
        save_record(job_id, job, Path.cwd())
        if as_json:
            typer.echo(json.dumps({"job_id": job_id, "name": job.name, "kind": kind,
                                   "output": output_path(job.output, job_id),
                                   "checkpoint_dir": job.checkpoint_dir}))
        else:
            typer.echo(f"Submitted {kind} job {job_id} ({job.name}); output {output_path(job.output, job_id)}, "
                       f"checkpoints {job.checkpoint_dir}")


def _make_job_command(kind: str, print_only: bool = False):
    def command(
        command: Optional[list[str]] = typer.Argument(None, help=_CMD_HELP),
        gpus: int = typer.Option(1, "--gpus", "-g", help="GPUs in total (split evenly over --nodes)"),
        nodes: int = typer.Option(1, "--nodes", "-N", help="nodes (train only)"),
        time_minutes: Optional[int] = typer.Option(None, "--time", "-t", help="time limit in minutes (site default)"),
        name: Optional[str] = typer.Option(None, "--name", "-J", help="job name"),
        partition: Optional[str] = typer.Option(None, "--partition", "-p"),
        account: Optional[str] = typer.Option(None, "--account", "-A"),
        gpu_type: Optional[str] = typer.Option(None, "--gpu-type", help="e.g. h100"),
        cpus_per_gpu: Optional[int] = typer.Option(None, "--cpus-per-gpu"),
        mem_per_gpu_gb: Optional[int] = typer.Option(None, "--mem-per-gpu", help="GB of memory per GPU"),
        output: Optional[str] = typer.Option(None, "--output", "-o", help="output file (default NAME-%j.out here)"),
        checkpoint_dir: Optional[str] = typer.Option(None, "--checkpoint-dir", help="default checkpoints/NAME (the same name resumes from it)"),
        max_restarts: Optional[int] = typer.Option(None, "--max-restarts", help="restart cap (site default)"),
        grace_seconds: Optional[int] = typer.Option(None, "--grace", help="seconds between USR2 and the end"),
        launcher: Optional[str] = typer.Option(None, "--launcher", help="auto | torchrun | none"),
        requeue_on_timeout: bool = typer.Option(False, "--requeue-on-timeout", help="at the time limit, checkpoint and requeue"),
        env: Optional[list[str]] = typer.Option(None, "--env", "-e", help="NAME=VALUE for the job (repeat)"),
        inputs: Optional[str] = typer.Option(None, "--inputs", help="infer: file with one item per line"),
        param: Optional[list[str]] = typer.Option(None, "--param", help="sweep: one parameter set (repeat)"),
        params_file: Optional[Path] = typer.Option(None, "--params-file", help="sweep: one parameter set per line"),
        parallel: Optional[int] = typer.Option(None, "--parallel", help="sweep: array tasks running at once"),
        endpoint_file: Optional[str] = typer.Option(None, "--endpoint-file", help="serve: where 'host port' is written"),
        preemptible: Optional[bool] = typer.Option(None, "--preemptible/--no-preemptible", help="serve: default from the site"),
        config: Optional[Path] = typer.Option(None, "--config", help="site config (default: $SLURM_DL_CONFIG, else /etc/slurm-dl/site.toml, else built-in)"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the script, the sbatch command and the filter's verdict (exit 2 if it rejects)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        if launcher is not None and launcher not in ("auto", "torchrun", "none"):
            raise fail(f"--launcher {launcher!r}: allowed: auto, torchrun, none")
        only = {"inputs": "infer", "param": "sweep", "params_file": "sweep", "parallel": "sweep",
                "endpoint_file": "serve", "preemptible": "serve"}
        given = {"inputs": inputs, "param": param, "params_file": params_file, "parallel": parallel,
                 "endpoint_file": endpoint_file, "preemptible": preemptible}
        for opt, value in given.items():
            if value not in (None, []) and only[opt] != kind:
                raise fail(f"--{opt.replace('_', '-')} applies to {only[opt]} jobs, not {kind}")
        _run_job(
            kind, command, config, dry_run, as_json, print_only, gpus=gpus, nodes=nodes, time_minutes=time_minutes, name=name,
            partition=partition, account=account, gpu_type=gpu_type, cpus_per_gpu=cpus_per_gpu,
            mem_per_gpu_gb=mem_per_gpu_gb, output=output, checkpoint_dir=checkpoint_dir, max_restarts=max_restarts,
            grace_seconds=grace_seconds, launcher=launcher, requeue_on_timeout=requeue_on_timeout,
            env=_env_pairs(env), inputs=inputs, params=_params(param, params_file), parallel=parallel,
            endpoint_file=endpoint_file, preemptible=preemptible,
        )

    command.__name__ = kind
    command.__doc__ = {
        "train": "Submit a training job: one node (torchrun --standalone) or several (srun + torchrun rendezvous).",
        "infer": "Submit batch inference over --inputs, resumable by position (done stays done).",
        "serve": "Submit an inference server on a free port, published in an endpoint file.",
        "sweep": "Submit a hyper-parameter sweep as a job array with a parallelism cap.",
    }[kind]
    return command


render_app = typer.Typer(
    help="Print a job's script to stdout without submitting: dlsubmit render train --gpus 2 -- python3 train.py",
    no_args_is_help=True,
)
for _kind in KINDS:
    app.command(name=_kind)(_make_job_command(_kind))
    render_app.command(name=_kind)(_make_job_command(_kind, print_only=True))
app.add_typer(render_app, name="render")


@app.command()
def status(
    job_id: Optional[int] = typer.Argument(None, help="a job id (default: your dlsubmit jobs)"),
    config: Optional[Path] = typer.Option(None, "--config",
                                          help="site config (the prioritizer's store, the gpu-agents' files)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """State, restarts, last checkpoint, why a job waits (the prioritizer's explain when present) and a running
    job's GPU use (the gpu-agents' files of [telemetry] exposition_dir; '–' when not configured)."""
    with expected_errors():
        site = site_config(config)
        jobs = _backend().jobs(states=list(JobState))  # finished ones too, while Slurm lists them
        db = None if site.site.name == BUILTIN_SITE_NAME else site.site.database_url
        samples = None
        if site.telemetry.exposition_dir:
            from ..telemetry.reader import read_exposition_dir

            samples = read_exposition_dir(site.telemetry.exposition_dir)
        rows = describe_jobs(jobs, job_id, db, samples)
        if job_id is not None and not rows:
            raise fail(f"job {job_id}: Slurm does not know it (finished long ago, or never submitted)")
        if job_id is None:
            forget_missing({r["job_id"] for r in rows})
    if as_json:
        typer.echo(json.dumps(rows))
    else:
        print_status(rows)


@app.command()
def cancel(job_id: int = typer.Argument(..., help="the job to cancel")) -> None:
    """Cancel a job (all of a sweep's array tasks when given the sweep's id)."""
    with expected_errors():
        _backend().cancel(job_id)
    typer.echo(f"cancelled {job_id}")


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
