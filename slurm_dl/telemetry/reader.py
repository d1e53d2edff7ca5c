"""Read the gpu-agents' exposition files (one ``<node>.prom`` per node) for the prioritizer,
``dlsubmit status`` and ``slurm-dl doctor``.

A file is read only when nobody but a trusted user could have written it, and only for the
node it is named after (the trust rule, also in the admins' guide):

- it is a plain file (not a link, a pipe or a device) of at most :data:`MAX_FILE_BYTES`;
- it is owned by root, by the directory's owner, or by the site's ``[telemetry] agent_user``;
- it is writable by its owner alone (not group- or world-writable);
- its name is ``<node>.prom`` and every sample in it names that node (the agent writes only
  its own node's file).

Any other file is ignored whole, with the reason and the fix (:class:`IgnoredFile`), so a
forged file can neither add samples nor hide a real agent's. Within a trusted file a line
whose value is not a sane reading is skipped on its own (:func:`.exposition.parse_counted`).
Reading never raises: a missing directory is empty, an unreadable file is ignored.
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .exposition import NODE_NAME, parse_counted
from .samples import JobGpuSample

log = logging.getLogger("slurm_dl.telemetry")

MAX_FILE_BYTES = 16 << 20
"""An agent's file holds a few lines per GPU (about 2 KB for 8 GPUs); a larger one is not one."""

SUFFIX = ".prom"


@dataclass(frozen=True)
class IgnoredFile:
    """One file the readers do not use: which, why and what fixes it (short, for admins)."""

    path: str
    why: str
    fix: str


@dataclass
class DirectoryScan:
    """What one read of the exposition directory found."""

    samples: list[JobGpuSample] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # the files used
    ignored: list[IgnoredFile] = field(default_factory=list)
    bad_lines: dict[str, int] = field(default_factory=dict)  # used file -> lines skipped in it
    error: str | None = None  # the directory cannot be read (nothing was)
    problems: list[str] = field(
        default_factory=list
    )  # about the directory (its files are still read)
    trusted: tuple[
        str, ...
    ] = ()  # who may own a file read: root, the directory's owner, the agent user


def trusted_uids(dir_uid: int, agent_user: str | None) -> tuple[frozenset[int], str | None]:
    """The owners a file may have (root, the directory's owner, the agent user) and, when the
    agent user is not known on this host, why."""
    uids = {0, dir_uid}
    if not agent_user:
        return frozenset(uids), None
    try:
        uids.add(pwd.getpwnam(agent_user).pw_uid)
    except KeyError:
        return frozenset(uids), f"[telemetry] agent_user {agent_user!r} is not a user on this host"
    return frozenset(uids), None


