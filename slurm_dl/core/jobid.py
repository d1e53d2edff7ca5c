"""Job ids as users type them on the command line, parsed the way Slurm reads them. Pure.

Slurm names a job ``27``, a task of a job array ``27_1`` (several: ``27_[1-3,5]``) and a
component of a heterogeneous job ``27+0``. Python's ``int()`` reads ``"2_9"`` as 29 (underscores
are digit separators) and ``"٢٧"`` as 27, so a command that converts its argument with ``int()``
acts on another job; every command parses its JOBID here instead, and hands Slurm the canonical
form (``str(ref)``), never a number glued together from the parts.

Accepted like Slurm: leading zeros (``027`` is job 27, ``2_09`` task 9 of job 2). Refused: digits
other than ASCII 0-9, signs, spaces, digit separators, a ``%N`` throttle (that belongs to
``sbatch --array``), stepped ranges, and numbers beyond Slurm's limits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import SlurmDLError

MAX_JOB_ID = 0xFFFFFFFD  # above: Slurm's NO_VAL and INFINITE
MAX_ARRAY_TASK_ID = 4_000_000  # MaxArraySize is at most 4,000,001: tasks 0..4,000,000
MAX_HET_OFFSET = 127  # Slurm's MAX_HET_JOB_COMPONENTS is 128
MAX_TASKS_NAMED = 100_000  # one bracket may name this many tasks; the array's own id names all
MAX_TEXT = 256
WIDTH = 80  # a message, with the CLI's "error: " in front, fits this many columns

ONE_FORMS = "use 27, 27_1 (array task) or 27+0 (hetjob component)"
MANY_FORMS = "use 27, 27_1, 27_[1,3-5] (array tasks), 27+0 (hetjob)"

_NUM = r"([0-9]+)"
_PLAIN = re.compile(_NUM, re.ASCII)
_TASK = re.compile(_NUM + "_" + _NUM, re.ASCII)
_BRACKET = re.compile(_NUM + r"_\[([0-9,-]*)\]", re.ASCII)
_HET = re.compile(_NUM + r"\+" + _NUM, re.ASCII)
_SPAN = re.compile(_NUM + "(?:-" + _NUM + ")?", re.ASCII)


class JobIdError(SlurmDLError, ValueError):
    """A JOBID argument that is not a job id Slurm would read the same way; one line for users."""


@dataclass(frozen=True, slots=True)
class JobRef:
    """One job (``task`` and ``het_offset`` None, ``spans`` empty), one array task (``task``),
    several array tasks (``spans``: inclusive ranges as typed) or one hetjob component.

    It has no ``__int__`` on purpose: ``int(ref)`` fails rather than gluing the parts together.
    """

    job_id: int
    task: int | None = None
    spans: tuple[tuple[int, int], ...] = ()
    het_offset: int | None = None

    @property
    def plain(self) -> bool:
        """A job id and nothing more."""
        return self.task is None and not self.spans and self.het_offset is None

    @property
    def task_count(self) -> int:
        """How many array tasks the ref names (0 for a job or a hetjob component); overlapping
        spans count once, and nothing is expanded."""
        if self.task is not None:
            return 1
        total, reach = 0, -1
        for lo, hi in sorted(self.spans):
            if hi > reach:
                total += hi - max(lo, reach + 1) + 1
                reach = hi
        return total

    def __str__(self) -> str:
        """Slurm's own form: ``27``, ``27_1``, ``27_[1-3,5]``, ``27+0``."""
        if self.task is not None:
            return f"{self.job_id}_{self.task}"
        if self.spans:
            parts = (str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.spans)
            return f"{self.job_id}_[{','.join(parts)}]"
        if self.het_offset is not None:
            return f"{self.job_id}+{self.het_offset}"
        return str(self.job_id)


def parse_job_ref(text: object, *, several: bool = False) -> JobRef:
    """``text`` as Slurm reads a job id; JobIdError (one line) for anything else.

    ``several``: accept ``27_[1-3,5]`` (commands that act on many tasks at once, like cancel);
    without it a bracket must name exactly one task.
    """
    forms = MANY_FORMS if several else ONE_FORMS
    if not isinstance(text, str) or not text or len(text) > MAX_TEXT or not text.isascii():
        raise _error(text, forms)
    if "%" in text:
        raise _error(text, "a %N throttle belongs to sbatch --array, not to a job id")
    if m := _PLAIN.fullmatch(text):
        return JobRef(_job(text, m.group(1)))
    if m := _TASK.fullmatch(text):
        return JobRef(_job(text, m.group(1)), task=_task(text, m.group(2)))
    if m := _HET.fullmatch(text):
        offset = int(m.group(2))
        if offset > MAX_HET_OFFSET:
            raise _error(text, f"hetjob components run from 0 to {MAX_HET_OFFSET}")
        return JobRef(_job(text, m.group(1)), het_offset=offset)
    if m := _BRACKET.fullmatch(text):
        return _bracket(text, _job(text, m.group(1)), m.group(2), forms, several)
    raise _error(text, forms)


def _bracket(text: str, job_id: int, body: str, forms: str, several: bool) -> JobRef:
    spans = []
    for part in body.split(","):
        m = _SPAN.fullmatch(part)
        if m is None:
            raise _error(text, forms)
        lo = _task(text, m.group(1))
        hi = _task(text, m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise _error(text, f"the task range {lo}-{hi} runs backwards")
        spans.append((lo, hi))
    ref = JobRef(job_id, spans=tuple(spans))
    if ref.task_count == 1:
        return JobRef(job_id, task=spans[0][0])
    if not several:
        raise _error(text, f"names several array tasks; give one, like {job_id}_{spans[0][0]}")
    if ref.task_count > MAX_TASKS_NAMED:
        raise _error(text, f"names over {MAX_TASKS_NAMED} tasks; name the array, {job_id}")
    return ref


def _job(text: str, digits: str) -> int:
    value = int(digits)  # ASCII digits only (the patterns), at most MAX_TEXT of them
    if not 1 <= value <= MAX_JOB_ID:
        raise _error(text, f"Slurm job ids run from 1 to {MAX_JOB_ID}")
    return value


def _task(text: str, digits: str) -> int:
    value = int(digits)
    if value > MAX_ARRAY_TASK_ID:
        raise _error(text, f"array task ids run from 0 to {MAX_ARRAY_TASK_ID}")
    return value


def _error(text: object, why: str) -> JobIdError:
    """``JOBID '<text>': <why>``, the text cut (and escaped) so the line fits WIDTH with "error: "."""
    shown = text if isinstance(text, str) and text.isprintable() else ascii(text).strip("'")
    room = WIDTH - len("error: JOBID '': ") - len(why)
    if len(shown) > room:
        if room < 4:
            return JobIdError(f"JOBID: {why}")
        shown = shown[: room - 1] + "…"
    return JobIdError(f"JOBID '{shown}': {why}")
