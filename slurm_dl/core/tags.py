"""The ``admin_comment`` tag the filter writes and the prioritizer reads.

Format, version 1: ``sdl1:`` followed by ``key=value`` pairs joined by ``;``, e.g.
``sdl1:class=train;ckpt=1;gpus=16;shape=2x8;deadline=1763700000;orig=gpu.16``.

Keys: ``class`` (a :class:`~slurm_dl.core.model.JobClass` value), ``ckpt`` (``0``: never signalled
or requeued; ``1``: opted in, the signal goes to the batch shell; ``steps``: opted in, it goes to
the job's steps), ``gpus`` (total
GPUs, ≥ 0), ``shape`` (``NxG`` nodes × GPUs per node, ``spread`` or ``any``), ``deadline``
(Unix seconds, optional), ``orig`` (the request as the user wrote it, optional), ``sig`` and
``lead`` (the signal and lead time the job's own ``--signal`` names, optional: the prioritizer
then sends that signal and waits that long, within the site's maximum, before a requeue),
``types`` (the GPU types the job accepts, ``a100+h100``, optional: the prioritizer steers it
within them), ``shards`` (``K:S``: a job on K GPU shards of S per GPU, optional; ``gpus`` is
then 0: it holds part of one GPU, no whole one), ``soft`` (soft-deadline steps ``T:V+T:V…``,
optional: Unix seconds rising, each with the share of the job's utility still earned by then,
falling, the first 1).

:func:`parse_tag` is strict and total: anything that is not exactly a well-formed tag gives
``None``; it never raises. Users cannot write ``admin_comment`` (Slurm makes it admin-only and the
filter overwrites it), so a tag that parses is one the filter wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .elastic_sizes import ElasticSizes, parse_tag_sizes
from .model import JobClass

TAG_PREFIX = "sdl1:"
MAX_TAG_LENGTH = 512
MAX_GPUS = 1_000_000
MAX_DEADLINE = 10**11  # Unix seconds (year 5138)
_VALUE = re.compile(r"^[A-Za-z0-9_.:@+-]{1,128}$")
_SHAPE = re.compile(r"^(?:(\d{1,4})x(\d{1,3})|spread|any)$")
_KEYS_REQUIRED = ("class", "ckpt", "gpus", "shape")
_KEYS_OPTIONAL = ("deadline", "orig", "sig", "lead", "types", "shards", "soft", "elastic")
_SHARDS = re.compile(r"^(\d{1,3}):(\d{1,3})$")
MAX_SHARDS_PER_GPU = 128
_TYPES = re.compile(r"^[A-Za-z0-9_.-]{1,32}(?:\+[A-Za-z0-9_.-]{1,32}){0,31}$")
_SIG = re.compile(r"^[A-Z0-9]{1,8}$")
MAX_LEAD_S = 86_400
MAX_SOFT_STEPS = 8
_SOFT_STEP = re.compile(r"^(\d{1,11}):(1|0\.\d{1,4})$")


def soft_steps_valid(steps) -> bool:
    """Soft-deadline steps as the filter writes them: 1 to :data:`MAX_SOFT_STEPS` (Unix seconds,
    share of the utility) with times rising, shares falling, the first 1 and all above 0."""
    if not 1 <= len(steps) <= MAX_SOFT_STEPS or steps[0][1] != 1.0:
        return False
    for (t0, v0), (t1, v1) in zip(steps, steps[1:]):
        if not (t1 > t0 and v1 < v0):
            return False
    return all(0 <= t <= MAX_DEADLINE and 0.0 < v <= 1.0 for t, v in steps)


def encode_soft(steps) -> str:
    """The ``soft`` value for steps (see :func:`soft_steps_valid`); ValueError outside the format."""
    if not soft_steps_valid(steps):
        raise ValueError(
            f"tag soft steps must rise in time and fall in value from 1, got {steps!r}"
        )
    return "+".join(f"{int(t)}:{'1' if v >= 1.0 else f'{v:.4f}'.rstrip('0')}" for t, v in steps)


def parse_soft(text: str) -> tuple[tuple[int, float], ...] | None:
    """The steps in a ``soft`` value, or None if it is not exactly one the filter writes."""
    steps = []
    for item in text.split("+"):
        m = _SOFT_STEP.match(item)
        if m is None:
            return None
        steps.append((int(m.group(1)), float(m.group(2))))
    return tuple(steps) if soft_steps_valid(steps) else None


@dataclass(frozen=True, slots=True)
class JobTag:
    """What the filter decided about a job, as the prioritizer needs it."""

    job_class: JobClass
    checkpointable: bool
    gpus: int
    shape: str = "any"
    deadline: int | None = None
    original: str | None = None
    signal_target: str = "batch"
    """Where the preemption signal goes when ``checkpointable``: ``batch`` or ``steps``."""
    signal: str | None = None
    """The signal the job's own ``--signal`` names (``USR2``, ``USR1``…); None: the site's."""
    lead_s: int | None = None
    """The seconds its ``--signal=…@N`` gives the handler before the requeue; None: the site's."""
    gpu_types: tuple[str, ...] | None = None
    """The GPU types the job accepts (the prioritizer steers it within them); None: not recorded."""
    shards: tuple[int, int] | None = None
    """A job on GPU shards: (shards it holds, shards per GPU); None: whole GPUs."""
    soft_deadlines: tuple[tuple[int, float], ...] | None = None
    """Soft-deadline steps (Unix seconds, share of the utility, see :func:`soft_steps_valid`)."""
    elastic: ElasticSizes | None = None
    """The GPU counts an elastic job may run at (``elastic=8-32`` / ``8+16+32``); None: rigid."""

    @property
    def shape_nodes(self) -> int | None:
        m = _SHAPE.match(self.shape)
        return int(m.group(1)) if m and m.group(1) else None

    @property
    def shape_gpus_per_node(self) -> int | None:
        m = _SHAPE.match(self.shape)
        return int(m.group(2)) if m and m.group(2) else None


