"""sbatch-style arguments → the same job description the Lua shim sends (filter check, dlsubmit --dry-run)."""

from __future__ import annotations

import pytest

from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.rules.sbatch_args import (
    SbatchArgsError,
    parse_mem_mb,
    parse_sbatch_args,
    parse_time_minutes,
)


def test_encodings_match_what_slurmctld_gives_the_shim() -> None:
    d = parse_sbatch_args(
        [
            "--gpus=16",
            "--gres",
            "gpu:h100:2",
            "-N",
            "2",
            "-t",
            "1:30:00",
            "-p",
            "gpu",
            "--comment=dl:class=train",
            "--cpus-per-gpu=4",
            "--mem-per-gpu=8G",
            "--array=0-3",
            "--switches=1@10",
            "--requeue",
            "-J",
            "x",
            "-A",
            "lab",
        ],
        user_name="bob",
        user_id=7,
    )
    assert d["tres_per_job"] == "gres:gpu:16"
    assert d["tres_per_node"] == "gres:gpu:h100:2"
    assert d["min_nodes"] == 2 and d["max_nodes"] == 2
    assert d["time_limit"] == 90 and d["partition"] == "gpu"
    assert d["cpus_per_tres"] == "gres:gpu:4" and d["mem_per_tres"] == "gres:gpu:8192"
    assert d["array_inx"] == "0-3" and d["req_switch"] == 1 and d["wait4switch"] == 600
    assert (
        d["requeue"] == 1 and d["name"] == "x" and d["account"] == "lab" and d["user_name"] == "bob"
    )


def test_unset_numbers_are_no_val() -> None:
    d = parse_sbatch_args([])
    assert d["time_limit"] == NO_VAL and d["min_nodes"] == NO_VAL and d["requeue"] == NO_VAL16


def test_gpus_per_node_and_short_options() -> None:
    d = parse_sbatch_args(["--gpus-per-node=h100:4", "-N2-3", "-t30"])
    assert d["tres_per_node"] == "gres:gpu:h100:4" and d["min_nodes"] == 2 and d["max_nodes"] == 3
    assert d["time_limit"] == 30


@pytest.mark.parametrize(
    "text, minutes",
    [("30", 30), ("1:30", 2), ("2:00:00", 120), ("1-0", 1440), ("1-2:30", 1590), ("0-0:0:59", 1)],
)
def test_time_formats(text: str, minutes: int) -> None:
    assert parse_time_minutes(text) == minutes


def test_memory_units() -> None:
    assert (
        parse_mem_mb("512") == 512 and parse_mem_mb("2G") == 2048 and parse_mem_mb("1T") == 1048576
    )


def test_relative_and_absolute_deadlines() -> None:
    assert parse_sbatch_args(["--deadline=now+2hours"], now=1000.0)["deadline"] == 1000 + 7200
    assert parse_sbatch_args(["--deadline", "1970-01-02T00:00"])["deadline"] == 86400
    with pytest.raises(SbatchArgsError, match="current time"):
        parse_sbatch_args(["--deadline=now+1hour"])


@pytest.mark.parametrize(
    "args, text",
    [
        (["--frobnicate"], "unknown sbatch option"),
        (["-t"], "needs a value"),
        (["-t", "soon"], "--time="),
        (["-N", "two"], "-N="),
        (["--mem-per-gpu=lots"], "memory"),
        (["--deadline=whenever"], "--deadline="),
    ],
)
def test_bad_arguments_say_which(args: list[str], text: str) -> None:
    with pytest.raises(SbatchArgsError, match=text):
        parse_sbatch_args(args)


def test_quoted_values_as_in_sbatch_directives() -> None:
    d = parse_sbatch_args(['--comment="dl:class=inference dl:deadline=1"', '--job-name="a b"'])
    assert d["comment"] == "dl:class=inference dl:deadline=1" and d["name"] == "a b"


