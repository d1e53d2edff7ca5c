"""validate: refuse what cannot or must not run, saying what was asked, what is allowed and how to fix it."""

from __future__ import annotations


from ..arrays import parse_array
from ..config import SiteConfig
from ..model import Job, JobClass
from ..policy.deadline import deadline_feasible
from .decision import (
    CODE_MISSING_TIME_LIMIT,
    CODE_NODE_COUNT,
    CODE_POLICY,
    CODE_TIME_LIMIT,
    ESLURM_INVALID_GRES,
    Draft,
    FilterContext,
    Rejection,
)
from .access import check_access
from ..hints import parse_when, soft_steps, when_text
from .request import JobRequest, parse_gpu_tres
from ..steering import unscaled_limit_words
from .gpu_types import SIZE, accepted_types, first_steer, partition_types, site_model
from ..units import UnitError, parse_memory_mb
from .script import launches_steps, trapped_signals
from ..site_shape import site_shape

PREFIX = "slurm-dl: "


def _clip(text: str, most: int = 40) -> str:
    """User text quoted in a message, cut to fit a line."""
    return text if len(text) <= most else text[: most - 3] + "..."


def gpus_per_node_by_type(config: SiteConfig) -> dict[str, int]:
    return site_shape(config).gpus_per_node_by_type


def gpus_total_by_type(config: SiteConfig) -> dict[str, int]:
    return site_shape(config).gpus_total_by_type


def _types_text(config: SiteConfig) -> str:
    per_node = gpus_per_node_by_type(config)
    return ", ".join(f"{t} (up to {per_node.get(t, 0)} per node)" for t in config.gpu_type_names)


def _asked_text(req: JobRequest) -> str:
    """The GPU options as the user wrote them, roughly (for messages)."""
    bits = []
    for text, opt in (
        (req.tres_per_job, "--gpus"),
        (req.tres_per_node, "--gpus-per-node"),
        (req.tres_per_task, "--gpus-per-task"),
        (req.tres_per_socket, "--gpus-per-socket"),
    ):
        if text:
            bits.append(
                _clip(
                    f"{opt}={','.join(t.removeprefix('gres:').removeprefix('gpu:') for t in text.split(','))}"
                )
            )
    if req.num_tasks:
        bits.append(f"-n {req.num_tasks}")
    if req.ntasks_per_node:
        bits.append(f"--ntasks-per-node={req.ntasks_per_node}")
    if req.sockets_per_node and req.tres_per_socket:
        bits.append(f"--sockets-per-node={req.sockets_per_node}")
    if req.min_nodes:
        bits.append(f"-N {req.min_nodes}")
    return " ".join(bits) or "no GPU option"


