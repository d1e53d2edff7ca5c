"""dlsubmit's renderer: a job description + the site config -> sbatch script text + sbatch argv.

Pure: no clock, no Slurm, no environment reads; the same inputs give the same script byte for
byte (the golden tests rely on it). The Jinja2 templates are package data read once.

Safety model. Every user value that reaches the script body goes through ``shlex.quote`` (the
``q`` filter in the templates), so a name or command holding quotes, ``$(…)``, backticks, ``;`` or
newlines is data, never code. ``#SBATCH`` lines are parsed by sbatch, not by the shell: their
values are double-quoted for sbatch and values that cannot be written there safely (control
characters, ``"`` or ``\\``) are rejected with a :class:`RenderError` naming the value.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Literal

import jinja2

from ..core.config import SiteConfig
from ..core.errors import SlurmDLError
from ..core.hints import parse_deadline_steps, parse_when
from ..core.hints import soft_steps
from ..core.units import UnitError, format_time, parse_memory_mb, parse_time_seconds

Kind = Literal["train", "infer", "serve", "sweep"]
Launcher = Literal["auto", "torchrun", "none"]
KINDS: tuple[str, ...] = ("train", "infer", "serve", "sweep")
CLASS_OF_KIND = {"train": "train", "infer": "inference", "serve": "serve", "sweep": "sweep"}
PLACEHOLDERS = {
    "infer": {"{item}": "DL_ITEM"},
    "serve": {"{port}": "PORT"},
    "sweep": {"{param}": "DL_PARAM"},
}

BUILTIN_SITE_NAME = "dlsubmit-builtin"  # the built-in site knows no GPU types: any name passes

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE_FILE = re.compile(r"[^A-Za-z0-9._-]+")
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.:+-]+$")


class RenderError(SlurmDLError, ValueError):
    """A job description dlsubmit cannot turn into a safe script: says which value and why."""


@dataclass(frozen=True, slots=True)
class UserDefaults:
    """Per-user defaults (``~/.config/slurm-dl/dlsubmit.toml``), already parsed into plain data."""

    partition: str | None = None
    account: str | None = None
    gpu_type: str | None = None
    time_minutes: int | None = None
    output_dir: str | None = None
    checkpoint_root: str | None = None
    launcher: Launcher | None = None
    max_restarts: int | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_gb: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    time: str | None = None  # Slurm's spelling; wins over time_minutes
    mem_per_gpu: str | None = None  # with a unit (80G); wins over mem_per_gpu_gb


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What the user asked for on the dlsubmit command line. ``gpus`` is the job's total."""

    kind: Kind
    command: tuple[str, ...]
    gpus: int = 1
    nodes: int = 1
    # the totals an elastic job may run at (8-32, 8,16,32); gpus is the largest
    elastic: str | None = None
    time_minutes: int | None = None
    name: str | None = None
    partition: str | None = None
    account: str | None = None
    gpu_type: str | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_gb: int | None = None
    time: str | None = None  # Slurm's spelling (90, 2:00:00, 1-00:00:00); wins over time_minutes
    mem_per_gpu: str | None = (
        None  # Slurm's spelling with a unit (80G, 512M); wins over mem_per_gpu_gb
    )
    run_tag: str | None = (
        None  # makes the default checkpoint directory unique when no name is given
    )
    output: str | None = None
    checkpoint_dir: str | None = None
    max_restarts: int | None = None
    grace_seconds: int | None = None
    launcher: Launcher | None = None
    requeue_on_timeout: bool = False
    ckpt_glob: str | None = None  # what counts as a checkpoint (comma-separated name patterns)
    env: tuple[tuple[str, str], ...] = ()
    inputs: str | None = None  # infer: file with one item per line
    params: tuple[str, ...] = ()  # sweep: one parameter set per array task
    parallel: int | None = None  # sweep: how many tasks run at once
    endpoint_file: str | None = None  # serve: where host:port is written
    preemptible: bool | None = None  # serve: default from the site's class config
    gpu_mem: str | None = None  # GPU memory the job needs (40G): types with less are ruled out
    share: bool = False  # ask for part of a GPU (the filter routes it to a shard)
    deadline: str | None = None  # as dl:deadline (ISO, UTC, or Unix seconds)
    deadline_steps: str | None = None  # as dl:deadline_steps (4h=10,6h=5,10h=2)
    qos: str | None = (
        None  # sbatch options passed through as they are (the filter checks them as any job's)
    )
    constraint: str | None = None
    dependency: str | None = None
    mail_type: str | None = None
    mail_user: str | None = None


