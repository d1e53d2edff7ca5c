"""``dlsubmit``: checkpoint-friendly sbatch scripts for training, inference, serving and sweeps.

The script comes from slurm_dl.dlsubmit.render (pure); Slurm is reached only through slurm_dl.slurm.
"""

from __future__ import annotations

import getpass
import json
import shlex
import shutil
import subprocess
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import typer

from ..core.errors import SlurmDLError, SlurmError
from ..core.jobid import parse_job_ref
from ..core.model import JobState
from ..core.tags import parse_tag
from ..cli.common import expected_errors, fail, job_id_of
from ..cli.config_file import ConfigOrBuiltinOpt
from ..cli.version import VersionOpt, version_option
from .checks import (
    ClusterFacts,
    cluster_problems,
    command_problem,
    deadline_outlook,
    read_cluster,
    refusal_lines,
    refusal_message,
    sharing_warning,
    single_process_warning,
    too_many_gpus,
)
from .defaults import site_config, user_defaults
from .elastic import gpus_option
from .options import HintingCommand, command_for
from .render import BUILTIN_SITE_NAME, KINDS, JobSpec, RenderedJob, render
from .status import (
    Explainer,
    describe_jobs,
    ended_rows,
    forget_missing,
    remember_ended,
    load_record,
    log_display,
    output_path,
    parse_since,
    print_status,
    save_record,
    select_rows,
)