def check_gpus(req: JobRequest, config: SiteConfig, shard_gpus: int = 0) -> Rejection | None:
    """The GPU request readable and within what the cluster has; ``shard_gpus``: the GPUs the
    job's own shards count as."""
    per_node = gpus_per_node_by_type(config)
    for text in (req.tres_per_job, req.tres_per_node, req.tres_per_task, req.tres_per_socket):
        for item in parse_gpu_tres(text)[1]:
            if "gpu" in item.split(":")[:2] or item.startswith("gpu"):
                return Rejection(
                    "validate.gpu_count",
                    f"{PREFIX}cannot read the GPU request {_clip(item.removeprefix('gres:'))!r}. "
                    f"Fix: a GPU count of 1 or more, e.g. --gpus=1 or --gres=gpu:{config.gpu_type_names[0]}:1.",
                    ESLURM_INVALID_GRES,
                )
    for ask in req.all_gpu_asks:
        if ask.gpu_type is not None and ask.gpu_type not in per_node:
            return Rejection(
                "validate.gpu_type",
                f"{PREFIX}GPU type '{_clip(ask.gpu_type)}' does not exist here (asked {_clip(f'gpu:{ask.gpu_type}:{ask.count}')}); "
                f"GPU types on this cluster: {_types_text(config)}. "
                f"Fix: ask for --gres=gpu:{config.gpu_type_names[0]}:N, or --gpus=N for any type.",
                ESLURM_INVALID_GRES,
            )
    on_one = req.gpus_on_one_node
    if on_one is not None:
        gtype = req.gpu_type
        most = per_node.get(gtype, 0) if gtype else site_shape(config).max_gpus_per_node
        if on_one > most:
            return Rejection(
                "validate.gpus_per_node",
                f"{PREFIX}asked {on_one} GPUs per node ({_asked_text(req)}) but no node has more than "
                f"{most}{' ' + gtype if gtype else ''}. "
                f"Fix: use --gpus={req.total_gpus} and slurm-dl packs it onto nodes, "
                f"or fewer GPUs (or tasks) per node: at most {most}.",
                CODE_NODE_COUNT,
            )
    total = req.total_gpus + shard_gpus
    cap = config.caps.max_gpus_per_job
    if cap is not None and total > cap:
        counted = " (a node's GPU shards count as one GPU)" if shard_gpus else ""
        return Rejection(
            "validate.gpus_per_job",
            f"{PREFIX}asked {total} GPUs{counted}; a job may use at most {cap} here. "
            f"Fix: ask for {cap} GPUs or fewer.",
            CODE_NODE_COUNT,
        )
    gpu_type = req.gpu_type
    exists = (
        gpus_total_by_type(config).get(gpu_type, 0) if gpu_type else site_shape(config).total_gpus
    )
    if total > exists:
        return Rejection(
            "validate.gpus_per_job",
            f"{PREFIX}asked {total} {gpu_type or ''} GPUs but the cluster has only {exists}. "
            f"Fix: ask for {exists} GPUs or fewer.".replace("  ", " "),
            CODE_NODE_COUNT,
        )
    node_count = site_shape(config).node_count
    if req.nodes > node_count:
        return Rejection(
            "validate.nodes",
            f"{PREFIX}asked {req.nodes} nodes but the cluster has only {node_count}. "
            f"Fix: -N{node_count} or fewer, or --gpus=N and let slurm-dl choose the nodes.",
            CODE_NODE_COUNT,
        )
    return None


def check_hints(req: JobRequest) -> Rejection | None:
    """Each ``dl:`` hint once: a key given twice with different values is refused, since only
    the first would be read (a second deadline, a second class)."""
    twice = req.repeated_hints
    if not twice:
        return None
    key, values = next(iter(sorted(twice.items())))
    shown = ", ".join(_clip(v, 24) for v in values[:3])
    return Rejection(
        "validate.hints",
        f"{PREFIX}dl:{_clip(key, 24)} is given {len(values)} times with different "
        f"values ({shown}); only one can count. Fix: give dl:{_clip(key, 24)} once.",
        CODE_POLICY,
    )


def check_gpu_memory(req: JobRequest, config: SiteConfig) -> Rejection | None:
    """A ``dl:gpu_mem`` hint (the GPU memory the job needs on each GPU) is a size some GPU here
    has: it chooses GPU types and shards, so an unreadable, zero or impossible one is refused
    rather than read as no need at all."""
    text = req.hints.get("gpu_mem")
    if text is None:
        return None
    try:
        need_mb, _ = parse_memory_mb(text[:40], "dl:gpu_mem")
    except (UnitError, ValueError):
        return Rejection(
            "validate.gpu_mem",
            f"{PREFIX}cannot read dl:gpu_mem={_clip(text)!r}: the GPU memory the "
            "job needs, as a size with a unit. Fix: e.g. dl:gpu_mem=10G (dlsubmit --gpu-mem 10G).",
            CODE_POLICY,
        )
    named = {a.gpu_type for a in req.all_gpu_asks if a.gpu_type}
    memory = {t.name: t.memory_gb for t in config.gpu_types if not named or t.name in named}
    if not memory or any(gb is None for gb in memory.values()):
        return None  # some type's memory is not known: nothing to measure it against
    best = max(memory, key=lambda t: memory[t])
    most = memory[best]
    if need_mb <= most * 1024:
        return None
    which = (
        f"a {best} GPU has ({most:g} GB)"
        if named
        else f"any GPU here has (at most {most:g} GB, on {best})"
    )
    return Rejection(
        "validate.gpu_mem",
        f"{PREFIX}dl:gpu_mem={_clip(text)} needs more memory than {which}. "
        f"Fix: dl:gpu_mem={int(most)}G or less (the need of each GPU), or leave it out.",
        CODE_POLICY,
    )


