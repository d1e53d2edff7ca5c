"""What a batch script says about preemption: its ``#SBATCH --signal`` and the signals it traps.

job_submit.lua does not show a job's ``--signal``: Slurm 22.05, 24.11 and 26.05 keep
``warn_signal``/``warn_time``/``warn_flags`` out of its job_desc fields (checked in
job_submit_lua.c of each release), and no job listing shows them after submission either. It
shows the batch script, and the clients researchers use write their signal there: submitit
``#SBATCH --signal=USR2@90`` (its steps), PyTorch Lightning's docs ``#SBATCH --signal=SIGUSR1@90``
(its steps), dlsubmit ``#SBATCH --signal=B:USR2@N`` (the batch shell). A ``--signal`` on the
sbatch command line overrides the script's; the submit host's cli_filter (``cli_filter.lua``,
which sees sbatch's final options) reports it as ``dl:signal=`` in the comment, and
:func:`effective_signal` lets that win, as Slurm does.

Pure: text in, facts out; bounded work for any input.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

MAX_SCRIPT_CHARS = 65_536  # what the shim sends: the script's head
_NAMES = {
    "HUP": 1,
    "INT": 2,
    "QUIT": 3,
    "ABRT": 6,
    "KILL": 9,
    "USR1": 10,
    "SEGV": 11,
    "USR2": 12,
    "PIPE": 13,
    "ALRM": 14,
    "TERM": 15,
    "CONT": 18,
    "STOP": 19,
    "TSTP": 20,
    "URG": 23,
    "XCPU": 24,
    "XFSZ": 25,
    "VTALRM": 26,
    "PROF": 27,
    "WINCH": 28,
    "IO": 29,
    "PWR": 30,
    "SYS": 31,
}
_BY_NUMBER = {v: k for k, v in _NAMES.items()}
_SIGNAL = re.compile(r"^(?:([RB]{1,2}):)?(?:SIG)?([A-Z0-9]{1,8})(?:@(\d{1,6}))?$", re.IGNORECASE)
DEFAULT_LEAD_S = 60  # sbatch: "--signal=SIG" without @TIME sends it 60 s before the end


@dataclass(frozen=True, slots=True)
class DeclaredSignal:
    """A job's ``--signal=[{R|B}:]SIG[@TIME]``: the signal's name (``USR2``), whether it goes to
    the batch shell only (``B:``) or to the steps, and its lead time in seconds."""

    name: str
    batch: bool
    lead_s: int

    @property
    def target(self) -> str:
        return "batch" if self.batch else "steps"

    def text(self) -> str:
        return f"{'B:' if self.batch else ''}{self.name}@{self.lead_s}"


def parse_signal(text: str) -> DeclaredSignal | None:
    """``B:USR2@90`` / ``SIGUSR1@90`` / ``12`` → DeclaredSignal; None when sbatch would refuse it."""
    m = _SIGNAL.match(text.strip().strip("'\""))
    if m is None:
        return None
    flags, sig, lead = (m.group(1) or "").upper(), m.group(2).upper(), m.group(3)
    if sig.isdigit():
        name = _BY_NUMBER.get(int(sig))
    else:
        name = sig if sig in _NAMES else None
    if name is None:
        return None
    return DeclaredSignal(name, "B" in flags, int(lead) if lead is not None else DEFAULT_LEAD_S)


def directives(script: str) -> list[str]:
    """The ``#SBATCH`` options of the script's first component, as sbatch reads them: lines
    before the first command (blank lines and comments may come between); a ``#SBATCH hetjob``
    line ends the first component."""
    out: list[str] = []
    for i, line in enumerate(script[:MAX_SCRIPT_CHARS].splitlines()):
        stripped = line.strip()
        if i == 0 and stripped.startswith("#!"):
            continue
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break
        body = stripped[len("#SBATCH") :].split(" #", 1)[0]
        try:
            words = shlex.split(body)
        except ValueError:
            words = body.split()
        if words and words[0] in ("hetjob", "packjob"):
            break
        out.extend(words)
    return out


def declared_signal(script: str | None) -> DeclaredSignal | None:
    """The script's ``--signal`` (the last one, as sbatch takes the last); None without one or
    with one sbatch would refuse."""
    if not script:
        return None
    found = None
    words = directives(script)
    for i, word in enumerate(words):
        if word.startswith("--signal="):
            found = word.split("=", 1)[1]
        elif word == "--signal" and i + 1 < len(words):
            found = words[i + 1]
    return parse_signal(found) if found is not None else None


def effective_signal(
    hint: str | None, script: str | None
) -> tuple[DeclaredSignal | None, str | None]:
    """The job's ``--signal`` as Slurm takes it, and an unreadable ``dl:signal=`` (None if fine).

    ``hint`` is the ``dl:signal=`` the submit host's cli_filter writes from sbatch's final
    options (the command line over the script, as Slurm reads them); without one, or with one
    sbatch would never have written, the script's ``#SBATCH --signal`` counts."""
    if hint is not None:
        declared = parse_signal(hint)
        if declared is not None:
            return declared, None
        return declared_signal(script), hint
    return declared_signal(script), None


_LAUNCHER = re.compile(r"(?:^|[\s;&|(`])(?:srun|mpirun|mpiexec)(?:\s|$)")


def launches_steps(script: str | None) -> bool:
    """Whether the script starts job steps (``srun``, or an MPI launcher that runs them) outside
    comments: a signal sent to the steps reaches nothing in a script that starts none."""
    if not script:
        return False
    for line in script[:MAX_SCRIPT_CHARS].splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        if _LAUNCHER.search(code):
            return True
    return False


_TRAP = re.compile(r"^\s*(?:builtin\s+)?trap\s+(.*)$")
_PY_HANDLER = re.compile(r"signal\s*\(\s*(?:signal\s*\.\s*)?(?:Signals\s*\.\s*)?SIG([A-Z0-9]+)")


def trapped_signals(script: str | None) -> frozenset[str]:
    """Signals the batch script itself handles: ``trap CMD SIG…`` in a shell script, or
    ``signal.signal(signal.SIGUSR2, …)`` in a Python one (the shell or program that receives
    ``scancel --batch``). Only the head the shim sends is read."""
    if not script:
        return frozenset()
    found: set[str] = set()
    for line in script[:MAX_SCRIPT_CHARS].splitlines():
        m = _TRAP.match(line)
        if m is not None:
            found.update(_trap_specs(m.group(1)))
        for name in _PY_HANDLER.findall(line):
            if name in _NAMES:
                found.add(name)
    return frozenset(found)


def _trap_specs(args_text: str) -> set[str]:
    """The signals of one ``trap [--] ACTION SIGSPEC…`` (the action is the first word)."""
    try:
        args = shlex.split(args_text, comments=True)
    except ValueError:
        args = args_text.split()
    if args and args[0] == "--":
        args = args[1:]
    if not args or (args[0].startswith("-") and args[0] != "-"):  # trap -p / -l: lists only
        return set()
    out = set()
    for spec in args[1:]:
        ends = spec.endswith((";", "&", "|"))  # `trap 'save' USR2; sleep 60`: the command ends here
        word = spec.rstrip(";&|").upper().removeprefix("SIG")
        if word in _NAMES:
            out.add(word)
        elif word.isdigit() and int(word) in _BY_NUMBER:
            out.add(_BY_NUMBER[int(word)])
        if ends:
            break
    return out