# --- every sbatch option (22.05, 24.11, 26.05), read as sbatch's getopt_long reads them ---------

from slurm_dl.core.rules.sbatch_args import IgnoredOption, parse_sbatch_components, reads  # noqa: E402
from slurm_dl.core.rules.sbatch_options import NONE, OPT, OPTIONS, SHORT, split_args  # noqa: E402

# A value sbatch takes for each option whose value the filter reads (the others take any text).
_READ_VALUES = {
    "gpus": "2",
    "gres": "gpu:1",
    "gpus-per-node": "2",
    "gpus-per-task": "1",
    "gpus-per-socket": "1",
    "tres-per-task": "gres/gpu:1",
    "nodes": "1",
    "ntasks": "2",
    "ntasks-per-node": "2",
    "tasks-per-node": "2",
    "ntasks-per-gpu": "1",
    "ntasks-per-tres": "1",
    "ntasks-per-socket": "1",
    "ntasks-per-core": "1",
    "sockets-per-node": "2",
    "extra-node-info": "2:8:2",
    "hint": "nomultithread",
    "cpus-per-task": "2",
    "mincpus": "2",
    "mem": "1G",
    "mem-per-cpu": "1G",
    "cpus-per-gpu": "2",
    "mem-per-gpu": "1G",
    "time": "10",
    "deadline": "2030-01-01T00:00",
    "switches": "1@5",
    "signal": "B:USR2@90",
    "exclusive": "user",
    "requeue": "expedite",
}


def test_the_table_has_sbatchs_options_and_letters() -> None:
    assert len(OPTIONS) >= 120
    for name in (
        "signal",
        "requeue",
        "no-requeue",
        "oversubscribe",
        "hold",
        "wrap",
        "exclusive",
        "ntasks-per-gpu",
        "tres-per-task",
        "segment",
        "power",
        "uid",
        "test-only",
        "get-user-env",
    ):
        assert name in OPTIONS, name
    assert (
        SHORT["s"].name == "oversubscribe" and SHORT["H"].name == "hold" and SHORT["k"].arg == OPT
    )
    assert (
        OPTIONS["exclusive"].arg == OPT
        and OPTIONS["hold"].arg == NONE
        and "het-group" not in OPTIONS
    )


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_sbatch_option_is_accepted_and_either_read_or_listed(name: str) -> None:
    opt = OPTIONS[name]
    value = _READ_VALUES.get(name, "x")
    args = [f"--{name}"] if opt.arg == NONE else [f"--{name}={value}"]
    if name == "gpus-per-socket":
        args.append("--sockets-per-node=2")
    job = parse_sbatch_components(args, now=0.0)
    assert len(job.components) == 1
    if not reads(name):
        assert [i.option for i in job.ignored] == [f"--{name}"]
    else:
        assert job.ignored == ()
    if opt.short:  # the letter works too, value attached or in the next word
        short = [f"-{opt.short}"] if opt.arg != "required" else [f"-{opt.short}", value]
        assert parse_sbatch_components(short, now=0.0).components[0] == job.components[0]


def test_new_encodings_the_rules_read() -> None:
    d = parse_sbatch_args(
        [
            "--gpus=4",
            "--ntasks-per-gpu=2",
            "--ntasks-per-socket=3",
            "--ntasks-per-core=1",
            "--signal=B:USR2@90",
            "--hold",
            "--exclusive",
        ]
    )
    assert d["ntasks_per_tres"] == 2 and d["ntasks_per_socket"] == 3 and d["ntasks_per_core"] == 1
    assert d["signal"] == "B:USR2@90" and d["shared"] == 0 and "priority" not in d
    assert parse_sbatch_args(["--ntasks-per-tres=3"])["ntasks_per_tres"] == 3
    for value, shared in (("user", 2), ("mcs", 3), ("topo", 4), ("oversubscribe", 1), ("USER", 2)):
        assert parse_sbatch_args([f"--exclusive={value}"])["shared"] == shared
    assert (
        parse_sbatch_args(["-s"])["shared"] == 1
        and parse_sbatch_args(["--oversubscribe"])["shared"] == 1
    )
    assert (
        parse_sbatch_args(["--exclusive", "-s"])["shared"] == 1
    )  # the last one counts, as in sbatch
    assert parse_sbatch_args(["--requeue=expedite"])["requeue"] == 1