@dataclass(frozen=True, slots=True)
class RenderedJob:
    """The script, its ``#SBATCH`` directives (as sbatch argv words) and the argv that submits it."""

    kind: str
    name: str
    script: str
    directives: tuple[str, ...]
    sbatch_argv: tuple[str, ...]
    output: str
    checkpoint_dir: str
    job_class: str
    endpoint_file: str = ""
    ckpt_globs: tuple[str, ...] = ()
    """The name patterns of checkpoints in ``checkpoint_dir`` (empty: none are kept)."""

    def filter_args(self) -> list[str]:
        """The script's directives as sbatch arguments (``slurm-dl filter check`` reads every
        sbatch option, and ignores those the filter's decision does not depend on)."""
        return list(self.directives)


def _check_sbatch_value(what: str, value: str) -> str:
    bad = [c for c in value if ord(c) < 32 or ord(c) == 127]
    if bad:
        raise RenderError(
            f"{what} {value!r}: control characters (such as newlines) cannot go into an #SBATCH line"
        )
    if '"' in value or "\\" in value:
        raise RenderError(
            f"{what} {value!r}: '\"' and '\\' cannot be written safely in an #SBATCH line"
        )
    if not value.strip():
        raise RenderError(f"{what} is empty")
    return value


def _check_slurm_word(what: str, value: str) -> str:
    """Partition, account, GPU type: Slurm names; no spaces or shell/sbatch syntax."""
    if not _SLURM_WORD.match(value):
        raise RenderError(f"{what} {value!r}: only letters, digits and . _ : + - are allowed")
    return value


DEFAULT_CKPT_GLOB = (
    "*.pt,*.pth,*.ckpt,*.safetensors,*.bin,*.pkl,*.pickle,*.npz,*.h5,*.msgpack,"
    "checkpoint-*,checkpoint_*,ckpt-*,ckpt_*,step-*,step_*,epoch-*,epoch_*,global_step*"
)
"""What counts as a checkpoint in ``$CKPT_DIR`` unless ``--ckpt-glob`` says otherwise: the
files PyTorch, Lightning, safetensors, NumPy, Keras and Flax write, names that count steps or
epochs, and the directories of Hugging Face's Trainer and DeepSpeed. A log or any other file
kept there (``steps.log``, ``config.json``) is not one."""
INFER_CKPT_GLOBS = ("position",)
"""infer's own checkpoint: how many inputs are done."""


def ckpt_globs(text: str | None, kind: str) -> tuple[str, ...]:
    """The checkpoint name patterns of a job of ``kind``: ``text`` (``--ckpt-glob``, comma
    separated) or :data:`DEFAULT_CKPT_GLOB`; infer's position file; none for serve."""
    if kind == "serve":
        return ()
    if kind == "infer":
        return INFER_CKPT_GLOBS
    globs = tuple(g.strip() for g in (text if text is not None else DEFAULT_CKPT_GLOB).split(","))
    for g in globs:
        if not g or "/" in g or any(ord(c) < 32 or ord(c) == 127 for c in g):
            raise RenderError(
                f"--ckpt-glob {text!r}: give file name patterns separated by commas, "
                "such as '*.pt,*.safetensors' (no '/', no empty pattern)"
            )
        if g.startswith(".") or g.endswith((".tmp", ".partial", ".incomplete")):
            raise RenderError(
                f"--ckpt-glob {g!r}: hidden names and *.tmp, *.partial, *.incomplete are "
                "saves still being written and never a checkpoint"
            )
    return globs


def is_checkpoint(name: str, globs: tuple[str, ...]) -> bool:
    """Whether an entry of the checkpoint directory called ``name`` is a checkpoint: the
    scripts' ``dl_is_checkpoint``, for ``dlsubmit status``."""
    if name.startswith(".") or name.endswith((".tmp", ".partial", ".incomplete")):
        return False
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _check_shell_value(what: str, value: str) -> str:
    if "\x00" in value:
        raise RenderError(f"{what} {value!r}: NUL bytes cannot be passed to a program")
    return value


