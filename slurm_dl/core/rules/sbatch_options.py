"""Every option sbatch takes, and how sbatch's getopt_long reads them (for ``filter check``).

The table is the union of sbatch's options in Slurm 22.05, 24.11 and 26.05 (``common_options`` in
``src/common/slurm_opt.c``, those with an sbatch setter). Newer than 22.05: autocomplete,
container-id, extra, oom-kill-step, resv-ports, segment, stepmgr, tres-bind, tres-per-task (24.11);
consolidate-segments, container-type, external, mem-update, resources, spread-segments and
``--requeue[=expedite]`` (26.05). Only in 22.05: power. Where releases differ in whether an option
takes a value, the table takes the lenient one (an optional value reads the same without one).

Reading follows getopt_long with sbatch's option string (``+``: options end at the first word that is
not one): ``--name=value`` or ``--name value`` for a required value, only ``--name=value`` for an
optional one; short options cluster (``-Hv``) and take their value attached or as the next word
(``-N2``, ``-N 2``), an optional one only attached (``-kfoo``); a long name may be shortened to any
unambiguous prefix (``--part=gpu``); ``--`` ends the options.
"""

from __future__ import annotations

from dataclasses import dataclass

NONE, REQ, OPT = "none", "required", "optional"


@dataclass(frozen=True, slots=True)
class SbatchOption:
    """One sbatch option: its long name (no dashes), its short letter ("" if none), its value."""

    name: str
    short: str
    arg: str

    @property
    def flag(self) -> str:
        return "--" + self.name


_TABLE = (
    ("account", "A", REQ),
    ("acctg-freq", "", REQ),
    ("array", "a", REQ),
    ("autocomplete", "", REQ),
    ("batch", "", REQ),
    ("bb", "", REQ),
    ("bbf", "", REQ),
    ("begin", "b", REQ),
    ("chdir", "D", REQ),
    ("cluster", "", REQ),
    ("cluster-constraint", "", REQ),
    ("clusters", "M", REQ),
    ("comment", "", REQ),
    ("consolidate-segments", "", NONE),
    ("constraint", "C", REQ),
    ("container", "", REQ),
    ("container-id", "", REQ),
    ("container-type", "", REQ),
    ("context", "", REQ),
    ("contiguous", "", NONE),
    ("core-spec", "S", REQ),
    ("cores-per-socket", "", REQ),
    ("cpu-freq", "", REQ),
    ("cpus-per-gpu", "", REQ),
    ("cpus-per-task", "c", REQ),
    ("deadline", "", REQ),
    ("delay-boot", "", REQ),
    ("dependency", "d", REQ),
    ("distribution", "m", REQ),
    ("error", "e", REQ),
    ("exclude", "x", REQ),
    ("exclusive", "", OPT),
    ("export", "", REQ),
    ("export-file", "", REQ),
    ("external", "", NONE),
    ("extra", "", REQ),
    ("extra-node-info", "B", REQ),
    ("get-user-env", "", OPT),
    ("gid", "", REQ),
    ("gpu-bind", "", REQ),
    ("gpu-freq", "", REQ),
    ("gpus", "G", REQ),
    ("gpus-per-node", "", REQ),
    ("gpus-per-socket", "", REQ),
    ("gpus-per-task", "", REQ),
    ("gres", "", REQ),
    ("gres-flags", "", REQ),
    ("help", "h", NONE),
    ("hint", "", REQ),
    ("hold", "H", NONE),
    ("ignore-pbs", "", NONE),
    ("input", "i", REQ),
    ("job-name", "J", REQ),
    ("kill-on-invalid-dep", "", REQ),
    ("licenses", "L", REQ),
    ("mail-type", "", REQ),
    ("mail-user", "", REQ),
    ("mcs-label", "", REQ),
    ("mem", "", REQ),
    ("mem-bind", "", REQ),
    ("mem-per-cpu", "", REQ),
    ("mem-per-gpu", "", REQ),
    ("mem-update", "", REQ),
    ("mincpus", "", REQ),
    ("network", "", REQ),
    ("nice", "", OPT),
    ("no-kill", "k", OPT),
    ("no-requeue", "", NONE),
    ("nodefile", "F", REQ),
    ("nodelist", "w", REQ),
    ("nodes", "N", REQ),
    ("ntasks", "n", REQ),
    ("ntasks-per-core", "", REQ),
    ("ntasks-per-gpu", "", REQ),
    ("ntasks-per-node", "", REQ),
    ("ntasks-per-socket", "", REQ),
    ("ntasks-per-tres", "", REQ),
    ("oom-kill-step", "", OPT),
    ("open-mode", "", REQ),
    ("output", "o", REQ),
    ("overcommit", "O", NONE),
    ("oversubscribe", "s", NONE),
    ("parsable", "", NONE),
    ("partition", "p", REQ),
    ("power", "", REQ),
    ("prefer", "", REQ),
    ("priority", "", REQ),
    ("profile", "", REQ),
    ("propagate", "", OPT),
    ("qos", "q", REQ),
    ("quiet", "Q", NONE),
    ("reboot", "", NONE),
    ("requeue", "", OPT),
    ("reservation", "", REQ),
    ("resources", "", REQ),
    ("resv-ports", "", OPT),
    ("segment", "", REQ),
    ("signal", "", REQ),
    ("sockets-per-node", "", REQ),
    ("spread-job", "", NONE),
    ("spread-segments", "", NONE),
    ("stepmgr", "", NONE),
    ("switches", "", REQ),
    ("tasks-per-node", "", REQ),
    ("test-only", "", NONE),
    ("thread-spec", "", REQ),
    ("threads-per-core", "", REQ),
    ("time", "t", REQ),
    ("time-min", "", REQ),
    ("tmp", "", REQ),
    ("tres-bind", "", REQ),
    ("tres-per-task", "", REQ),
    ("uid", "", REQ),
    ("usage", "", NONE),
    ("use-min-nodes", "", NONE),
    ("verbose", "v", NONE),
    ("version", "V", NONE),
    ("wait", "W", NONE),
    ("wait-all-nodes", "", REQ),
    ("wckey", "", REQ),
    ("wrap", "", REQ),
)