@pytest.mark.parametrize(
    "text",
    [
        "USR2",
        "B:USR2@90",
        "USR2@90",
        "R:10@0",
        "SIGUSR2@60",
        "BR:TERM",
        "12",
        "b:usr2@90",
        "RB:USR1",
        "TERM@",
    ],
)
def test_signal_forms_sbatch_takes_are_kept_as_given(text: str) -> None:
    assert parse_sbatch_args([f"--signal={text}"])["signal"] == text


@pytest.mark.parametrize("text", ["FOO", "USR2@x", "USR2@70000", "0", "B:", "@90", "USR2@9 0"])
def test_signal_forms_sbatch_refuses(text: str) -> None:
    with pytest.raises(SbatchArgsError, match="--signal"):
        parse_sbatch_args([f"--signal={text}"])


def test_getopt_rules_optional_values_clusters_prefixes_and_the_end_of_options() -> None:
    job = parse_sbatch_components(["--exclusive", "user"])  # an optional value needs '='
    assert job.components[0]["shared"] == 0 and job.script == "user"
    d = parse_sbatch_args(
        ["-Hv", "-N2", "-n", "4", "-kfoo", "--part=gpu", "--gpus-per-n=2", "--ntasks-per-g=1"]
    )
    assert d["min_nodes"] == 2 and d["num_tasks"] == 4 and d["partition"] == "gpu"
    assert d["tres_per_node"] == "gres:gpu:2" and d["ntasks_per_tres"] == 1
    assert parse_sbatch_args(["--tasks-per=2"])["ntasks_per_node"] == 2  # alias: not ambiguous
    job = parse_sbatch_components(["-t", "5", "--", "--gpus=8"])
    assert "tres_per_job" not in job.components[0] and job.script == "--gpus=8"
    split = split_args(
        ["-J", "-x", "run.sh", "-N", "4"]
    )  # a required value takes the next word, whatever it is
    assert (
        split.components[0][0].value == "-x"
        and split.script == "run.sh"
        and split.script_args == ("-N", "4")
    )


@pytest.mark.parametrize(
    "args, text",
    [
        (["--gpu=2"], "ambiguous"),
        (["--hold=yes"], "takes no value"),
        (["-y"], "unknown sbatch option '-y'"),
        (["--het-group=0"], "unknown sbatch option"),
        (["--exclusive=all"], "user, mcs or topo"),
        (["--requeue=now"], "expedite"),
        (["--mem=1G", "--mem-per-gpu=1G"], "exclude"),
        (["--gpus-per-task=1", "--ntasks-per-gpu=1"], "exclude"),
        (["--ntasks-per-gpu=1", "-n1", "--tasks-per-node=1"], "exclude"),
        (["--ntasks-per-gpu=1", "--ntasks-per-tres=2"], "disagree"),
        (["--ntasks-per-core=0"], "1 or more"),
        (["--hint=fast"], "compute_bound"),
        (["-B", "2:x"], "SOCKETS"),
        (["--wrap=true", "job.sh"], "--wrap"),
        (["-t"], "-t needs a value"),
        (["--tres-per-task=cpu=2", "-c", "2"], "exclude"),
    ],
)
def test_what_sbatch_refuses_is_refused_in_one_line(args, text) -> None:
    with pytest.raises(SbatchArgsError, match=text) as e:
        parse_sbatch_args(args)
    assert "\n" not in str(e.value) and len(str(e.value)) <= 100