def sbatch_directive(option: str, value: str | int | None = None) -> str:
    """``--option="value"`` as sbatch reads it in an ``#SBATCH`` line (quotes stripped by sbatch)."""
    if value is None:
        return option
    text = str(value)
    return (
        f"{option}={text}"
        if _SLURM_WORD.match(text) or re.match(r"^[A-Za-z0-9_.:%/+@=-]+$", text)
        else f'{option}="{text}"'
    )


def shell_words(command: tuple[str, ...], kind: str) -> str:
    """The command as shell words: each quoted; this kind's placeholders become variable expansions."""
    marks = PLACEHOLDERS.get(kind, {})
    out = []
    for word in command:
        _check_shell_value("command word", word)
        if not any(m in word for m in marks):
            out.append(shlex.quote(word))
            continue
        pieces = re.split("(" + "|".join(re.escape(m) for m in marks) + ")", word)
        out.append(
            "".join(
                f'"${{{marks[p]}}}"' if p in marks else shlex.quote(p) for p in pieces if p != ""
            )
        )
    return " ".join(out)


def _looks_like_a_path(word: str) -> bool:
    """``./my script.sh`` (a program whose name has a space) rather than a whole command line."""
    return word.startswith(("/", "./", "../", "~/")) and not any(c in word for c in ";|&<>$`")


