"""A what-if's replays as one Slurm job array (``slurm-dl simulate --via-slurm``), through
submitit's Slurm executor.

The what-if's inputs (the jobs as read and filtered, each policy's settings) are written once
to a file in the work folder; each array task reads that file and runs its own replay, so no
job list travels with a task. Results come back as submitit's result files; a task that
fails (an error, or killed, cancelled, out of time: gone from the queue without a result) is
reported by name with its log, and the others' results are kept. The work folder goes away
once every task succeeded; it stays, with the logs, when one failed.

The tasks run as whoever runs the what-if (often an administrator) and read pickles from the
work folder, so nobody else may reach it: it is a fresh folder of an unguessable name, made
0700 by this process (never one that exists already), owned by this user, inside a directory
that no other user can write or whose sticky bit keeps others from renaming what is in it, as
is every directory above it. The folder is checked again (same folder, owner and mode) before
each result is read. Besides, the inputs and each task's output travel signed with a key that
exists only in this process and the array's environment (HMAC-SHA256), and a task or this
process refuses what does not carry its signature.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import re
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..core.errors import JobNotFoundError, SlurmDLError, SlurmError
from .runner import run_slurm

_CONTEXT: dict = {}  # in an array task: the loaded inputs, by path
KEY_ENV = "SLURM_DL_WHATIF_KEY"  # the signing key, in the array's environment only
_MAGIC = b"slurm-dl-whatif-1\n"
FOLDER_PREFIX = "slurm-dl-whatif-"


@dataclass
class FailedTask:
    index: int
    job_id: str
    why: str
    log: Path


def parse_time_limit(text: str | None) -> int:
    """``--time``: minutes (``90``) or Slurm's ``[D-]H:MM[:SS]``; minutes, at least 1."""
    if text is None or str(text).strip() == "":
        return 60
    s = str(text).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?", s)
    try:
        if m:
            d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
            minutes = d * 1440 + h * 60 + mi + (1 if sec else 0)
        else:
            minutes = int(s)
    except ValueError:
        minutes = 0
    if minutes < 1:
        raise SlurmDLError(
            f"--time: got {text!r}; allowed: minutes (90) or H:MM[:SS] (1:30:00), at least 1 minute"
        )
    return minutes


class WorkFolder:
    """The what-if's work folder: made fresh (0700, this user's), and checked to be still that."""

    def __init__(self, path: Path):
        self.path = path
        st = os.lstat(path)
        self._ident = (st.st_dev, st.st_ino)
        self.check()

    @classmethod
    def create(cls, parent: Path, name: str | None = None) -> "WorkFolder":
        """A new folder in ``parent``: ``name`` (refused when it exists), else an unguessable one.
        Raises SlurmDLError when ``parent`` (or a directory above it) lets others swap it."""
        parent = Path(os.path.realpath(parent))
        unsafe = unsafe_parent(parent)
        if unsafe is not None:
            raise SlurmDLError(
                f"--via-slurm: the work folder cannot go in {parent}: {unsafe}. Fix: run "
                "from a directory only you can write (e.g. one in your home)."
            )
        try:
            if name is None:
                path = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=parent))
            else:
                path = parent / name
                os.mkdir(path, 0o700)
        except FileExistsError:
            raise SlurmDLError(
                f"--via-slurm: the work folder {path} exists already (made by someone "
                "else?); it is not used. Fix: remove it, or run again."
            ) from None
        except OSError as e:
            raise SlurmDLError(
                f"--via-slurm: cannot make a work folder in {parent}: {e.strerror or e}"
            ) from None
        return cls(path)

    def check(self) -> None:
        """Raises SlurmDLError unless the path is still the folder made, this user's, 0700."""
        try:
            st = os.lstat(self.path)
        except OSError as e:
            raise SlurmDLError(
                f"--via-slurm: the work folder {self.path} is gone: {e.strerror or e}"
            ) from None
        why = None
        if not stat.S_ISDIR(st.st_mode):
            why = "it is no longer a folder"
        elif (st.st_dev, st.st_ino) != self._ident:
            why = "another folder has taken its place"
        elif st.st_uid != os.geteuid():
            why = f"it belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
        elif stat.S_IMODE(st.st_mode) & 0o077:
            why = f"others may enter it (mode {stat.S_IMODE(st.st_mode):04o})"
        if why is not None:
            raise SlurmDLError(
                f"--via-slurm: the work folder {self.path} is not safe to use: {why}; "
                "nothing in it was read. Fix: run from a directory only you can write."
            )

    def write_private(self, name: str, data: bytes) -> Path:
        """A new file of the folder, readable by this user only (never an existing one)."""
        path = self.path / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return path