def check_gpu_types(req: JobRequest, draft: Draft, config: SiteConfig) -> Rejection | None:
    """GPU types named in a request some node can run: a node has GPUs of one type, so one
    node's GPUs name one type, and a type needs nodes in the partitions the job may use."""
    per_node = {
        a.gpu_type
        for a in (*req.gpus_per_node, *req.gpus_per_task, *req.gpus_per_socket)
        if a.gpu_type
    }
    named = per_node | {a.gpu_type for a in req.gpus_per_job if a.gpu_type}
    if not named:
        return None
    if len(named) > 1 and (per_node or req.max_nodes == 1):
        return Rejection(
            "validate.gpu_types",
            f"{PREFIX}asked GPUs of types {' and '.join(sorted(named))[:60]} on "
            f"one node ({_asked_text(req)}), but each node here has GPUs of one type. "
            "Fix: one type (--gres=gpu:TYPE:N), or --gpus=N for any type.",
            ESLURM_INVALID_GRES,
        )
    parts = _partitions_asked(req, draft, config)
    there = partition_types(parts, config)
    if there is None:
        return None
    missing = sorted(named - there)
    if not missing:
        return None
    t = missing[0]
    homes = sorted(
        (p.name for p in config.partitions if t in (partition_types([p.name], config) or ())),
        key=lambda name: len(partition_types([name], config) or ()),
    )  # its own partition first
    where = _clip(",".join(parts))
    fixes = [f"-p {homes[0]} for {t}"] if homes else []
    if there:
        fixes.append(f"--gres=gpu:{sorted(there)[0]}:N there")
    has = f"{', '.join(sorted(there))} nodes only" if there else "no GPU nodes"
    return Rejection(
        "validate.gpu_types",
        f"{PREFIX}asked {t} GPUs in partition {where}, which has {has}. "
        f"Fix: {', or '.join(fixes) or 'a GPU partition'}.",
        ESLURM_INVALID_GRES,
    )


def check_time(req: JobRequest, draft: Draft, config: SiteConfig) -> Rejection | None:
    cls = config.class_config(draft.job_class)
    name = draft.job_class.value
    if req.time_unlimited:
        return Rejection(
            "validate.time_limit",
            f"{PREFIX}asked --time=UNLIMITED for class {name}; at most {cls.max_time_minutes} min is allowed. "
            f"Fix: --time={cls.max_time_minutes} or less, and checkpoint to run longer.",
            CODE_TIME_LIMIT,
        )
    if req.time_limit_min is None:
        if not config.filter.defaults:
            return Rejection(
                "validate.time_limit",
                f"{PREFIX}no time limit given; class {name} allows up to {cls.max_time_minutes} min. "
                f"Fix: add --time=MINUTES (at most {cls.max_time_minutes}).",
                CODE_MISSING_TIME_LIMIT,
            )
        return None
    if req.time_limit_min > cls.max_time_minutes:
        return Rejection(
            "validate.time_limit",
            f"{PREFIX}asked --time={req.time_limit_min} min for class {name}; at most {cls.max_time_minutes} min "
            f"is allowed. Fix: --time={cls.max_time_minutes} or less, and checkpoint to run longer.",
            CODE_TIME_LIMIT,
        )
    part_name = req.partition or cls.partition or config.default_partition
    for p in config.partitions:
        if (
            p.name == part_name
            and p.max_time_minutes is not None
            and req.time_limit_min > p.max_time_minutes
        ):
            return Rejection(
                "validate.time_limit",
                f"{PREFIX}asked --time={req.time_limit_min} min in partition {p.name}; at most "
                f"{p.max_time_minutes} min is allowed there. Fix: --time={p.max_time_minutes} or less.",
                CODE_TIME_LIMIT,
            )
    return None


