"""The work folder of ``simulate --via-slurm``: the array's tasks run as whoever runs the
what-if (often an administrator) and unpickle what is in it, so nobody else may reach it or
put it there: a fresh 0700 folder of this user's, never one that exists, in a directory no
one else can swap it in, checked again before a result is read; and the inputs and results
signed with a key only the run and its tasks know."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest

from slurm_dl.core.errors import SlurmDLError
from slurm_dl.slurm import sim_array
from slurm_dl.slurm.sim_array import (
    KEY_ENV,
    WorkFolder,
    run_array_task,
    sign,
    unsafe_parent,
    verified,
)

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another user")


class _Payload:
    """Unpickling this writes a file: what an attacker's pickle would do as the administrator."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_folder_is_fresh_private_and_unguessable(tmp_path):
    a, b = WorkFolder.create(tmp_path), WorkFolder.create(tmp_path)
    assert a.path != b.path and a.path.parent == tmp_path.resolve()
    assert (
        a.path.name.startswith("slurm-dl-whatif-")
        and len(a.path.name) >= len("slurm-dl-whatif-") + 8
    )
    assert _mode(a.path) == 0o700 and os.lstat(a.path).st_uid == os.geteuid()
    f = a.write_private("inputs.pickle", b"x")
    assert _mode(f) == 0o600
    with pytest.raises(FileExistsError):  # a file of the folder is never written twice
        a.write_private("inputs.pickle", b"y")


@as_root
def test_a_folder_another_user_made_first_is_refused(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir(mode=0o1777)
    os.chmod(parent, 0o1777)  # /tmp-like: everyone may create, nobody may rename others' entries
    trap = parent / "slurm-dl-whatif-fixed"
    trap.mkdir(mode=0o777)
    os.chown(trap, NOBODY, NOBODY)
    marker = tmp_path / "ran-as-admin"
    (trap / "inputs.pickle").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(SlurmDLError, match="exists already"):
        WorkFolder.create(parent, name="slurm-dl-whatif-fixed")
    # a symlink planted under the name is refused the same way, and its target left alone
    (parent / "slurm-dl-whatif-link").symlink_to(trap)
    with pytest.raises(SlurmDLError, match="exists already"):
        WorkFolder.create(parent, name="slurm-dl-whatif-link")
    # with no name given, a new folder is made beside them
    work = WorkFolder.create(parent)
    assert work.path not in (trap, parent / "slurm-dl-whatif-link") and _mode(work.path) == 0o700
    assert not marker.exists()


def test_a_directory_others_can_write_without_the_sticky_bit_is_refused(tmp_path):
    group = tmp_path / "project"
    group.mkdir()
    os.chmod(group, 0o2775)  # a group project folder
    with pytest.raises(SlurmDLError) as e:
        WorkFolder.create(group)
    assert "writable by its group (mode 2775) without the sticky bit" in str(e.value)
    assert "Fix: run from a directory only you can write" in str(e.value)
    assert not list(group.iterdir())  # nothing was made there
    below = group / "mine"
    below.mkdir(mode=0o700)  # a private folder inside it does not help: the group can rename it
    assert "writable by its group" in unsafe_parent(below.resolve())
    os.chmod(group, 0o3775)  # the sticky bit: others cannot rename or remove what is not theirs
    assert unsafe_parent(below.resolve()) is None
    assert _mode(WorkFolder.create(group).path) & 0o777 == 0o700  # (setgid comes from the parent)


@as_root
def test_a_directory_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(SlurmDLError, match="belongs to another user"):
        WorkFolder.create(theirs)


def test_a_folder_swapped_or_opened_after_it_was_made_is_not_read(tmp_path):
    work = WorkFolder.create(tmp_path)
    work.check()
    os.chmod(work.path, 0o755)
    with pytest.raises(SlurmDLError, match="others may enter it"):
        work.check()
    os.chmod(work.path, 0o700)
    moved = work.path.with_name(work.path.name + "-moved")
    work.path.rename(moved)
    work.path.mkdir(mode=0o700)  # a look-alike folder in its place
    with pytest.raises(SlurmDLError, match="another folder has taken its place"):
        work.check()


@as_root
def test_a_folder_given_to_another_user_is_not_read(tmp_path):
    work = WorkFolder.create(tmp_path)
    os.chown(work.path, NOBODY, NOBODY)
    with pytest.raises(SlurmDLError, match="belongs to uid 65534"):
        work.check()


def test_signed_inputs_and_results_and_nothing_unsigned_is_unpickled(tmp_path, monkeypatch):
    key = os.urandom(32)
    assert verified(key, sign(key, b"payload"), "x") == b"payload"
    for bad in (sign(os.urandom(32), b"payload"), sign(key, b"payload") + b"!", b"payload", None):
        with pytest.raises(SlurmDLError, match="does not carry this what-if's signature"):
            verified(key, bad, "the result of task 0")
    # a task given inputs that another key signed (or none) refuses them without unpickling
    marker = tmp_path / "ran-as-admin"
    forged = tmp_path / "inputs.pickle"
    forged.write_bytes(sign(os.urandom(32), pickle.dumps(_Payload(marker))))
    monkeypatch.setattr(sim_array, "_CONTEXT", {})
    monkeypatch.setenv(KEY_ENV, key.hex())
    with pytest.raises(SlurmDLError, match="inputs file .* does not carry"):
        run_array_task(str(forged), 0)
    forged.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(SlurmDLError, match="does not carry"):
        run_array_task(str(forged), 0)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(SlurmDLError, match="did not reach this task"):
        run_array_task(str(forged), 0)
    assert not marker.exists()


def test_simulate_via_slurm_from_a_group_writable_directory_submits_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from slurm_dl.cli.main import app

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpus,submit_time,duration\n1,1,0,100\n2,2,10,200\n")
    group = tmp_path / "project"
    group.mkdir()
    os.chmod(group, 0o775)
    monkeypatch.chdir(group)
    submitted = []
    monkeypatch.setattr(sim_array, "run_array", lambda *a, **kw: submitted.append(a))
    out = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--format",
            "csv",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--policy",
            "fifo",
            "--via-slurm",
        ],
    )
    assert out.exit_code != 0 and not submitted
    assert "the work folder cannot go in" in out.output and "writable by its group" in out.output
    assert "Traceback" not in out.output and not list(group.iterdir())