app = typer.Typer(
    name="dlsubmit",
    help="""Submit checkpoint-friendly deep-learning jobs to Slurm.

    \b
    Examples:
      dlsubmit train --gpus 4 -t 2:00:00 -- python3 train.py --lr 0.1
      dlsubmit status
      dlsubmit train --help
    """,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(version: VersionOpt = version_option("dlsubmit")) -> None:
    pass


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
        except UnicodeDecodeError as e:
            line = params_file.read_bytes()[: e.start].count(b"\n") + 1
            raise fail(
                f"--params-file {params_file}: line {line} is not UTF-8 text (byte {e.start})"
            ) from None
        params += [
            line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
        ]
    return tuple(params)


def _filter_verdict(job: RenderedJob, config: Any) -> dict[str, Any] | None:
    """What the site's job_submit filter would do with this job; None when the rules are absent."""
    try:
        from ..core.rules import FilterContext, decide
        from ..core.rules.sbatch_args import SbatchArgsError, parse_sbatch_args
    except ImportError:
        return None
    try:
        desc = parse_sbatch_args(job.filter_args(), user_name=getpass.getuser(), now=time.time())
        desc["script_head"] = (
            job.script
        )  # as the shim sends it: the filter reads its --signal and traps
    except SbatchArgsError as e:
        return {"action": "unknown", "message": f"the filter cannot read these options: {e}"}
    from ..slurm.topology_view import slurm_leaf_nodes

    decision = decide(
        desc, config, FilterContext(now=time.time(), leaf_nodes=slurm_leaf_nodes(config))
    )
    verdict = decision.to_wire()
    verdict["class"] = decision.job_class.value if decision.job_class else None
    return verdict


_SET_WORDS = {
    "time_limit": "time limit (min)",
    "tres_per_node": "GPUs per node",
    "tres_per_job": "GPUs in all",
    "min_nodes": "nodes",
    "max_nodes": "nodes at most",
    "partition": "partition",
    "features": "GPU types (features)",
    "num_tasks": "tasks",
    "ntasks_per_node": "tasks per node",
    "cpus_per_task": "CPUs per task",
    "nice": "nice",
}


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def verdict_lines(verdict: dict[str, Any] | None) -> list[str]:
    """The filter's verdict in words: accepted as what, what it changed, what it noticed."""
    if verdict is None:
        return ["filter: not installed here; no verdict"]
    if verdict["action"] != "accept":
        return textwrap.wrap(
            f"filter: REFUSES it: {verdict.get('message', '')}", 80, subsequent_indent="  "
        )
    job_class = verdict.get("class") or "-"
    article = "an" if job_class[:1] in ("a", "e", "i", "o", "u") else "a"
    lines = [f"filter: accepts it as {article} {job_class} job"]
    changes = dict(verdict.get("set", {}))
    tag = str(changes.pop("admin_comment", "") or "")
    changes.pop("comment", None)
    fields = dict(part.split("=", 1) for part in tag.split(":", 1)[-1].split(";") if "=" in part)
    if fields.get("ckpt") == "1":
        lines.append(
            f"  preemptible: asked to checkpoint ({fields.get('sig', 'USR2')}, {fields.get('lead', '?')} s "
            "ahead), then requeued"
        )
    elif fields.get("ckpt") == "0":
        lines.append("  not preemptible (no checkpoint handler): never signalled or requeued")
    parsed = parse_tag(tag)
    if parsed is not None and parsed.elastic is not None:
        lines.append(
            f"  elastic: runs at {parsed.elastic.text()} GPUs; submitted at "
            f"{parsed.elastic.high}, resized by checkpoint and requeue"
        )
    if parsed is not None and parsed.deadline is not None:
        lines.append(f"  deadline: {_utc(parsed.deadline)}")
    if parsed is not None and parsed.soft_deadlines:
        steps = ", ".join(f"{_utc(t)} {round(100 * v)} %" for t, v in parsed.soft_deadlines)
        lines.extend(
            textwrap.wrap(
                f"deadline steps (worth by then): {steps}",
                78,
                initial_indent="  ",
                subsequent_indent="    ",
            )
        )
    if "req_switch" in changes:
        n, wait = changes.pop("req_switch"), changes.pop("wait4switch", None)
        lines.append(
            f"  placed under {n} leaf switch{'es' if str(n) != '1' else ''}"
            + (f" (it waits up to {int(wait) // 60} min for that)" if wait else "")
        )
    for key, value in sorted(changes.items()):
        words = _SET_WORDS.get(key, key.replace("_", " "))
        lines.append(f"  it sets {words}: {value}")
    for note in verdict.get("notices", []):
        lines.extend(
            textwrap.wrap(f"note: {note}", 80, initial_indent="  ", subsequent_indent="    ")
        )
    return lines


def _backend():
    try:
        from ..slurm import get_backend
    except ImportError as e:
        raise SlurmDLError(f"the Slurm backend (slurm_dl.slurm) is not available: {e}") from None
    return get_backend()


def _deadline_outlook(
    verdict: dict[str, Any] | None, job: RenderedJob, site: Any, facts: ClusterFacts
) -> str | None:
    """Would the job's deadline be promised now? The prioritizer's admission test over the
    queue Slurm shows (one squeue and one sinfo); None without a deadline."""
    if not verdict or verdict.get("action") != "accept":
        return None
    tag = str(verdict.get("set", {}).get("admin_comment") or "")
    if "deadline" not in tag and "soft=" not in tag:
        return None
    dc = site.policy.deadline
    if not dc.admission:
        return "deadline: this site promises every deadline within its quota (no admission test)"
    if not facts.checked:
        return (
            f"deadline: whether it would be promised is not known here ({facts.why}): the "
            "prioritizer tests it against the queue's deadlines and the cluster's GPUs"
        )
    from ..core.rules.sbatch_args import SbatchArgsError, parse_sbatch_args
    from ..slurm import CliBackend

    try:
        minutes = verdict.get("set", {}).get("time_limit") or parse_sbatch_args(
            job.filter_args(), user_name=getpass.getuser(), now=time.time()
        ).get("time_limit")
        backend = CliBackend(timeout=CHECK_TIMEOUT_S)
        jobs, nodes = backend.jobs(), backend.nodes()
    except (SbatchArgsError, SlurmDLError) as e:
        return f"deadline: not tested against the queue ({str(e).splitlines()[0][:60]})"
    return deadline_outlook(
        tag,
        int(minutes) if minutes else None,
        getpass.getuser(),
        jobs,
        nodes,
        time.time(),
        dc.admission_share,
    )


def _cluster() -> ClusterFacts:
    """The live cluster for --dry-run's check: a short timeout, as a check must not hang."""
    try:
        from ..slurm import CliBackend
    except ImportError as e:
        return ClusterFacts(checked=False, why=f"the Slurm backend is not available: {e}")
    return read_cluster(CliBackend(timeout=CHECK_TIMEOUT_S))


CHECK_TIMEOUT_S = 5.0


def _run_tag(root: str) -> str:
    """A per-submission suffix for the default checkpoint directory: the local time, made unique here."""
    tag = time.strftime("%Y%m%d-%H%M%S")
    base, n = tag, 1
    while any(Path(root).glob(f"*-{tag}")):
        n += 1
        tag = f"{base}-{n}"
    return tag


def _check_resume(resume: str, root: str) -> None:
    d = Path(root) / resume
    if not d.is_dir():
        runs = (
            sorted(p.name for p in Path(root).iterdir() if p.is_dir())
            if Path(root).is_dir()
            else []
        )
        known = f"; runs in {root}/: {', '.join(runs[-8:])}" if runs else f"; {root}/ has no runs"
        raise fail(f"--resume {resume}: no checkpoint directory {d}{known}")


def _print_cluster(facts: ClusterFacts, problems: list[str]) -> None:
    if not facts.checked:
        typer.echo(f"cluster: not checked ({facts.why})")
    elif problems:
        for p in problems:
            for line in textwrap.wrap(f"cluster: REFUSES it: {p}", 80, subsequent_indent="  "):
                typer.echo(line)
    else:
        typer.echo(
            f"cluster: ok (partitions {', '.join(facts.partition_names) or '-'}"
            f"{'; GPU types ' + ', '.join(facts.gpu_types) if facts.gpu_types else ''})"
        )


def _submitted_lines(
    kind: str, job_id: int, job: RenderedJob, resume_hint: str | None, tasks: int | None = None
) -> list[str]:
    log = log_display(output_path(job.output, job_id), tasks)
    lines = [f"submitted {kind} job {job_id} ({job.name})", f"  log:         {log}"]
    if kind == "serve":
        lines.append(f"  endpoint:    {job.endpoint_file} (written when the server is up)")
    else:
        lines.append(f"  checkpoints: {job.checkpoint_dir}")
    if resume_hint:
        hint = f"dlsubmit {kind} --resume {resume_hint} ..."
        if len(hint) > 48:  # the whole command on a line of its own, to copy
            lines += ["  continue this run later with:", f"    {hint}"]
        else:
            lines.append(f"  continue this run later with: {hint}")
    lines.append(f"  follow it:   dlsubmit status {job_id}")
    return lines


def _run_job(
    kind: str,
    *,
    command: list[str] | None,
    config: Optional[Path],
    dry_run: bool,
    as_json: bool,
    show_script: bool = False,
    print_only: bool = False,
    env: list[str] | None = None,
    param: list[str] | None = None,
    params_file: Optional[Path] = None,
    resume: str | None = None,
    **fields: Any,
) -> None:
    fields = {k: v for k, v in fields.items() if v is not None}
    if "gpus" in fields:
        try:
            fields.update(gpus_option(kind, str(fields["gpus"])))
        except ValueError as e:
            raise fail(str(e)) from None
    launcher = fields.get("launcher")
    if launcher is not None and launcher not in ("auto", "torchrun", "none"):
        raise fail(f"--launcher {launcher!r}: allowed: auto, torchrun, none")
    if fields.get("parallel") is not None and fields["parallel"] < 1:
        raise fail(f"--parallel {fields['parallel']}: must be 1 or more")
    if resume is not None and fields.get("checkpoint_dir"):
        raise fail("--resume and --checkpoint-dir both name a checkpoint directory: give one")
    if show_script and not dry_run:
        raise fail(
            "--show-script prints the script of a dry run: add --dry-run (nothing was submitted)"
        )
    with expected_errors():
        site = site_config(config)
        user = user_defaults()
        root = (user.checkpoint_root or "checkpoints").rstrip("/")
        if resume is not None:
            fields["checkpoint_dir"] = f"{root}/{resume}"
        run_tag = None
        if (
            kind != "serve"
            and fields.get("name") is None
            and not fields.get("checkpoint_dir")
            and not print_only
        ):
            run_tag = _run_tag(root)
        spec = JobSpec(
            kind=kind,
            command=tuple(command or ()),
            env=_env_pairs(env),  # type: ignore[arg-type]
            params=_params(param, params_file),
            run_tag=run_tag,
            **fields,
        )
        if not print_only:
            facts = _cluster()
            big = too_many_gpus(spec.gpus, facts)
            if big:
                raise fail(big)
            if spec.inputs and not Path(spec.inputs).is_file():
                raise fail(f"--inputs {spec.inputs}: no such file in {Path.cwd()}")
        job = render(spec, site, user)
        if print_only:
            typer.echo(job.script, nl=False)
            return
        program = spec.command[0] if spec.command else ""
        missing = command_problem(
            spec.command,
            bool(shutil.which(program))
            or Path(program).exists()
            or "{" in program
            or "$" in program,
        )
        warning = single_process_warning(
            kind,
            spec.gpus // max(1, spec.nodes),
            launcher or user.launcher or "auto",
            spec.command,
            nodes=max(1, spec.nodes),
        )
        builtin = site.site.name == BUILTIN_SITE_NAME
        shared = sharing_warning(
            kind,
            spec.gpus,
            spec.share,
            spec.gpu_mem,
            builtin or any(g.shards_per_gpu for g in site.sharing.groups),
        )
        warnings = [w for w in (warning, missing, shared) if w]
        if dry_run:
            verdict = None if builtin else _filter_verdict(job, site)
            problems = cluster_problems(facts, job.directives)
            outlook = _deadline_outlook(verdict, job, site, facts)
            if as_json:
                typer.echo(
                    json.dumps(
                        {
                            "script": job.script,
                            "sbatch": [*job.sbatch_argv, "<script on stdin>"],
                            "directives": list(job.directives),
                            "output": job.output,
                            "checkpoint_dir": job.checkpoint_dir,
                            "filter": verdict,
                            "cluster": {
                                "checked": facts.checked,
                                "why": facts.why or None,
                                "partitions": facts.partition_names,
                                "gpu_types": facts.gpu_types,
                                "problems": problems,
                            },
                            "warnings": warnings,
                            "deadline_admission": outlook,
                        }
                    )
                )
            else:
                if builtin:
                    typer.echo("filter: not checked: no site config here (see --config)")
                else:
                    for line in verdict_lines(verdict):
                        typer.echo(line)
                    for line in textwrap.wrap(outlook or "", 80, subsequent_indent="  "):
                        typer.echo(line)
                _print_cluster(facts, problems)
                for w in warnings:
                    for line in textwrap.wrap(f"warning: {w}", 80, subsequent_indent="  "):
                        typer.echo(line)
                typer.echo(f"sbatch command: {shlex.join(job.sbatch_argv)} < script")
                if show_script:
                    typer.echo("")
                    typer.echo(job.script, nl=False)
                else:
                    typer.echo(
                        f"the script: {len(job.script.splitlines())} lines; --show-script prints it"
                    )
            if problems or (verdict is not None and verdict["action"] == "reject"):
                raise typer.Exit(
                    2
                )  # as `slurm-dl filter check`: scripts can tell a refused job apart
            return
        if resume is not None:
            _check_resume(resume, root)
        for w in warnings:
            typer.echo(
                "\n".join(textwrap.wrap(f"warning: {w}", 80, subsequent_indent="  ")), err=True
            )
        backend = _backend()
        try:
            job_id = backend.submit(job.script)
        except SlurmError as e:
            lines = refusal_message(e, read_cluster(backend))
            typer.echo(f"error: {lines[0]}", err=True)
            for extra in lines[1:]:
                typer.echo(f"  {extra}", err=True)
            raise typer.Exit(1) from None
        save_record(job_id, job, Path.cwd())
        for note in getattr(
            backend, "submit_notices", ()
        ):  # what the site's job filter told the user
            typer.echo("\n".join(textwrap.wrap(note, 80, subsequent_indent="  ")), err=True)
    leaf = Path(job.checkpoint_dir).name if run_tag or resume else None
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "job_id": job_id,
                    "name": job.name,
                    "kind": kind,
                    "output": output_path(job.output, job_id),
                    "checkpoint_dir": None if kind == "serve" else job.checkpoint_dir,
                    "endpoint_file": job.endpoint_file if kind == "serve" else None,
                    "resume": leaf,
                    "warnings": [w for w in (warning, shared) if w],
                }
            )
        )
    else:
        for line in _submitted_lines(kind, job_id, job, leaf, len(spec.params) or None):
            typer.echo(line)