def _cpus_text(req: JobRequest) -> str:
    if req.exclusive:
        return "--exclusive"
    bits = []
    if req.cpus_per_task:
        bits.append(
            f"--cpus-per-task={req.cpus_per_task}"
            + (f" x {req.tasks} tasks" if req.tasks > 1 else "")
        )
    if req.pn_min_cpus and not req.cpus_per_task:
        bits.append(f"--mincpus={req.pn_min_cpus}")
    if not bits and req.min_cpus and req.min_cpus > 1:
        bits.append(f"{req.min_cpus} CPUs")
    return " ".join(bits) or f"{req.cpus_asked} CPUs"


def check_per_gpu_caps(
    req: JobRequest, config: SiteConfig, shard_gpus: int = 0
) -> Rejection | None:
    """CPUs and memory per GPU within the caps, whichever option asks for them: --cpus-per-gpu,
    --cpus-per-task (× tasks), --mincpus, -n, --mem, --mem-per-cpu, --mem-per-gpu, --exclusive.
    A job on GPU shards has the caps of the GPUs its shards count as (``shard_gpus``)."""
    cpus = req.per_gpu_value(req.cpus_per_tres)
    cap = config.caps.max_cpus_per_gpu
    if cpus is not None and cpus > cap:
        return Rejection(
            "validate.cpus_per_gpu",
            f"{PREFIX}asked --cpus-per-gpu={cpus}; at most {cap} CPUs per GPU are allowed here. "
            f"Fix: --cpus-per-gpu={cap} or less.",
            CODE_POLICY,
        )
    mem_mb = req.per_gpu_value(req.mem_per_tres)
    cap_mb = int(config.caps.max_mem_per_gpu_gb * 1024)
    if mem_mb is not None and mem_mb > cap_mb:
        return Rejection(
            "validate.mem_per_gpu",
            f"{PREFIX}asked --mem-per-gpu={mem_mb}M; at most {cap_mb}M "
            f"({config.caps.max_mem_per_gpu_gb:g} GB) per GPU is allowed here. Fix: --mem-per-gpu={cap_mb}M or less.",
            CODE_POLICY,
        )
    gpus = req.total_gpus + shard_gpus
    if gpus <= 0:
        return None
    node_cpus, node_mem = site_shape(config).node_cpus_mem.get(req.gpu_type) or site_shape(
        config
    ).node_cpus_mem.get(None, (0, 0))
    nodes = req.nodes
    if req.exclusive:
        held = node_cpus * nodes
        if held > cap * gpus:
            whole = -(-node_cpus // cap)
            return Rejection(
                "validate.exclusive",
                f"{PREFIX}--exclusive holds whole nodes ({node_cpus} CPUs each) for {gpus} GPU(s): "
                f"{held / gpus:g} CPUs per GPU, at most {cap} are allowed here. "
                f"Fix: drop --exclusive (ask --cpus-per-gpu={cap} instead), or ask for at least {whole} GPUs per node.",
                CODE_POLICY,
            )
    total_cpus = req.cpus_asked
    if total_cpus > cap * gpus:
        return Rejection(
            "validate.cpus_per_gpu",
            f"{PREFIX}asked {total_cpus} CPUs ({_cpus_text(req)}) for {gpus} GPU(s); at most {cap} CPUs per GPU "
            f"are allowed here, {cap * gpus} for this job. Fix: fewer CPUs (--cpus-per-gpu={cap}), "
            f"or more GPUs.",
            CODE_POLICY,
        )
    mem_total, what = _memory_asked(req, total_cpus, node_mem)
    if mem_total is not None and mem_total > cap_mb * gpus:
        return Rejection(
            "validate.mem_per_gpu",
            f"{PREFIX}asked {mem_total}M of memory ({what}) for {gpus} GPU(s); at most {cap_mb}M "
            f"({config.caps.max_mem_per_gpu_gb:g} GB) per GPU is allowed here, {cap_mb * gpus}M for this job. "
            f"Fix: --mem-per-gpu={cap_mb}M or less instead, or more GPUs.",
            CODE_POLICY,
        )
    return None


def _partitions_asked(req: JobRequest, draft: Draft, config: SiteConfig) -> list[str]:
    if req.partition:
        return [p.strip() for p in req.partition.split(",") if p.strip()]
    return [config.class_config(draft.job_class).partition or config.default_partition]


def cpu_only(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft | Rejection:
    """A job without GPUs in a partition with GPU nodes follows ``caps.cpu_only_jobs``: without
    a rule, a few CPU jobs asking whole nodes' CPUs or memory strand every GPU on them."""
    caps = config.caps
    if req.total_gpus > 0 or draft.shard_gpus > 0 or caps.cpu_only_jobs == "allow":
        return draft
    known = {p.name for p in config.partitions}
    asked = _partitions_asked(req, draft, config)
    if all(p in known and p not in config.gpu_partitions for p in asked):
        return draft  # a CPU partition: not the GPUs' business
    where = _clip(",".join(asked))
    if caps.cpu_only_jobs == "route":
        changes = {**draft.changes, "partition": caps.cpu_only_partition}
        notice = (
            f"{PREFIX}a job without GPUs runs in partition {caps.cpu_only_partition}, not {where}"
        )
        return draft.evolve(changes=changes, notices=(*draft.notices, notice))
    if caps.cpu_only_jobs == "refuse":
        return Rejection(
            "validate.cpu_only",
            f"{PREFIX}this job asks for no GPU; partition {where} is for GPU jobs. "
            "Fix: add --gpus=N, or submit to a CPU partition (-p).",
            CODE_POLICY,
        )
    most_cpus, most_mb = caps.cpu_only_cpus, caps.cpu_only_mem_mb
    fix = f"Fix: at most {most_cpus} CPUs and {most_mb}M of memory, or add --gpus=N."
    if req.exclusive:
        return Rejection(
            "validate.cpu_only",
            f"{PREFIX}a job without GPUs may not hold whole GPU nodes (--exclusive). {fix}",
            CODE_POLICY,
        )
    cpus = req.cpus_asked
    if cpus > most_cpus:
        return Rejection(
            "validate.cpu_only",
            f"{PREFIX}asked {cpus} CPUs ({_cpus_text(req)}) without a GPU; jobs without "
            f"GPUs may use at most {most_cpus} CPUs here. {fix}",
            CODE_POLICY,
        )
    mem, what = _memory_asked(req, cpus, site_shape(config).node_cpus_mem.get(None, (0, 0))[1])
    if mem is not None and mem > most_mb:
        return Rejection(
            "validate.cpu_only",
            f"{PREFIX}asked {mem}M of memory ({what}) without a GPU; jobs without GPUs "
            f"may use at most {most_mb}M here. {fix}",
            CODE_POLICY,
        )
    return draft


def _memory_asked(req: JobRequest, cpus: int, node_mem: int) -> tuple[int | None, str]:
    """Memory of the whole job (MB) by --mem (0: whole nodes) or --mem-per-cpu, and the option."""
    if req.mem_per_node_mb is not None:
        per_node = req.mem_per_node_mb or node_mem
        return per_node * req.nodes, (
            f"--mem={req.mem_per_node_mb}M" if req.mem_per_node_mb else "--mem=0"
        )
    if req.mem_per_cpu_mb is not None:
        return req.mem_per_cpu_mb * cpus, f"--mem-per-cpu={req.mem_per_cpu_mb}M x {cpus} CPUs"
    return None, ""


def check_handler(req: JobRequest, draft: Draft, config: SiteConfig) -> Draft | Rejection:
    """A job that opts in needs its signal to reach a handler: a batch shell without a ``trap``
    for it dies of it (``WTERMSIG``), its work since the last checkpoint lost; a signal for the
    steps of a script that starts no ``srun`` step reaches nothing (submitit without srun). Such
    a job is accepted but never preempted, with a warning (``filter.unhandled_signal =
    "warn"``), or refused ("refuse"). Only a script the shim sent is read (srun/salloc: none)."""
    if not draft.checkpointable or not req.has_script or req.script_head is None:
        return draft
    signal = draft.signal or config.preemption.signal
    if draft.signal_target == "steps":
        if launches_steps(req.script_head):
            return draft
        problem = f"the script starts no srun step, so a preemption's {signal} to the steps reaches nothing"
        fix = f"Fix: run your program with srun, or trap {signal} in the script with --signal=B:{signal}@90."
    elif signal in trapped_signals(req.script_head):
        return draft
    else:
        problem = (
            f"the batch script does not trap {signal}, so a preemption's {signal} would end the job"
        )
        fix = (
            f"Fix: trap {signal} in the script, or --signal={signal}@90 with dl:ckpt=steps where "
            "your program (srun) handles it."
        )
    if config.filter.unhandled_signal == "refuse":
        return Rejection("validate.signal_handler", f"{PREFIX}{problem}. {fix}", CODE_POLICY)
    notice = f"{PREFIX}{problem}: it will not be preempted. {fix}"
    return draft.evolve(
        checkpointable=False, signal=None, lead_s=None, notices=(*draft.notices, notice)
    )


def requested_deadline(req: JobRequest, now: float) -> tuple[int | None, str | None]:
    """The deadline (Unix seconds) from ``job_desc.deadline`` or a ``dl:deadline=`` hint (a time,
    or a span after ``now``, the submission), or the bad text."""
    if req.deadline:
        return req.deadline, None
    text = req.hints.get("deadline")
    if text is None:
        return None, None
    value = parse_when(text, now)
    return (value, None) if value is not None else (None, text)


def requested_soft(
    req: JobRequest, now: float
) -> tuple[list[tuple[int, float]] | None, str | None]:
    """The soft-deadline steps of a ``dl:deadline_steps=`` hint, or what is wrong with it."""
    text = req.hints.get("deadline_steps")
    if text is None:
        return None, None
    try:
        return soft_steps(text, now), None
    except ValueError as e:
        return None, str(e)


def check_deadline(
    req: JobRequest, ctx: FilterContext, config: SiteConfig
) -> tuple[int | None, list[tuple[int, float]] | None, Rejection | None]:
    """Admission of a deadline, or of soft-deadline steps (the last step is checked as a strict
    deadline would be: the same time limit, horizon and per-user quota), by the policy's own
    feasibility check (:func:`deadline_feasible`). Returns (deadline, steps, rejection)."""
    deadline, bad = requested_deadline(req, ctx.now)
    if bad is not None:
        return (
            None,
            None,
            Rejection(
                "validate.deadline",
                f"{PREFIX}cannot read the deadline {_clip(bad)!r}. "
                "Fix: dl:deadline=YYYY-MM-DDTHH:MM (UTC), Unix seconds, or 6h (after now).",
                CODE_POLICY,
            ),
        )
    steps, why = requested_soft(req, ctx.now)
    if why is not None:
        return (
            None,
            None,
            Rejection(
                "validate.deadline",
                f"{PREFIX}cannot use dl:deadline_steps: {why}. Fix: steps like "
                "dl:deadline_steps=4h=10,6h=5,10h=2 (times rising, values falling).",
                CODE_POLICY,
            ),
        )
    if steps is not None and deadline is not None:
        return (
            None,
            None,
            Rejection(
                "validate.deadline",
                f"{PREFIX}a job has a deadline or deadline steps, not both. "
                "Fix: keep one of dl:deadline and dl:deadline_steps (or --deadline).",
                CODE_POLICY,
            ),
        )
    what = "deadline"
    if steps is not None:
        what = "last deadline step"
        deadline = steps[-1][0]
    if deadline is None:
        return None, None, None
    if req.time_limit_min is None:
        return (
            deadline,
            steps,
            Rejection(
                "validate.deadline",
                f"{PREFIX}a {what} ({when_text(deadline)}) needs an explicit time limit that fits before it. "
                "Fix: add --time=MINUTES.",
                CODE_MISSING_TIME_LIMIT,
            ),
        )
    job = Job(
        job_id=0,
        user=req.user_name or "",
        deadline=float(deadline),
        time_limit=req.time_limit_min * 60.0,
    )
    spec = parse_array(req.array)
    if req.array and spec is None:
        return (
            deadline,
            steps,
            Rejection(
                "validate.deadline",
                f"{PREFIX}cannot count the tasks of --array={req.array[:40]!r} for the deadline quota. "
                "Fix: --array=A-B[:STEP][%LIMIT] or a list of those.",
                CODE_POLICY,
            ),
        )
    tasks = spec.tasks if spec else 1
    waves = -(-tasks // spec.concurrent) if spec else 1
    ok, reason = deadline_feasible(
        job, ctx.now, config, user_deadline_jobs=ctx.user_deadline_jobs, tasks=tasks, waves=waves
    )
    if ok:
        return (None, steps, None) if steps is not None else (deadline, None, None)
    quota = config.policy.deadline
    return (
        deadline,
        steps,
        Rejection(
            "validate.deadline",
            f"{PREFIX}{what} {when_text(deadline)} with --time={req.time_limit_min} min refused: {reason}. "
            f"Allowed: a time limit that ends before the deadline if started now, a deadline at most "
            f"{quota.max_deadline_days:g} days ahead, at most {quota.max_deadline_jobs_per_user} pending deadline jobs "
            "per user. Fix: a later deadline, a shorter --time, or no deadline.",
            CODE_POLICY,
        ),
    )


def validate(
    req: JobRequest, draft: Draft, config: SiteConfig, ctx: FilterContext
) -> Draft | Rejection:
    for found in (
        check_hints(req),
        check_gpus(req, config, draft.shard_gpus),
        check_time(req, draft, config),
        check_per_gpu_caps(req, config, draft.shard_gpus),
        check_gpu_memory(req, config),
        check_gpu_types(req, draft, config),
    ):
        if found is not None:
            return found
    routed = cpu_only(req, draft, config)
    if isinstance(routed, Rejection):
        return routed
    handled = check_handler(req, routed, config)
    if isinstance(handled, Rejection):
        return handled
    if (
        req.total_gpus > 0 and len(config.gpu_types) > 1
    ):  # several types: the set it may be steered within
        # (a job's own shards stay where shards are: its types are not chosen here)
        types, why = accepted_types(req, config, handled.job_class)
        if not types and why and all(SIZE in w for w in why):  # only all types together hold it
            notice = (
                f"{PREFIX}no one GPU type here has {req.total_gpus} GPUs: the job spans types and "
                "runs at the pace of its slowest"
            )
            handled = handled.evolve(notices=(*handled.notices, notice))
            why = []
            types = None
        if types is not None and not types:
            return Rejection(
                "validate.gpu_types",
                f"{PREFIX}no GPU type here fits this job ({_clip('; '.join(why), 160)}). "
                "Fix: a partition, --constraint or GPU memory need some type meets.",
                ESLURM_INVALID_GRES,
            )
        partition = req.partition or config.class_config(handled.job_class).partition
        steer = (
            first_steer(req, handled.job_class, types, config, partition)
            if types and len(types) > 1
            else {}
        )
        handled = handled.evolve(gpu_types=tuple(types or ()), changes={**handled.changes, **steer})
    admitted = check_access(req, handled, config, ctx)
    if isinstance(admitted, Rejection):
        return admitted
    draft = admitted
    deadline, steps, rejection = check_deadline(req, ctx, config)
    if rejection is not None:
        return rejection
    if (deadline is not None or steps) and len(draft.gpu_types) > 1 and req.time_limit_min:
        note = unscaled_limit_notice(req, draft, config)
        if note:
            draft = draft.evolve(notices=(*draft.notices, note))
    return draft.evolve(deadline=deadline, soft_deadlines=tuple(steps or ()))


def unscaled_limit_notice(req: JobRequest, draft: Draft, config: SiteConfig) -> str | None:
    """A deadline job that accepts GPU types of different speeds is told its time limit is
    not scaled by the speed of the type it gets (:func:`unscaled_limit_words`)."""
    model, _ = site_model(config)
    job = Job(
        job_id=0,
        user=req.user_name or "",
        name=req.name or "",
        num_gpus=req.total_gpus,
        job_class=draft.job_class or JobClass.TRAIN,
    )
    speeds = model.speeds(job)
    words = unscaled_limit_words(
        req.time_limit_min * 60.0, {t: speeds[t].value for t in draft.gpu_types if t in speeds}
    )
    return f"{PREFIX}{words}" if words else None
