"""slurm-dl's cli_filter.lua under lua5.1: it writes sbatch's final ``--signal`` into the comment
as ``dl:signal=``, where the job_submit filter reads it (job_submit.lua cannot see --signal).

Only ``slurm`` and the options table are stand-ins (the plugin gives the script both).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

CLI_FILTER = Path(__file__).resolve().parents[2] / "jobsubmit" / "cli_filter.lua"

HARNESS = r"""
slurm = { SUCCESS = 0, ERROR = -1 }
dofile(arg[1])
local options = { type = arg[2] }
if arg[3] ~= "-" then options["signal"] = arg[3] end
if arg[4] ~= "-" then options["comment"] = arg[4] end
assert(slurm_cli_setup_defaults(options, true) == 0)
local rc = slurm_cli_pre_submit(options, 0)
assert(slurm_cli_post_submit(0, 1234, 4294967294) == 0)
io.write(tostring(rc), "\n", options["comment"] or "(none)")
"""

pytestmark = pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 is not installed")


def pre_submit(tmp_path: Path, signal: str, comment: str, kind: str = "sbatch") -> str:
    harness = tmp_path / "h.lua"
    harness.write_text(HARNESS)
    out = subprocess.run(
        ["lua5.1", str(harness), str(CLI_FILTER), kind, signal, comment],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    rc, comment_after = out.stdout.split("\n", 1)
    assert rc == "0"
    return comment_after


@pytest.mark.parametrize(
    "signal, comment, after",
    [
        ("B:USR2@60", "dl:ckpt=1", "dl:ckpt=1 dl:signal=B:USR2@60"),
        ("B:USR2@60", "-", "dl:signal=B:USR2@60"),
        ("USR2", "run 7", "run 7 dl:signal=USR2"),
        ("B:USR2@60", "dl:ckpt=1 dl:signal=B:USR2@5", "dl:ckpt=1 dl:signal=B:USR2@60"),
        ("RB:TERM@9", "dl:ckpt=1;signal=USR1", "dl:ckpt=1 dl:signal=RB:TERM@9"),
        ("B:USR2", "dl:ckpt=1", "dl:ckpt=1 dl:signal=B:USR2"),  # @60 is left out
        ("0", "dl:ckpt=1", "dl:ckpt=1"),  # an unset --signal on 22.05
        ("0@0", "dl:ckpt=1", "dl:ckpt=1"),  # and on 24.11
        ("-", "dl:ckpt=1", "dl:ckpt=1"),
        ("B:USR2@60; rm", "x", "x"),
    ],
)
def test_sbatchs_final_signal_goes_into_the_comment(tmp_path, signal, comment, after) -> None:
    assert pre_submit(tmp_path, signal, comment) == after


def test_srun_steps_are_left_alone(tmp_path) -> None:
    assert pre_submit(tmp_path, "USR2@60", "dl:ckpt=1", kind="srun") == "dl:ckpt=1"


def test_what_it_writes_the_filter_reads() -> None:
    from slurm_dl.core.hints import parse_hints
    from slurm_dl.core.rules.script import parse_signal

    hint = parse_hints("dl:ckpt=1 dl:signal=B:USR2@60")["signal"]
    assert parse_signal(hint).text() == "B:USR2@60"
    assert json.dumps(hint)  # plain text through the shim's JSON