def _resolve(spec: JobSpec, site: SiteConfig, user: UserDefaults) -> dict:
    if spec.kind not in KINDS:
        raise RenderError(f"job kind {spec.kind!r}: allowed: {', '.join(KINDS)}")
    if not spec.command:
        raise RenderError(
            "no command: put it after '--', e.g. dlsubmit train --gpus 2 -- python3 train.py"
        )
    cls = site.class_config(CLASS_OF_KIND[spec.kind])
    if spec.gpus < 0:
        raise RenderError(f"--gpus {spec.gpus}: must be 0 or more")
    if spec.gpus == 0 and spec.kind in ("train", "sweep"):
        raise RenderError(
            f"--gpus 0: a {spec.kind} job needs at least one GPU (--gpus 1 or more);\n"
            "  for CPU-only work use sbatch directly"
        )
    if (
        len(spec.command) == 1
        and " " in spec.command[0].strip()
        and not _looks_like_a_path(spec.command[0])
    ):
        words = spec.command[0].split()
        raise RenderError(
            f"the command is one quoted word, {spec.command[0]!r}:\n"
            f"  give its words after '--' without quotes: -- {' '.join(words[:4])}"
            f"{' ...' if len(words) > 4 else ''}"
        )
    if spec.nodes < 1:
        raise RenderError(f"--nodes {spec.nodes}: must be 1 or more")
    if spec.elastic and spec.nodes == 1 and spec.gpus > site.max_gpus_per_node > 0:
        # an elastic job's maximum spans whole nodes unless --nodes says otherwise
        spec = replace(spec, nodes=-(-spec.gpus // site.max_gpus_per_node))
    if spec.nodes > 1 and spec.kind != "train":
        raise RenderError(f"--nodes {spec.nodes}: only train jobs span nodes")
    if spec.gpus % spec.nodes:
        raise RenderError(
            f"--gpus {spec.gpus} over --nodes {spec.nodes}: the GPUs must split evenly across nodes"
        )
    gpn = spec.gpus // spec.nodes
    if gpn > site.max_gpus_per_node:
        raise RenderError(
            f"--gpus {spec.gpus} on {spec.nodes} node(s) needs {gpn} GPUs per node; the largest node here has "
            f"{site.max_gpus_per_node} (use --nodes {-(-spec.gpus // site.max_gpus_per_node)})"
        )
    try:
        if spec.time is not None or (spec.time_minutes is None and user.time is not None):
            text = spec.time if spec.time is not None else str(user.time)
            seconds = parse_time_seconds(text)
            time_text = text.strip()
        else:
            given = spec.time_minutes if spec.time_minutes is not None else user.time_minutes
            if given is not None and given < 1:
                raise UnitError(f"--time {given}: the time limit must be more than zero")
            minutes = given or cls.default_time_minutes
            seconds, time_text = minutes * 60, str(minutes)
    except UnitError as e:
        raise RenderError(str(e)) from None
    minutes = -(-seconds // 60)
    if minutes > cls.max_time_minutes:
        raise RenderError(
            f"--time {time_text}: {CLASS_OF_KIND[spec.kind]} jobs allow at most "
            f"{format_time(cls.max_time_minutes * 60)} ({cls.max_time_minutes} minutes) here"
        )
    name = (
        spec.name
        if spec.name is not None
        else f"{spec.kind}-{_SAFE_FILE.sub('_', spec.command[0].rsplit('/', 1)[-1])}"
    )
    if spec.name is not None and not spec.name.strip():
        raise RenderError("--name is empty")
    _check_sbatch_value("job name", name)
    partition = spec.partition or user.partition or cls.partition or site.default_partition or None
    account = spec.account or user.account
    gpu_type = spec.gpu_type or user.gpu_type
    for what, v in (("partition", partition), ("account", account)):
        if v:
            _check_slurm_word(what, v)
    gpu_types = _gpu_types(gpu_type, spec.gpu_mem, site)
    file_name = _SAFE_FILE.sub("_", name).strip("._") or spec.kind
    out_dir = user.output_dir
    suffix = "%A_%a" if spec.kind == "sweep" else "%j"
    output = spec.output or (
        f"{out_dir.rstrip('/')}/{file_name}-{suffix}.out"
        if out_dir
        else f"{file_name}-{suffix}.out"
    )
    _check_sbatch_value("output path", output)
    ckpt_root = user.checkpoint_root or "checkpoints"
    ckpt_leaf = (
        file_name if spec.name is not None or not spec.run_tag else f"{file_name}-{spec.run_tag}"
    )
    ckpt = spec.checkpoint_dir or f"{ckpt_root.rstrip('/')}/{ckpt_leaf}"
    _check_shell_value("checkpoint directory", ckpt)
    preemptible = cls.preemptible if spec.preemptible is None else spec.preemptible
    grace = (
        spec.grace_seconds
        if spec.grace_seconds is not None
        else int(round(site.preemption.grace_seconds))
    )
    if grace < 0 or grace >= seconds:
        raise RenderError(
            f"--grace {grace}: must be at least 0 and shorter than the time limit ({seconds} s)"
        )
    restarts = (
        spec.max_restarts
        if spec.max_restarts is not None
        else (user.max_restarts if user.max_restarts is not None else site.preemption.max_restarts)
    )
    if restarts < 0:
        raise RenderError(f"--max-restarts {restarts}: must be 0 or more")
    env = tuple(user.env) + tuple(spec.env)
    for k, v in env:
        if not _ENV_NAME.match(k):
            raise RenderError(
                f"environment variable name {k!r}: must be letters, digits and _, not starting with a digit"
            )
        _check_shell_value(f"value of {k}", v)
    params = spec.params
    parallel = spec.parallel
    if spec.kind == "sweep":
        if not params:
            raise RenderError(
                "a sweep needs parameter sets: --param VALUE (repeat) or --params-file FILE"
            )
        for p in params:
            _check_shell_value("sweep parameter", p)
        if parallel is None:
            parallel = len(params)
        if parallel < 1:
            raise RenderError(f"--parallel {parallel}: must be 1 or more")
    if spec.kind == "infer":
        if not spec.inputs:
            raise RenderError("an infer job needs --inputs FILE (one item per line)")
        _check_shell_value("inputs file", spec.inputs)
    endpoint = spec.endpoint_file or f"{file_name}.endpoint"
    _check_shell_value("endpoint file", endpoint)
    cpg = spec.cpus_per_gpu if spec.cpus_per_gpu is not None else user.cpus_per_gpu
    if cpg is not None and cpg < 1:
        raise RenderError(f"--cpus-per-gpu {cpg}: must be 1 or more")
    if cpg is not None and cpg > site.caps.max_cpus_per_gpu:
        raise RenderError(
            f"--cpus-per-gpu {cpg}: this site allows at most {site.caps.max_cpus_per_gpu}"
        )
    mem_text = None
    try:
        if spec.mem_per_gpu is not None or (
            spec.mem_per_gpu_gb is None and user.mem_per_gpu is not None
        ):
            mem_mb, mem_text = parse_memory_mb(
                spec.mem_per_gpu if spec.mem_per_gpu is not None else str(user.mem_per_gpu)
            )
        else:
            gb = spec.mem_per_gpu_gb if spec.mem_per_gpu_gb is not None else user.mem_per_gpu_gb
            if gb is not None:
                mem_mb, mem_text = parse_memory_mb(f"{gb}G" if gb > 0 else str(gb))
    except UnitError as e:
        raise RenderError(str(e)) from None
    if mem_text is not None and mem_mb > site.caps.max_mem_per_gpu_gb * 1024:
        raise RenderError(
            f"--mem-per-gpu {mem_text}: this site allows at most {site.caps.max_mem_per_gpu_gb:g}G"
        )
    _check_deadlines(spec)
    if spec.share and spec.gpus != 1:
        raise RenderError(
            f"--share: only a 1-GPU job can share a GPU (this one asks {spec.gpus}); "
            "leave out --share or use --gpus 1"
        )
    return dict(
        kind=spec.kind,
        job_class=CLASS_OF_KIND[spec.kind],
        name=name,
        minutes=minutes,
        seconds=seconds,
        time_text=time_text,
        partition=partition,
        account=account,
        gpu_type=gpu_types[0] if len(gpu_types) == 1 else None,
        gpu_types=gpu_types if len(gpu_types) > 1 else (),
        gpu_mem=spec.gpu_mem,
        share=spec.share,
        deadline=spec.deadline,
        deadline_steps=spec.deadline_steps,
        gpus=spec.gpus,
        nodes=spec.nodes,
        gpus_per_node=gpn,
        elastic=spec.elastic,
        output=output,
        checkpoint_dir=ckpt,
        preemptible=preemptible,
        checkpointable=cls.checkpointable,
        grace=grace,
        max_restarts=restarts,
        env=env,
        params=params,
        parallel=parallel,
        inputs=spec.inputs,
        endpoint=endpoint,
        launcher=spec.launcher or user.launcher or "auto",
        requeue_on_timeout=spec.requeue_on_timeout,
        ckpt_globs=ckpt_globs(spec.ckpt_glob, spec.kind),
        cpus_per_gpu=cpg,
        mem_per_gpu=mem_text,
        signal=site.preemption.signal,
        command=shell_words(spec.command, spec.kind),
        passed=_passed_through(spec, gpu_types),
    )


_PASSED = (
    ("qos", "--qos"),
    ("constraint", "--constraint"),
    ("dependency", "--dependency"),
    ("mail_type", "--mail-type"),
    ("mail_user", "--mail-user"),
)


def _passed_through(spec: JobSpec, gpu_types: tuple[str, ...]) -> list[str]:
    """``--qos`` and the like, as sbatch takes them: each value one #SBATCH word."""
    out = []
    for field_name, option in _PASSED:
        value = getattr(spec, field_name)
        if value is None:
            continue
        _check_sbatch_value(option, value)
        if any(c.isspace() for c in value):
            raise RenderError(f"{option} {value!r}: no spaces (sbatch reads one word)")
        if field_name == "constraint" and len(gpu_types) > 1:
            raise RenderError(
                f"--constraint {value} and --gpu-type {','.join(gpu_types)} both choose node "
                "features: give one"
            )
        out.append(f"{option}={value}")
    return out


def _directives(j: dict) -> list[str]:
    d = [
        sbatch_directive("--job-name", j["name"]),
        sbatch_directive("--output", j["output"]),
        "--open-mode=append",
        "--requeue",
    ]
    if j["kind"] != "serve" or j["preemptible"]:
        d.append(f"--signal=B:{j['signal']}@{j['grace']}")
    d.append(f"--time={j['time_text']}")
    d.append(f"--nodes={j['nodes']}")
    d.append("--ntasks-per-node=1")
    if j["gpus"]:
        d.append(
            f"--gpus-per-node={j['gpu_type'] + ':' if j['gpu_type'] else ''}{j['gpus_per_node']}"
        )
        if j["gpu_types"]:  # any of these: nodes whose feature is the type name
            d.append(f"--constraint={'|'.join(j['gpu_types'])}")
        if j["cpus_per_gpu"]:
            d.append(f"--cpus-per-gpu={j['cpus_per_gpu']}")
        if j["mem_per_gpu"]:
            d.append(f"--mem-per-gpu={j['mem_per_gpu']}")
    if j["partition"]:
        d.append(f"--partition={j['partition']}")
    if j["account"]:
        d.append(f"--account={j['account']}")
    if j["kind"] == "sweep":
        d.append(f"--array=0-{len(j['params']) - 1}%{j['parallel']}")
    d.extend(j["passed"])
    ckpt_hint = "1" if (j["checkpointable"] and j["kind"] != "serve") else "0"
    mem = f";gpu_mem={j['gpu_mem']}" if j["gpu_mem"] and j["gpus"] else ""
    mem += ";share=1" if j.get("share") else ""
    mem += f";deadline={j['deadline']}" if j.get("deadline") else ""
    mem += f";deadline_steps={j['deadline_steps']}" if j.get("deadline_steps") else ""
    mem += f";elastic={j['elastic']}" if j.get("elastic") else ""
    d.append(f"--comment=dl:class={j['job_class']};ckpt={ckpt_hint}{mem}")
    return d


def _check_deadlines(spec: JobSpec) -> None:
    """--deadline and --deadline-steps read as the filter reads them (it checks them again, with
    the site's caps, at submission)."""
    if spec.deadline is not None and spec.deadline_steps is not None:
        raise RenderError("--deadline and --deadline-steps: a job has one or the other")
    if spec.deadline is None and spec.deadline_steps is None:
        return
    if spec.deadline is not None and (
        parse_when(spec.deadline, 0.0) is None or ";" in spec.deadline
    ):
        raise RenderError(
            f"--deadline {spec.deadline}: expected YYYY-MM-DDTHH:MM (UTC), Unix seconds "
            "or a time after submission (6h, 90m, 2d)"
        )
    if spec.deadline_steps is not None:
        if any(c.isspace() or c == ";" for c in spec.deadline_steps):
            raise RenderError(
                f"--deadline-steps {spec.deadline_steps!r}: no spaces; steps like 4h=10,6h=5"
            )
        try:  # times after submission read from 0: the order of absolute and relative ones mixed
            soft_steps(spec.deadline_steps, 0.0)  # is left to the filter, which knows the time
        except ValueError as e:
            mixed = "times must increase" in str(e) and any(
                t >= 10**8 for t, _ in parse_deadline_steps(spec.deadline_steps, 0.0)
            )
            if not mixed:
                raise RenderError(f"--deadline-steps {spec.deadline_steps}: {e}") from None


def _gpu_types(text: str | None, gpu_mem: str | None, site: SiteConfig) -> tuple[str, ...]:
    """``--gpu-type h100`` or ``a100,h100`` (any of them), narrowed by ``--gpu-mem``: the types
    the job accepts, checked against the site's (empty: any type)."""
    asked = [t.strip() for t in (text or "").split(",") if t.strip()]
    for t in asked:
        _check_slurm_word("GPU type", t)
    real = site.site.name != BUILTIN_SITE_NAME
    by_lower = {n.lower(): n for n in site.gpu_type_names}
    asked = [by_lower.get(t.lower(), t) if real else t for t in asked]  # H100 is the site's h100
    unknown = [t for t in asked if real and t not in site.gpu_type_names]
    if unknown:
        raise RenderError(
            f"GPU type {unknown[0]!r}: this site has {', '.join(site.gpu_type_names)}"
        )
    if not gpu_mem:
        return tuple(dict.fromkeys(asked))
    try:
        need_mb, _ = parse_memory_mb(gpu_mem, "--gpu-mem")
    except UnitError as e:
        raise RenderError(str(e)) from None
    pool = asked or (site.gpu_type_names if real else [])
    mem = {g.name: g.memory_gb for g in site.gpu_types}
    fits = [t for t in pool if mem.get(t) is None or mem[t] * 1024 >= need_mb]
    if pool and not fits:
        have = ", ".join(f"{t} {mem[t]:g}G" for t in pool if mem.get(t) is not None)
        raise RenderError(f"--gpu-mem {gpu_mem}: no GPU type here has that much ({have})")
    return tuple(dict.fromkeys(fits)) if asked or len(fits) < len(pool) else ()


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    root = resources.files("slurm_dl") / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        comment_start_string="{%#",  # bash's ${#array[@]} must not open a Jinja comment
        comment_end_string="#%}",
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env


def render(spec: JobSpec, site: SiteConfig, user: UserDefaults | None = None) -> RenderedJob:
    """Render the script for ``spec``; raises :class:`RenderError` for values it cannot write safely."""
    j = _resolve(spec, site, user or UserDefaults())
    directives = _directives(j)
    script = _environment().get_template(f"{j['kind']}.sh.j2").render(job=j, directives=directives)
    return RenderedJob(
        kind=j["kind"],
        name=j["name"],
        script=script,
        directives=tuple(directives),
        sbatch_argv=("sbatch", "--parsable"),
        output=j["output"],
        checkpoint_dir=j["checkpoint_dir"],
        job_class=j["job_class"],
        endpoint_file=j["endpoint"],
        ckpt_globs=tuple(j["ckpt_globs"]),
    )