_DOCS = {
    "train": """Submit a training job.

    One node runs torchrun --standalone (one process per GPU); several nodes
    run torchrun on each with a rendezvous on the first. The job gets USR2
    before it is preempted or times out: save a checkpoint to $CKPT_DIR, and
    resume from $RESUME_FROM (empty on the first run).

    \b
    Examples:
      dlsubmit train --gpus 4 -t 2:00:00 -- python3 train.py --lr 0.1
      dlsubmit train -g 16 -N 2 -t 1-00:00:00 --mem-per-gpu 80G \\
          --name llm -- python3 train.py
      dlsubmit train --resume train-python3-20250101-120000 -- python3 train.py
    """,
    "infer": """Submit batch inference over a file of items.

    The command runs once per line of --inputs with the item in {item}
    (and $DL_ITEM); after a preemption the job continues at the next item.

    \b
    Example:
      dlsubmit infer --gpus 1 --inputs items.txt -- python3 infer.py {item}
    """,
    "serve": """Submit an inference server on a free port.

    {port} (and $PORT) is the port to listen on; "host port" is written to
    the endpoint file when the server is up and removed when it stops.

    \b
    Example:
      dlsubmit serve --gpus 1 -t 8:00:00 -- python3 -m http.server {port}
    """,
    "sweep": """Submit a hyper-parameter sweep as a job array.

    One array task per parameter set, {param} (and $DL_PARAM) in the command;
    --parallel caps how many run at once.

    \b
    Example:
      dlsubmit sweep --param 0.1 --param 0.01 -- python3 train.py --lr {param}
    """,
}

