"""Memory snapshots on a signal: where a daemon's Python objects grew, by allocating line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from slurm_dl.daemon.process_memory import MEMORY_DIR_ENV, growth, main, snapshot_on_signal

CHILD = textwrap.dedent("""
    import os, signal, time
    from slurm_dl.daemon.process_memory import snapshot_on_signal
    print(snapshot_on_signal("daemon"), flush=True)
    os.kill(os.getpid(), signal.SIGUSR1)
    def grow():
        return [object() for _ in range(20_000)]  # the growth to find (line 7)
    kept = grow()
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.1)
""")


def run_child(tmp_path: Path, trace: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, MEMORY_DIR_ENV: str(tmp_path / "snaps")}
    env.pop("PYTHONTRACEMALLOC", None)
    if trace:
        env["PYTHONTRACEMALLOC"] = "3"
    script = tmp_path / "daemon_like.py"
    script.write_text(CHILD)
    return subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )


def test_each_signal_writes_a_snapshot_and_growth_names_the_allocating_line(tmp_path):
    out = run_child(tmp_path, trace=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "snaps")
    first, second = sorted(
        (tmp_path / "snaps").glob("daemon-*.tracemalloc"),
        key=lambda p: int(p.stem.rsplit("-", 1)[1]),
    )
    assert not list((tmp_path / "snaps").glob("*.part"))
    lines = growth(first, second, top=3)
    total_blocks = int(re.search(r"([+-][\d,]+) blocks", lines[0]).group(1).replace(",", ""))
    assert 19_000 < total_blocks < 22_000, lines
    assert "daemon_like.py:7" in lines[1], lines  # the list comprehension's line, first
    assert lines[1].split()[-3:] == ["daemon_like.py:7", "<", "daemon_like.py:8"], (
        lines
    )  # then its caller
    assert all(len(line) <= 80 for line in lines)


def test_nothing_installed_without_tracing_or_without_a_directory(tmp_path, monkeypatch):
    out = run_child(tmp_path, trace=False)
    # without tracing the handler is not installed: SIGUSR1 keeps its default (the end)
    assert out.stdout.strip() == "None"
    assert out.returncode == -10 or out.returncode == 138
    assert not (tmp_path / "snaps").exists()
    monkeypatch.delenv(MEMORY_DIR_ENV, raising=False)
    assert snapshot_on_signal("x") is None  # pytest does not trace; nor is a directory named


def test_the_comparison_says_what_it_could_not_read(tmp_path, capsys):
    junk = tmp_path / "junk.tracemalloc"
    junk.write_bytes(b"not a snapshot")
    assert main([str(junk), str(tmp_path / "missing.tracemalloc")]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("error: cannot compare") and "\n" == err[-1] and len(err.splitlines()) == 1
    )
    assert main([str(junk)]) == 2
