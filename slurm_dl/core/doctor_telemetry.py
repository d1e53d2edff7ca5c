"""``slurm-dl doctor``'s verdicts on the gpu-agents' files (pure): which the prioritizer and
``dlsubmit status`` ignore and why, whether users can read the directory, and whether each
file's newest sample is recent enough for idle detection
(:func:`~slurm_dl.core.idle.freshness.stale_after_seconds`, the prioritizer's own limit)."""

from __future__ import annotations

import os.path
import shlex
from typing import Any, Callable

from .database_url import STATE_DIR
from .finding import Finding
from .idle.freshness import age_words

IGNORED_SHOWN = 20  # ignored agent files named one by one; the rest are counted


def closed_to_users(path_modes: list[tuple[str, int]], directory: str) -> tuple[str, int] | None:
    """The first directory of ``path_modes`` (from / down to ``directory``, each with its mode)
    that keeps other users from reading ``directory``: one on the way that they cannot pass
    (no ``o+x``), or ``directory`` itself that they cannot list (no ``o+rx``)."""
    for path, mode in path_modes:
        need = 0o005 if os.path.normpath(path) == os.path.normpath(directory) else 0o001
        if mode & need != need:
            return path, mode
    return None


def telemetry_findings(f: Any, add: Callable[[Finding], None]) -> None:
    """The gpu-agents' files: which the prioritizer and dlsubmit ignore, and why."""
    check = "gpu-agent files"
    if f.telemetry_dir is None:
        add(Finding(check, "skip", "no [telemetry] exposition_dir: no GPU telemetry"))
        return
    where = f.telemetry_dir
    closed = closed_to_users(f.telemetry_path_modes, where)
    if closed is not None:
        path, mode = closed
        add(
            Finding(
                "telemetry for users",
                "warn",
                f"users cannot read {where}: {path} is mode {mode:04o}, so dlsubmit status "
                "shows them no GPU use",
                f"chmod o+rx {shlex.quote(path)}"
                if path == where
                else "set [telemetry] exposition_dir to a directory users can reach (each "
                f"directory on its path mode 0755; not inside {STATE_DIR}, which the "
                f"prioritizer's unit keeps 0750), or chmod o+x {shlex.quote(path)}",
            )
        )
    if f.telemetry_error:
        add(
            Finding(
                check,
                "warn",
                f"{where} {f.telemetry_error}: no job's GPU use is known",
                "start the gpu-agents (systemctl enable --now slurm-dl-gpu-agent) and make the "
                "directory readable by the prioritizer",
            )
        )
        return
    for path, why, fix in f.telemetry_ignored[:IGNORED_SHOWN]:
        add(Finding(check, "fail", f"{path}: {why}; ignored: its samples are not used", fix))
    if len(f.telemetry_ignored) > IGNORED_SHOWN:
        add(
            Finding(
                check,
                "fail",
                f"{len(f.telemetry_ignored) - IGNORED_SHOWN} more file(s) in {where} ignored",
                "the prioritizer's log names each ignored file once",
            )
        )
    for problem in f.telemetry_problems:
        add(
            Finding(
                check,
                "warn",
                f"{where}: {problem}",
                f"chmod go-w {shlex.quote(where)} (or chmod +t: then only a file's owner may remove it)"
                if "writable" in problem
                else "set [telemetry] agent_user to a user of this host, or remove it",
            )
        )
    for path, n in sorted(f.telemetry_bad_lines.items()):
        add(
            Finding(
                check,
                "warn",
                f"{path}: {n} line(s) skipped: not a sane reading (NaN, infinite, out "
                "of range or malformed)",
                "check that node's agent: slurm-dl gpu-agent --once --json",
            )
        )
    if not (f.telemetry_ignored or f.telemetry_problems or f.telemetry_bad_lines):
        owners = ", ".join(f.telemetry_trusted) or "root"
        add(
            Finding(
                check,
                "ok",
                f"{f.telemetry_read} file(s) in {where}, each owned by one of {owners} "
                "and writable by its owner alone",
            )
        )
    _freshness(f, add)


STALE_SHOWN = 20  # stale agent files named one by one; the rest are counted


def _freshness(f: Any, add: Callable[[Finding], None]) -> None:
    """Each used file's newest sample against the prioritizer's limit: a stale file means its
    node's agent stopped (its jobs' idle time is not counted); none fresh, idle detection is off."""
    check = "gpu-agent samples"
    limit = f.telemetry_stale_after_s
    if limit is None:
        return
    where = f.telemetry_dir
    if not f.telemetry_newest:
        add(
            Finding(
                check,
                "warn",
                f"no agent has written a sample in {where}: idle detection has nothing to go on",
                "start the gpu-agents: systemctl enable --now slurm-dl-gpu-agent on every GPU node",
            )
        )
        return
    ages = {path: max(0.0, f.now - t) for path, t in sorted(f.telemetry_newest.items())}
    stale = [(path, age) for path, age in ages.items() if age > limit]
    none_fresh = len(stale) == len(ages)
    for path, age in stale[:STALE_SHOWN]:
        node = os.path.basename(path).removesuffix(".prom")
        add(
            Finding(
                check,
                "fail" if none_fresh else "warn",
                f"{path}: newest sample {age_words(age)} old, over the {age_words(limit)} the "
                f"prioritizer accepts: {node}'s jobs' idle time is not counted",
                f"on {node}: systemctl status slurm-dl-gpu-agent (journalctl -u "
                f"slurm-dl-gpu-agent); a node out of service: rm {shlex.quote(path)}",
            )
        )
    if len(stale) > STALE_SHOWN:
        add(
            Finding(
                check,
                "fail" if none_fresh else "warn",
                f"{len(stale) - STALE_SHOWN} more stale file(s) in {where}",
                "the prioritizer's log names each stale node once",
            )
        )
    if none_fresh:
        add(
            Finding(
                check,
                "fail",
                f"no file in {where} has a sample newer than {age_words(limit)}: idle "
                "detection is off",
                "start the gpu-agents: systemctl enable --now slurm-dl-gpu-agent on every GPU node",
            )
        )
    elif not stale:
        add(
            Finding(
                check,
                "ok",
                f"each of {len(ages)} file(s) has a sample newer than {age_words(limit)} "
                f"(newest at most {age_words(max(ages.values()))} old)",
            )
        )