def safe_value(text: str) -> str:
    """Map free text onto the tag's value alphabet (``orig`` carries user-written requests)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.:@+-]", ".", text)[:128]
    return cleaned or "none"


def _ckpt_text(tag: JobTag) -> str:
    if not tag.checkpointable:
        return "0"
    if tag.signal_target not in ("batch", "steps"):
        raise ValueError(f"tag signal target must be batch or steps, got {tag.signal_target!r}")
    return "steps" if tag.signal_target == "steps" else "1"


_CKPT = {"0": (False, "batch"), "1": (True, "batch"), "steps": (True, "steps")}


def encode_tag(tag: JobTag) -> str:
    """The ``admin_comment`` text for a tag. Raises ValueError for a value outside the format."""
    if not _SHAPE.match(tag.shape):
        raise ValueError(f"tag shape must be NxG, 'spread' or 'any', got {tag.shape!r}")
    if not 0 <= tag.gpus <= MAX_GPUS:
        raise ValueError(f"tag gpus must be 0..{MAX_GPUS}, got {tag.gpus}")
    parts = [
        f"class={JobClass(tag.job_class).value}",
        f"ckpt={_ckpt_text(tag)}",
        f"gpus={int(tag.gpus)}",
        f"shape={tag.shape}",
    ]
    if tag.deadline is not None:
        if not 0 <= tag.deadline <= MAX_DEADLINE:
            raise ValueError(f"tag deadline must be 0..{MAX_DEADLINE}, got {tag.deadline}")
        parts.append(f"deadline={int(tag.deadline)}")
    if tag.signal is not None:
        if not _SIG.match(tag.signal):
            raise ValueError(f"tag sig must be a signal name like USR2, got {tag.signal!r}")
        parts.append(f"sig={tag.signal}")
    if tag.lead_s is not None:
        if not 0 <= tag.lead_s <= MAX_LEAD_S:
            raise ValueError(f"tag lead must be 0..{MAX_LEAD_S} s, got {tag.lead_s}")
        parts.append(f"lead={int(tag.lead_s)}")
    if tag.gpu_types:
        text = "+".join(tag.gpu_types)
        if not _TYPES.match(text):
            raise ValueError(f"tag types must be GPU type names joined by +, got {text!r}")
        parts.append(f"types={text}")
    if tag.shards is not None:
        k, per_gpu = tag.shards
        if not 1 <= k <= per_gpu <= MAX_SHARDS_PER_GPU:
            raise ValueError(
                f"tag shards must be K:S with 1 <= K <= S <= {MAX_SHARDS_PER_GPU}, got {k}:{per_gpu}"
            )
        parts.append(f"shards={int(k)}:{int(per_gpu)}")
    if tag.soft_deadlines:
        parts.append(f"soft={encode_soft(tag.soft_deadlines)}")
    if tag.elastic is not None:
        parts.append(f"elastic={tag.elastic.tag_text()}")
    if tag.original is not None:
        if not _VALUE.match(tag.original):
            raise ValueError(f"tag orig has characters outside [A-Za-z0-9_.:@+-]: {tag.original!r}")
        parts.append(f"orig={tag.original}")
    return TAG_PREFIX + ";".join(parts)


def _int(text: str, lo: int, hi: int) -> int | None:
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        return None
    v = int(text)
    return v if lo <= v <= hi else None


def parse_tag(text: object) -> JobTag | None:
    """The tag in ``text``, or ``None`` if it is not exactly a valid version-1 tag. Never raises."""
    if not isinstance(text, str) or len(text) > MAX_TAG_LENGTH or not text.startswith(TAG_PREFIX):
        return None
    fields: dict[str, str] = {}
    for pair in text[len(TAG_PREFIX) :].split(";"):
        key, sep, value = pair.partition("=")
        if (
            not sep
            or key in fields
            or key not in _KEYS_REQUIRED + _KEYS_OPTIONAL
            or not _VALUE.match(value)
        ):
            return None
        fields[key] = value
    if any(k not in fields for k in _KEYS_REQUIRED):
        return None
    try:
        job_class = JobClass(fields["class"])
    except ValueError:
        return None
    ckpt = _CKPT.get(fields["ckpt"])
    gpus = _int(fields["gpus"], 0, MAX_GPUS)
    if ckpt is None or gpus is None or not _SHAPE.match(fields["shape"]):
        return None
    deadline = None
    if "deadline" in fields:
        deadline = _int(fields["deadline"], 0, MAX_DEADLINE)
        if deadline is None:
            return None
    signal = fields.get("sig")
    if signal is not None and not _SIG.match(signal):
        return None
    lead = None
    if "lead" in fields:
        lead = _int(fields["lead"], 0, MAX_LEAD_S)
        if lead is None:
            return None
    types = None
    if "types" in fields:
        if not _TYPES.match(fields["types"]):
            return None
        types = tuple(fields["types"].split("+"))
    shards = None
    if "shards" in fields:
        m = _SHARDS.match(fields["shards"])
        if m is None or not 1 <= int(m.group(1)) <= int(m.group(2)) <= MAX_SHARDS_PER_GPU:
            return None
        shards = (int(m.group(1)), int(m.group(2)))
    soft = None
    if "soft" in fields:
        soft = parse_soft(fields["soft"])
        if soft is None:
            return None
    elastic = None
    if "elastic" in fields:
        elastic = parse_tag_sizes(fields["elastic"])
        if elastic is None or "," in fields["elastic"]:
            return None
    return JobTag(
        job_class,
        ckpt[0],
        gpus,
        fields["shape"],
        deadline,
        fields.get("orig"),
        ckpt[1],
        signal,
        lead,
        types,
        shards,
        soft,
        elastic,
    )