render_app = typer.Typer(
    help="""Print a job's script without submitting it.

    \b
    Example:
      dlsubmit render train --gpus 2 -- python3 train.py
    """,
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _submit(kind: str, **values: Any) -> None:
    _run_job(kind, **values)


def _render_only(kind: str, **values: Any) -> None:
    values["dry_run"] = False
    _run_job(kind, print_only=True, **values)


for _kind in KINDS:
    app.command(name=_kind, cls=HintingCommand, no_args_is_help=True)(
        command_for(_kind, _submit, _DOCS[_kind])
    )
    render_app.command(name=_kind, cls=HintingCommand)(
        command_for(
            _kind,
            _render_only,
            _DOCS[_kind].split("\n")[0].replace("Submit", "Print the script of")
            + f"\n\n    \b\n    Example:\n      dlsubmit render {_kind} -- python3 train.py\n",
        )
    )
app.add_typer(render_app, name="render")


@app.command()
def status(
    job_id: Optional[str] = typer.Argument(
        None,
        metavar="JOBID",
        show_default=False,
        help="one job in detail: 1234, an array task 1234_7 or a hetjob "
        "part 1234+0 (default: a table of your jobs)",
    ),
    show_all: bool = typer.Option(False, "--all", help="every job dlsubmit remembers, however old"),
    since: str = typer.Option(
        "24h",
        "--since",
        metavar="AGE",
        help="also list jobs that ended within AGE, e.g. 30m, 12h, 7d",
    ),
    config: Optional[Path] = ConfigOrBuiltinOpt,
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Your jobs: state, restarts, and why each waits or where it runs.

    A waiting job's line is the prioritizer's summary (place in the queue,
    GPUs ahead, Slurm's start estimate) when the prioritizer runs here, else
    Slurm's reason in words. Times are local. With a job id: its log,
    checkpoints, recent events and the full explanation.

    \b
    Examples:
      dlsubmit status
      dlsubmit status --since 7d
      dlsubmit status 1234
      dlsubmit status 1234_7
    """
    try:
        since_s = parse_since(since)
    except ValueError as e:
        raise fail(str(e)) from None
    with expected_errors():
        ref = parse_job_ref(job_id) if job_id is not None else None
        site = site_config(config)
        one = job_id_of(ref) if ref is not None else None  # before the listing: a task may start
        jobs = _backend().jobs(states=list(JobState))  # finished ones too, while Slurm lists them
        explainer = None if site.site.name == BUILTIN_SITE_NAME else Explainer(site)
        samples, unreadable = _gpu_samples(site.telemetry)
        rows = describe_jobs(
            jobs, one, explainer, samples, _estimates(jobs, one), gpu_unavailable=unreadable
        )
        from ..slurm.sacct import finished_jobs

        remember_ended(rows)
        if one is None:
            listed = {r["job_id"] for r in rows}
            forget_missing(listed)
            rows = sorted(
                rows + ended_rows(listed, accounting=finished_jobs), key=lambda r: r["job_id"]
            )
            rows = select_rows(rows, show_all=show_all, since_s=since_s, now=time.time())
        elif not rows:
            rows = ended_rows(
                set(), only=one, accounting=finished_jobs
            )  # ended, and dlsubmit remembers it
            if not rows:
                raise fail(
                    f"job {ref}: Slurm does not know it (ended a while ago, or never submitted)"
                )
    if as_json:
        typer.echo(json.dumps(rows))
    else:
        print_status(
            rows, detail=one is not None, note=explainer.unavailable if explainer else None
        )


def _gpu_samples(telemetry) -> tuple[list | None, bool]:
    """The gpu-agents' samples (None: telemetry not configured), and whether their directory
    cannot be read here (then no samples: GPU use is not available, not idle)."""
    if not telemetry.exposition_dir:
        return None, False
    from ..telemetry.reader import read_exposition_dir, readable_dir

    if not readable_dir(telemetry.exposition_dir):
        return None, True
    try:  # ignored files are the admin's (doctor lists them)
        return read_exposition_dir(
            telemetry.exposition_dir, telemetry.agent_user, warn=False
        ), False
    except OSError:
        return None, True


def _estimates(jobs: list, job_id: int | None) -> dict[int, float]:
    """Slurm's expected start of the pending jobs shown (none when Slurm has not planned them)."""
    pending = [
        j.job_id
        for j in jobs
        if j.pending
        and (j.job_id == job_id if job_id is not None else load_record(j.job_id) is not None)
    ]
    if not pending:
        return {}
    try:
        from ..slurm.estimates import expected_starts

        return expected_starts(pending)
    except SlurmDLError:
        return {}


@app.command()
def logs(
    job_id: str = typer.Argument(
        ..., metavar="JOBID", show_default=False, help="the job: 1234, a sweep's task 1234_7"
    ),
    lines: int = typer.Option(
        40, "-n", "--lines", metavar="N", help="how many lines from its end (1 or more)"
    ),
    follow: bool = typer.Option(
        False, "-f", "--follow", help="keep printing what it writes (Ctrl-C stops)"
    ),
) -> None:
    """Print the end of a job's log (its output file).

    \b
    Examples:
      dlsubmit logs 1234
      dlsubmit logs 1234_7 -n 100
      dlsubmit logs 1234 --follow
    """
    if lines < 1:
        raise fail(f"-n {lines}: give 1 line or more")
    with expected_errors():
        ref = parse_job_ref(job_id)
        record = load_record(ref.job_id)
        path = None
        if record and record.get("output"):
            path = record["output"]
            if "%a" in path:
                if ref.task is None:
                    raise fail(
                        f"job {ref} is a sweep with one log per task: dlsubmit logs {ref.job_id}_0 "
                        "(task 0), and so on"
                    )
                path = path.replace("%a", str(ref.task))
        else:
            from ..slurm.job_lookup import output_file

            jid = job_id_of(ref) if not ref.plain else ref.job_id
            path = output_file(jid)
            if path is None:
                raise fail(
                    f"job {ref}: no log known (dlsubmit did not submit it here, and Slurm does not\n"
                    "  list it any more)"
                )
        if not Path(path).exists():
            raise fail(
                f"job {ref}: its log {path} does not exist (yet): a job writes it once it starts"
            )
    tail = ["tail", "-n", str(lines), *(["-F"] if follow else []), "--", path]
    typer.echo(f"==> {path} <==", err=True)
    try:
        raise typer.Exit(subprocess.call(tail))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@app.command()
def cancel(
    job_ids: list[str] = typer.Argument(
        ...,
        metavar="JOBID...",
        show_default=False,
        help="the jobs: 1234, array tasks 1234_7 or 1234_[0-3,7], a hetjob part 1234+0",
    ),
) -> None:
    """Cancel jobs (a sweep's id cancels all its tasks).

    \b
    Examples:
      dlsubmit cancel 1234
      dlsubmit cancel 1234 1240 1234_7
    """
    from ..core.errors import JobNotFoundError

    with expected_errors():
        refs = [parse_job_ref(job_id, several=True) for job_id in job_ids]  # all, before any
        backend = _backend()
    failed = 0
    with expected_errors():
        for ref in dict.fromkeys(refs):
            try:
                backend.cancel(ref)
            except JobNotFoundError:
                typer.echo(f"error: job {ref}: Slurm does not know it (already ended?)", err=True)
                failed += 1
            except SlurmError as e:
                why = refusal_lines(e)[0]
                typer.echo(f"error: Slurm did not cancel job {ref}: {why}", err=True)
                failed += 1
            else:
                typer.echo(f"cancelled {ref}")
    if failed:
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