OPTIONS: dict[str, SbatchOption] = {
    name: SbatchOption(name, short, arg) for name, short, arg in _TABLE
}
SHORT: dict[str, SbatchOption] = {o.short: o for o in OPTIONS.values() if o.short}
# Two names for one setting: a prefix that matches both is not ambiguous.
ALIASES = {"tasks-per-node": "ntasks-per-node", "cluster": "clusters"}


class OptionError(ValueError):
    """A word sbatch's option reader would refuse (unknown, ambiguous, value missing or not allowed)."""


def long_option(name: str) -> SbatchOption:
    """The option a long name means: the exact name, else the one option it is a prefix of."""
    if name in OPTIONS:
        return OPTIONS[name]
    hits = {ALIASES.get(n, n) for n in OPTIONS if n.startswith(name)} if name else set()
    if len(hits) == 1:
        return OPTIONS[hits.pop()]
    if hits:
        some = ", ".join("--" + n for n in sorted(hits)[:3])
        raise OptionError(
            f"sbatch option '--{name}' is ambiguous ({some}{', ...' if len(hits) > 3 else ''})"
        )
    raise OptionError(f"unknown sbatch option '--{name}'")


@dataclass(frozen=True, slots=True)
class GivenOption:
    """One option as given: which, its value (None when it takes none or got none), how it was written."""

    option: SbatchOption
    value: str | None
    given: str


@dataclass(frozen=True, slots=True)
class SplitArgs:
    """sbatch's command line read as getopt_long reads it: options per het-job component (split at
    ``:``), then the batch script and its arguments (the first word that is not an option)."""

    components: tuple[tuple[GivenOption, ...], ...]
    script: str | None
    script_args: tuple[str, ...]


def split_args(args: list[str] | tuple[str, ...]) -> SplitArgs:
    components: list[list[GivenOption]] = [[]]
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            break
        if word == ":":
            components.append([])
        elif word.startswith("--"):
            given, i = _long(word, args, i)
            components[-1].append(given)
        elif word.startswith("-") and len(word) > 1:
            given_list, i = _short(word, args, i)
            components[-1].extend(given_list)
        else:
            i -= 1
            break
    rest = tuple(args[i:])
    return SplitArgs(tuple(tuple(c) for c in components), rest[0] if rest else None, rest[1:])


def _long(word: str, args, i: int) -> tuple[GivenOption, int]:
    name, eq, value = word[2:].partition("=")
    opt = long_option(name)
    if opt.arg == NONE:
        if eq:
            raise OptionError(f"sbatch option {opt.flag} takes no value (got {word!r})")
        return GivenOption(opt, None, "--" + name), i
    if opt.arg == OPT:
        return GivenOption(opt, value if eq else None, "--" + name), i
    if not eq:
        if i >= len(args):
            raise OptionError(f"{opt.flag} needs a value")
        value, i = args[i], i + 1
    return GivenOption(opt, value, "--" + name), i


def _short(word: str, args, i: int) -> tuple[list[GivenOption], int]:
    out = []
    j = 1
    while j < len(word):
        opt = SHORT.get(word[j])
        if opt is None:
            raise OptionError(f"unknown sbatch option '-{word[j]}'")
        rest = word[j + 1 :]
        if opt.arg == NONE:
            out.append(GivenOption(opt, None, "-" + opt.short))
            j += 1
            continue
        if opt.arg == OPT:
            out.append(GivenOption(opt, rest or None, "-" + opt.short))
        elif rest:
            out.append(GivenOption(opt, rest, "-" + opt.short))
        elif i < len(args):
            out.append(GivenOption(opt, args[i], "-" + opt.short))
            i += 1
        else:
            raise OptionError(f"-{opt.short} needs a value")
        break
    return out, i