def test_options_after_the_script_are_its_own_and_its_directives_are_not_read() -> None:
    job = parse_sbatch_components(["-t", "5", "train.sh", "--gpus=8"])
    assert "tres_per_job" not in job.components[0] and job.script == "train.sh"
    assert [i.option for i in job.ignored] == ["train.sh"] and "#SBATCH" in job.ignored[0].line()


def test_a_heterogeneous_job_is_one_job_desc_per_component() -> None:
    job = parse_sbatch_components(
        ["-G", "1", "-t", "5", ":", "-N2", "--gpus-per-node=8", "--hold", ":", "-n", "2"]
    )
    first, second, third = job.components
    assert (first["het_job_offset"], second["het_job_offset"], third["het_job_offset"]) == (0, 1, 2)
    assert first["has_script"] and not second["has_script"] and not third["has_script"]
    assert first["tres_per_job"] == "gres:gpu:1" and first["time_limit"] == 5
    assert (
        second["min_nodes"] == 2
        and second["tres_per_node"] == "gres:gpu:8"
        and second["time_limit"] == NO_VAL
    )
    assert third["num_tasks"] == 2 and "tres_per_node" not in third
    assert [i.option for i in job.ignored] == ["--hold"]
    assert "het_job_offset" not in parse_sbatch_args(["-G", "1"])
    with pytest.raises(SbatchArgsError, match="heterogeneous"):
        parse_sbatch_args(["-G", "1", ":", "-G", "2"])


def test_gres_and_gpus_per_node_together_as_sbatch_joins_them() -> None:
    assert (
        parse_sbatch_args(["--gres=gpu:h100:1,shard:2", "--gpus-per-node=2"])["tres_per_node"]
        == "gres:gpu:2,gres:gpu:h100:1,gres:shard:2"
    )
    assert parse_sbatch_args(["--gres=gres:gpu:1"])["tres_per_node"] == "gres:gpu:1"
    assert "tres_per_node" not in parse_sbatch_args(["--gres=none"])


def test_hint_extra_node_info_overcommit_and_tres_per_task() -> None:
    assert parse_sbatch_args(["--hint=multithread"])["ntasks_per_core"] == 0xFFFF
    assert "ntasks_per_core" not in parse_sbatch_args(["--hint=nomultithread"])
    assert (
        parse_sbatch_args(["--hint=multithread", "--ntasks-per-core=1"])["ntasks_per_core"] == 1
    )  # hint ignored
    assert "sockets_per_node" not in parse_sbatch_args(
        ["--sockets-per-node=2", "--hint=compute_bound"]
    )
    assert parse_sbatch_args(["-B", "2:8:2"])["sockets_per_node"] == 2
    assert "sockets_per_node" not in parse_sbatch_args(["-B", "*:4"])
    d = parse_sbatch_args(["-O", "-N", "3", "-n", "12", "-c", "4"])
    assert d["min_cpus"] == 3 and d["cpus_per_task"] == 4
    d = parse_sbatch_args(["--tres-per-task=cpu=4,gres:gpu:h100=1", "-n", "2"])
    assert (
        d["tres_per_task"] == "cpu=4,gres/gpu:h100=1"
        and d["cpus_per_task"] == 4
        and d["min_cpus"] == 8
    )


def test_ignored_lines_fit_80_columns_and_say_why() -> None:
    names = [f"--{n}" for n, o in OPTIONS.items() if not reads(n) and o.arg != "required"]
    job = parse_sbatch_components(
        [*names, "--uid=bob", "/very/long/path/to/a/directory/with/the/train.sh"]
    )
    lines = [i.line() for i in job.ignored]
    assert all(len(line) <= 80 and line.startswith("ignored ") for line in lines), max(
        lines, key=len
    )
    assert any("submitting user" in line for line in lines) and any(
        "only print" in line for line in lines
    )
    assert IgnoredOption("--x").why == "the filter's decision does not depend on it"