def unsafe_parent(directory: Path) -> str | None:
    """Why a folder made in ``directory`` could be swapped by another user (None: it cannot).
    Every directory from it up to ``/`` must belong to root or to this user, and be writable by
    no one else unless its sticky bit is set (as /tmp's is: others cannot rename or remove what
    is not theirs)."""
    me = os.geteuid()
    for d in (directory, *directory.parents):
        try:
            st = os.stat(d)
        except OSError as e:
            return f"cannot read {d}: {e.strerror or e}"
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (0, me):
            return f"{d} belongs to another user (uid {st.st_uid})"
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
            who = "everyone" if mode & stat.S_IWOTH else "its group"
            return f"{d} is writable by {who} (mode {mode:04o}) without the sticky bit"
    return None


def sign(key: bytes, payload: bytes) -> bytes:
    """``payload`` with its signature (HMAC-SHA256 under ``key``)."""
    return _MAGIC + hmac.new(key, payload, hashlib.sha256).digest() + payload


def verified(key: bytes, data: bytes, what: str) -> bytes:
    """The payload of ``data`` if ``key`` signed it; raises SlurmDLError (nothing unpickled) if not."""
    if not isinstance(data, bytes):
        raise SlurmDLError(
            f"--via-slurm: {what} does not carry this what-if's signature; it was not read"
        )
    n = len(_MAGIC)
    mac, payload = data[n : n + 32], data[n + 32 :]
    if not data.startswith(_MAGIC) or not hmac.compare_digest(
        mac, hmac.new(key, payload, hashlib.sha256).digest()
    ):
        raise SlurmDLError(
            f"--via-slurm: {what} does not carry this what-if's signature; it was not read"
        )
    return payload


def _task_key() -> bytes:
    text = os.environ.get(KEY_ENV, "")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise SlurmDLError(
            f"--via-slurm: the what-if's key ({KEY_ENV}) did not reach this task; "
            "its inputs were not read. Fix: let sbatch export the environment."
        )
    return key


def run_array_task(context: str, index: int) -> bytes:
    """In a Slurm array task: replay task ``index`` of the what-if written to ``context``; the
    output, pickled and signed."""
    from ..sim.engine.loop import ClusterResult
    from ..sim.simulate import run_replay

    key = _task_key()
    ctx = _CONTEXT.get(context)
    if ctx is None:
        with open(context, "rb") as fh:
            ctx = _CONTEXT[context] = pickle.loads(
                verified(key, fh.read(), f"the inputs file {context}")
            )
    task = ctx["tasks"][index]
    out = run_replay(
        ctx["jobs"],
        ctx["recipes"][task.run],
        ctx["setups"][task.run],
        task.replay,
        summary_only=ctx["summary_only"][task.run],
    )
    out = out.packed() if isinstance(out, ClusterResult) else out
    return sign(key, pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))