def file_problem(
    st: os.stat_result, trusted: frozenset[int], path: str = "FILE"
) -> tuple[str, str] | None:
    """Why a file with this stat is not trusted, and the fix; None when it is (pure)."""
    q = shlex.quote(path)
    if not stat.S_ISREG(st.st_mode):
        return "not a plain file", f"rm {q}: the agent writes plain files"
    if st.st_uid not in trusted:
        return (
            f"owned by {_user(st.st_uid)}, not by root, the directory's owner or the agent user",
            f"rm {q} if the agent did not write it; else chown root {q}, or name the "
            "agent's user in [telemetry] agent_user",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        who = " and ".join(
            w for w, bit in (("its group", 0o020), ("every user", 0o002)) if mode & bit
        )
        return (
            f"writable by {who} (mode {mode:04o})",
            f"chmod go-w {q} (the agent writes 0644), once its content is known to be the agent's",
        )
    if st.st_size > MAX_FILE_BYTES:
        return _too_big(path)
    return None


def _too_big(path: str) -> tuple[str, str]:
    return (
        f"larger than an agent writes ({MAX_FILE_BYTES >> 20} MiB at most)",
        f"rm {shlex.quote(path)}",
    )


def readable_dir(directory: str | Path) -> bool:
    """Whether this process may list ``directory`` and open what is in it."""
    return os.access(directory, os.R_OK | os.X_OK)


def scan_exposition_dir(directory: str | Path, agent_user: str | None = None) -> DirectoryScan:
    """Every trusted file's samples in ``directory/*.prom``, and the files ignored with why."""
    out = DirectoryScan()
    d = Path(directory)
    try:
        dir_st = d.stat()
        names = sorted(p.name for p in d.iterdir() if p.name.endswith(SUFFIX))
    except OSError as e:  # missing or unreadable: no telemetry
        out.error = (
            "does not exist" if e.errno == errno.ENOENT else f"cannot be read: {e.strerror or e}"
        )
        return out
    trusted, unknown = trusted_uids(dir_st.st_uid, agent_user)
    out.trusted = tuple(_user(u) for u in sorted(trusted))
    if unknown:
        out.problems.append(unknown)
    dir_mode = stat.S_IMODE(dir_st.st_mode)
    if dir_mode & 0o022 and not dir_mode & stat.S_ISVTX:
        out.problems.append(
            f"the directory is writable by others (mode {dir_mode:04o}) without the sticky "
            "bit: they can remove or rename the agents' files"
        )
    for name in names:
        path = d / name
        node = name[: -len(SUFFIX)]
        if not NODE_NAME.fullmatch(node):
            out.ignored.append(
                IgnoredFile(
                    str(path),
                    "its name is not <node>.prom for a node name",
                    f"rm {shlex.quote(str(path))}: each agent writes <node>.prom",
                )
            )
            continue
        text, why = _read_trusted(path, trusted)
        if why is not None:
            out.ignored.append(IgnoredFile(str(path), *why))
            continue
        samples, bad = parse_counted(text)
        others = sorted({s.node for s in samples if s.node != node})
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            out.ignored.append(
                IgnoredFile(
                    str(path),
                    f"holds samples of {shown}, not only of {node}",
                    f"rm {shlex.quote(str(path))}: an agent writes only its own node's file",
                )
            )
            continue
        out.samples.extend(samples)
        out.read.append(str(path))
        if bad:
            out.bad_lines[str(path)] = bad
    return out


def _read_trusted(path: Path, trusted: frozenset[int]) -> tuple[str, tuple[str, str] | None]:
    """The file's text when it passes :func:`file_problem`, checked on the file opened (a file
    swapped in between the check and the read is not read), else why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "", (
                "a symbolic link",
                f"rm {shlex.quote(str(path))}; point the agent's --output-dir at this directory",
            )
        return "", (
            f"cannot be read: {e.strerror or e}",
            f"chmod a+r {shlex.quote(str(path))} (the agent writes 0644)",
        )
    try:
        st = os.fstat(fd)
        why = file_problem(st, trusted, str(path))
        if why is not None:
            return "", why
        data = os.read(fd, MAX_FILE_BYTES + 1)
        chunks = [data]
        while data and sum(map(len, chunks)) <= MAX_FILE_BYTES:
            data = os.read(fd, MAX_FILE_BYTES + 1)
            chunks.append(data)
        raw = b"".join(chunks)
    except OSError as e:
        return "", (
            f"cannot be read: {e.strerror or e}",
            f"chmod a+r {shlex.quote(str(path))} (the agent writes 0644)",
        )
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        return "", _too_big(str(path))
    return raw.decode("utf-8", errors="replace"), None


def read_node_file(path: Path) -> list[JobGpuSample]:
    """The samples of one node's file (the agent's own last file) under the same rule, trusting
    also this process's own user (the agent writes as itself); none when it is not trusted."""
    try:
        dir_uid = path.parent.stat().st_uid
    except OSError:
        return []
    node = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else ""
    text, why = _read_trusted(path, frozenset({0, dir_uid, os.geteuid()}))
    samples = parse_counted(text)[0] if why is None else []
    return [s for s in samples if s.node == node]


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


_said: dict[str, dict[str, str]] = {}  # directory -> file -> what was last logged about it


def read_exposition_dir(
    directory: str | Path, agent_user: str | None = None, warn: bool = True
) -> list[JobGpuSample]:
    """The samples of the trusted files in ``directory`` (see the module's rule). Each file
    ignored, and each file with lines skipped, is logged once per problem (``warn``; ``False``:
    at debug level, for users' commands that cannot fix it); ``slurm-dl doctor`` lists them."""
    scan = scan_exposition_dir(directory, agent_user)
    notes = {f.path: f"ignored: {f.why}; fix: {f.fix}" for f in scan.ignored}
    notes.update({p: f"{n} line(s) skipped: not a sane reading" for p, n in scan.bad_lines.items()})
    if scan.problems:
        notes[str(directory)] = "; ".join(scan.problems)
    said = _said.setdefault(str(directory), {})
    for path, note in sorted(notes.items()):
        if said.get(path) != note:
            (log.warning if warn else log.debug)("telemetry: %s: %s", path, note)
    _said[str(directory)] = notes  # a problem fixed and back is logged again
    return scan.samples
