"""sbatch-style arguments → the same job description the Lua shim sends (filter check, dlsubmit --dry-run)."""

from __future__ import annotations

import pytest

from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.rules.sbatch_args import SbatchArgsError, parse_mem_mb, parse_sbatch_args, parse_time_minutes


def test_encodings_match_what_slurmctld_gives_the_shim() -> None:
    d = parse_sbatch_args(["--gpus=16", "--gres", "gpu:h100:2", "-N", "2", "-t", "1:30:00", "-p", "gpu",
                           "--comment=dl:class=train", "--cpus-per-gpu=4", "--mem-per-gpu=8G", "--array=0-3",
                           "--switches=1@10", "--requeue", "-J", "x", "-A", "lab"], user_name="bob", user_id=7)
    assert d["tres_per_job"] == "gres:gpu:16"
    assert d["tres_per_node"] == "gres:gpu:h100:2"
    assert d["min_nodes"] == 2 and d["max_nodes"] == 2
    assert d["time_limit"] == 90 and d["partition"] == "gpu"
    assert d["cpus_per_tres"] == "gres:gpu:4" and d["mem_per_tres"] == "gres:gpu:8192"
    assert d["array_inx"] == "0-3" and d["req_switch"] == 1 and d["wait4switch"] == 600
    assert d["requeue"] == 1 and d["name"] == "x" and d["account"] == "lab" and d["user_name"] == "bob"


def test_unset_numbers_are_no_val() -> None:
    d = parse_sbatch_args([])
    assert d["time_limit"] == NO_VAL and d["min_nodes"] == NO_VAL and d["requeue"] == NO_VAL16


def test_gpus_per_node_and_short_options() -> None:
    d = parse_sbatch_args(["--gpus-per-node=h100:4", "-N2-3", "-t30"])
    assert d["tres_per_node"] == "gres:gpu:h100:4" and d["min_nodes"] == 2 and d["max_nodes"] == 3
    assert d["time_limit"] == 30


@pytest.mark.parametrize("text, minutes", [("30", 30), ("1:30", 2), ("2:00:00", 120), ("1-0", 1440),
                                           ("1-2:30", 1590), ("0-0:0:59", 1)])
def test_time_formats(text: str, minutes: int) -> None:
    assert parse_time_minutes(text) == minutes


def test_memory_units() -> None:
    assert parse_mem_mb("512") == 512 and parse_mem_mb("2G") == 2048 and parse_mem_mb("1T") == 1048576


def test_relative_and_absolute_deadlines() -> None:
    assert parse_sbatch_args(["--deadline=now+2hours"], now=1000.0)["deadline"] == 1000 + 7200
    assert parse_sbatch_args(["--deadline", "1970-01-02T00:00"])["deadline"] == 86400
    with pytest.raises(SbatchArgsError, match="current time"):
        parse_sbatch_args(["--deadline=now+1hour"])


@pytest.mark.parametrize(
    "args, text",
    [(["--frobnicate"], "unknown or unsupported"), (["-t"], "needs a value"), (["-t", "soon"], "--time="),
     (["-N", "two"], "-N="), (["--mem-per-gpu=lots"], "memory"), (["--deadline=whenever"], "--deadline=")],
)
def test_bad_arguments_say_which(args: list[str], text: str) -> None:
    with pytest.raises(SbatchArgsError, match=text):
        parse_sbatch_args(args)


def test_quoted_values_as_in_sbatch_directives() -> None:
    d = parse_sbatch_args(['--comment="dl:class=inference dl:deadline=1"', '--job-name="a b"'])
    assert d["comment"] == "dl:class=inference dl:deadline=1" and d["name"] == "a b"