def run_array(
    tasks: Sequence,
    inputs: dict,
    on_done: Callable[[int, object], None],
    *,
    work: WorkFolder,
    partition: str | None,
    time_min: int,
    name_of: Callable[[int], str],
    tick: Callable[[int, int], None] | None = None,
    say: Callable[[str], None] = print,
    poll_s: float = 2.0,
) -> list[FailedTask]:
    """Submit ``tasks`` as one array, hand each result to ``on_done(index, output)`` as it
    arrives, and return the tasks that failed. ``inputs``: what :func:`run_array_task` reads
    (``jobs``, ``recipes``, ``setups``, ``summary_only``: per planned run; ``tasks`` is added).
    ``work``: the fresh work folder (:meth:`WorkFolder.create`). ``say(line)``: a line for the
    user; a path in it follows a NUL (``"logs in:\\0/path"``), to print whole."""
    import submitit

    folder = work.path
    key = secrets.token_bytes(32)
    try:
        payload = pickle.dumps({**inputs, "tasks": list(tasks)}, protocol=pickle.HIGHEST_PROTOCOL)
        context = work.write_private("inputs.pickle", sign(key, payload))
    except OSError as e:
        raise SlurmDLError(
            f"--via-slurm: cannot write the work folder {folder}: {e.strerror or e}"
        ) from None
    ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")  # an array task: ARRAY_N
    params = dict(
        timeout_min=time_min,
        cpus_per_task=1,
        nodes=1,
        tasks_per_node=1,
        name="slurm-dl-whatif",
        slurm_array_parallelism=len(tasks),
    )
    if partition:
        params["slurm_partition"] = partition
    ex.update_parameters(**params)
    old = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = key.hex()  # sbatch exports it to the array's tasks, and to nobody else
    try:
        jobs = ex.map_array(run_array_task, [str(context)] * len(tasks), list(range(len(tasks))))
    except Exception as e:  # submitit raises its own errors for sbatch's refusals
        raise SlurmDLError(
            f"--via-slurm: Slurm refused the job array: {str(e).strip().splitlines()[-1]}"
        ) from None
    finally:
        if old is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = old
    array_id = jobs[0].job_id.split("_")[0] if jobs else "?"
    say(f"submitted {len(tasks)} replays as Slurm job array {array_id}; logs in:\0{folder}")
    pending = set(range(len(tasks)))
    failed: list[FailedTask] = []
    gone_once: set[int] = set()
    jobs_done = 0
    while pending:
        queued = _queued(array_id)
        for i in sorted(pending):
            job = jobs[i]
            if job.paths.result_pickle.exists():
                pending.discard(i)
                work.check()  # still the folder made, before any file of it is unpickled
                try:
                    out = pickle.loads(verified(key, job.result(), f"the result of task {i}"))
                except SlurmDLError as e:
                    failed.append(FailedTask(i, job.job_id, str(e), job.paths.stderr))
                    continue
                except Exception as e:  # the replay raised: submitit keeps its traceback
                    failed.append(FailedTask(i, job.job_id, _last_line(str(e)), job.paths.stderr))
                    continue
                jobs_done += getattr(tasks[i], "jobs", 0)
                on_done(i, out)
            elif queued is not None and job.job_id not in queued:
                if i in gone_once:  # gone from the queue twice without a result: it died
                    pending.discard(i)
                    failed.append(
                        FailedTask(
                            i,
                            job.job_id,
                            "ended without a result (killed, cancelled or out of time)",
                            job.paths.stderr,
                        )
                    )
                else:
                    gone_once.add(i)
        if tick is not None:
            tick(len(tasks) - len(pending), jobs_done)
        if pending:
            time.sleep(poll_s)
    if not failed:
        shutil.rmtree(folder, ignore_errors=True)
    return failed


def _queued(array_id: str) -> set[str] | None:
    """The array's tasks still in the queue (``ID_N``), or None when squeue cannot say."""
    try:
        out = run_slurm(
            ["squeue", "-h", "-r", "-j", array_id, "-o", "%i"], env=dict(os.environ)
        ).stdout
    except JobNotFoundError:  # the whole array has left the queue
        return set()
    except SlurmError:
        return None
    return {line.strip() for line in out.splitlines() if line.strip()}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "failed"
