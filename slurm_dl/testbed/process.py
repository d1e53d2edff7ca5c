"""Process control for the testbed daemons: start by name, record pids, find and stop them.

Every process a testbed starts carries ``SLURM_DL_TESTBED=<state dir>`` in its environment
(slurmstepd and job steps inherit it), so ``down`` can prove a pid is ours before signalling
it — also after a crash, when pid files are stale or the pid was reused.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import TestbedError

MARKER = "SLURM_DL_TESTBED"


@dataclass(frozen=True)
class Daemon:
    """One daemon to run: its name (``slurmctld`` / ``slurmd-gpu01``) and argv."""

    name: str
    argv: tuple[str, ...]


def _proc_environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state follows the parenthesised command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _reap(pid: int) -> None:
    """Collect a child that has exited (our own Popen children would otherwise stay zombies)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def alive(pid: int) -> bool:
    _reap(pid)
    return Path(f"/proc/{pid}").exists() and not _is_zombie(pid)


def belongs_to(pid: int, root: Path) -> bool:
    """True when ``pid`` is a live process started for the testbed at ``root``."""
    if not alive(pid):
        return False
    env = _proc_environ(pid)
    return env is not None and env.get(MARKER) == str(root)


def marked_processes(root: Path) -> list[int]:
    """Every live process carrying this testbed's marker (daemons, slurmstepd, job steps)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid != me and belongs_to(pid, root):
            found.append(pid)
    return found


def mount_namespace(pid: int) -> str | None:
    """``mnt:[4026532…]`` of a process, or None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def in_mount_namespaces(namespaces: set[str]) -> list[int]:
    """Every live process in one of ``namespaces`` (a chrooted testbed's daemons each have their
    own; slurmstepd and job steps inherit it, also where slurmstepd clears its environment)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if (
            entry.name.isdigit()
            and int(entry.name) != me
            and mount_namespace(int(entry.name)) in namespaces
        ):
            if alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def _parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 else None


def with_descendants(pids: list[int]) -> list[int]:
    """``pids`` plus every live process below them (job steps under slurmstepd)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = _parent_pid(int(entry.name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry.name))
    seen: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(children.get(pid, []))
    return [p for p in seen if p != os.getpid()]


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def start(
    daemon: Daemon, root: Path, log_file: Path, pid_file: Path, base_env: dict[str, str]
) -> int:
    """Start ``daemon`` in the foreground mode of Slurm (``-D``) in its own session; record its pid."""
    env = dict(base_env)
    env[MARKER] = str(root)
    with open(log_file, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(daemon.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(root),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise TestbedError(f"cannot start {daemon.name} ({daemon.argv[0]}): {e}") from None
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def stop(pids: list[int], *, term_wait_s: float = 8.0) -> list[int]:
    """SIGTERM the pids, wait up to ``term_wait_s``, SIGKILL what is left. Returns pids killed hard."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + term_wait_s
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    for pid in left:
        _signal(pid, signal.SIGKILL)
    end = time.monotonic() + 5.0
    while any(alive(p) for p in left) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def log_tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join("    " + ln for ln in tail) or f"(log {path} is empty)"


def port_free(port: int) -> bool:
    """True when nothing listens on ``port`` (slurm daemons bind every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        try:
            s.connect((host, port))
        except OSError:
            return False
    return True


def pick_free_ports(count: int, *, low: int = 20000, high: int = 32000) -> list[int]:
    """``count`` distinct free ports below the kernel's ephemeral range (so outgoing
    connections do not grab them between picking and binding)."""
    import random

    rng = random.Random()
    chosen: list[int] = []
    tries = 0
    while len(chosen) < count:
        tries += 1
        if tries > 5000:
            raise TestbedError(f"could not find {count} free TCP ports in {low}-{high}")
        port = rng.randrange(low, high)
        if port not in chosen and port_free(port):
            chosen.append(port)
    return chosen
