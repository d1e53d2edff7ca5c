"""The job's own ``--signal`` decides where the preemption signal goes, which one, and the lead
time before a requeue; ``dl:ckpt`` decides only for a job that gave none; a batch shell that does
not trap its signal is never made a victim (or is refused, as the site says)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.rules.script import declared_signal, directives, parse_signal, trapped_signals
from slurm_dl.core.tags import encode_tag, parse_tag

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0

SUBMITIT = """#!/bin/bash

# Parameters
#SBATCH --gpus-per-node=1
#SBATCH --job-name=submitit
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=/tmp/%j_0_log.out
#SBATCH --signal=USR2@90
#SBATCH --time=5
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /tmp/%j_%t_log.out python -u -m submitit.core._submit /tmp
"""
LIGHTNING = "#!/bin/bash\n#SBATCH --signal=SIGUSR1@90\n#SBATCH --requeue\nsrun python train.py\n"
BASH_TRAP = (
    "#!/bin/bash\n#SBATCH --signal=B:USR2@45\ntrap 'save; exit 0' USR2\nsleep 100 & wait $!\n"
)
NO_TRAP = "#!/bin/bash\nsleep 100\n"


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "site-configs" / "testbed.toml")


def run(cfg, script: str | None, comment: str, **fields):
    desc = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 60,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "has_script": script is not None,
        "tres_per_node": "gres:gpu:1",
        "comment": comment,
    }
    desc.update(fields)
    if script is not None:
        desc["script_head"] = script
    return decide(desc, cfg, FilterContext(now=NOW))


@pytest.mark.parametrize(
    "text, name, batch, lead",
    [
        ("USR2@90", "USR2", False, 90),
        ("B:USR2@120", "USR2", True, 120),
        ("SIGUSR1@90", "USR1", False, 90),
        ("12", "USR2", False, 60),
        ("RB:TERM@5", "TERM", True, 5),
        ("b:sigusr2@7", "USR2", True, 7),
    ],
)
def test_signal_values_read_as_sbatch_reads_them(text, name, batch, lead) -> None:
    d = parse_signal(text)
    assert (d.name, d.batch, d.lead_s) == (name, batch, lead)


@pytest.mark.parametrize("text", ["FOO", "USR2@", "X:USR2", "99", "", "USR2@9999999"])
def test_signal_values_sbatch_refuses_are_none(text) -> None:
    assert parse_signal(text) is None


def test_directives_stop_at_the_first_command_and_at_hetjob() -> None:
    script = (
        "#!/bin/sh\n#SBATCH -t 5 # a note\n\n# text\n#SBATCH --signal USR2@30\n#SBATCH hetjob\n"
        "#SBATCH --signal=B:USR1@9\necho\n#SBATCH --signal=TERM\n"
    )
    assert directives(script) == ["-t", "5", "--signal", "USR2@30"]
    assert declared_signal(script).text() == "USR2@30"
    assert declared_signal(SUBMITIT).text() == "USR2@90" and declared_signal(NO_TRAP) is None


@pytest.mark.parametrize(
    "script, trapped",
    [
        (BASH_TRAP, {"USR2"}),
        (NO_TRAP, set()),
        ("trap -- 'a b' SIGINT 12\n", {"INT", "USR2"}),
        ("trap 'kill -USR2 $p' TERM\n", {"TERM"}),
        ("trap -p\n", set()),
        ("import signal\nsignal.signal(signal.SIGUSR2, handler)\n", {"USR2"}),
        ("  trap dl_on_usr2 USR2\n", {"USR2"}),
        ("# trap x USR2\n", set()),
        ("trap 'exit 0' USR2; sleep 60 TERM\n", {"USR2"}),
    ],
)
def test_trapped_signals(script, trapped) -> None:
    assert trapped_signals(script) == frozenset(trapped)


def test_submitit_with_dl_ckpt_1_gets_its_signal_in_its_steps(cfg) -> None:
    """The first row of the docs (dl:ckpt=1) on a submitit job used to send USR2 to a batch shell
    without a handler, and the job died: its own --signal=USR2@90 says the steps."""
    d = run(cfg, SUBMITIT, "dl:ckpt=1", requeue=1)
    tag = parse_tag(d.changes["admin_comment"])
    assert (
        tag.checkpointable
        and tag.signal_target == "steps"
        and tag.signal == "USR2"
        and tag.lead_s == 90
    )
    assert any("goes to the job's steps" in n and "--signal=USR2@90" in n for n in d.notices)
    d = run(cfg, SUBMITIT, "dl:ckpt=steps", requeue=1)
    assert parse_tag(d.changes["admin_comment"]).signal_target == "steps" and not d.notices


def test_lightnings_sigusr1_is_the_signal_it_gets(cfg) -> None:
    tag = parse_tag(run(cfg, LIGHTNING, "dl:ckpt=steps").changes["admin_comment"])
    assert tag.signal == "USR1" and tag.signal_target == "steps" and tag.lead_s == 90


def test_a_batch_trap_with_its_own_lead_time(cfg) -> None:
    tag = parse_tag(run(cfg, BASH_TRAP, "dl:ckpt=1").changes["admin_comment"])
    assert (
        tag.checkpointable
        and tag.signal_target == "batch"
        and tag.signal == "USR2"
        and tag.lead_s == 45
    )


def test_a_batch_shell_without_a_trap_is_never_a_victim(cfg) -> None:
    d = run(cfg, NO_TRAP, "dl:ckpt=1")
    assert d.accepted and not parse_tag(d.changes["admin_comment"]).checkpointable
    assert any("does not trap USR2" in n and "will not be preempted" in n for n in d.notices)
    data = cfg.model_dump(mode="json")
    data["filter"]["unhandled_signal"] = "refuse"
    d = run(parse_config(data), NO_TRAP, "dl:ckpt=1")
    assert not d.accepted and d.rule == "validate.signal_handler" and "Fix:" in d.message


def test_without_a_script_or_a_declaration_nothing_changes(cfg) -> None:
    tag = parse_tag(
        run(cfg, None, "dl:ckpt=1", has_script=True).changes["admin_comment"]
    )  # an older shim
    assert tag.checkpointable and tag.signal is None and tag.lead_s is None
    tag = parse_tag(
        run(cfg, BASH_TRAP, "").changes["admin_comment"]
    )  # no opt-in: no signal recorded
    assert not tag.checkpointable and tag.signal is None


def test_tags_carry_the_signal_and_lead_and_refuse_bad_ones() -> None:
    text = "sdl1:class=train;ckpt=steps;gpus=1;shape=any;sig=USR1;lead=90"
    tag = parse_tag(text)
    assert tag.signal == "USR1" and tag.lead_s == 90 and encode_tag(tag) == text
    for bad in ("sig=usr1", "sig=USR1;x", "lead=-1", "lead=999999", "sig=" + "A" * 9):
        assert parse_tag(f"sdl1:class=train;ckpt=1;gpus=1;shape=any;{bad}") is None, bad


def test_a_signal_for_the_steps_of_a_script_without_steps_reaches_nothing(cfg) -> None:
    """submitit with use_srun=False still writes --signal=USR2@90: there is no step to get it."""
    no_srun = SUBMITIT.replace("srun --unbuffered --output /tmp/%j_%t_log.out ", "")
    d = run(cfg, no_srun, "dl:ckpt=steps", requeue=1)
    assert d.accepted and not parse_tag(d.changes["admin_comment"]).checkpointable
    assert any("starts no srun step" in n for n in d.notices)
    assert parse_tag(
        run(cfg, SUBMITIT, "dl:ckpt=steps", requeue=1).changes["admin_comment"]
    ).checkpointable
    mpi = (
        "#!/bin/bash\n#SBATCH --signal=USR2@60\nmodule load x # srun in a comment\nmpirun ./a.out\n"
    )
    assert parse_tag(run(cfg, mpi, "dl:ckpt=steps").changes["admin_comment"]).checkpointable


def test_the_command_lines_signal_wins_over_the_scripts(cfg) -> None:
    """``sbatch --signal=B:USR2@60`` over a script without one (or with another) is the job's
    signal, as Slurm takes it: the submit host's cli_filter reports it as ``dl:signal=``."""
    tag = parse_tag(run(cfg, BASH_TRAP, "dl:ckpt=1 dl:signal=B:USR2@60").changes["admin_comment"])
    assert (tag.signal, tag.signal_target, tag.lead_s) == ("USR2", "batch", 60)  # not the @45
    plain = "#!/bin/bash\ntrap 'exit 0' USR2\nsleep 100 & wait $!\n"
    tag = parse_tag(run(cfg, plain, "dl:signal=B:USR2@60 dl:ckpt=1").changes["admin_comment"])
    assert (tag.signal, tag.lead_s) == ("USR2", 60)
    tag = parse_tag(run(cfg, SUBMITIT, "dl:ckpt=steps;signal=USR2@300").changes["admin_comment"])
    assert (tag.signal_target, tag.lead_s) == ("steps", 300)


def test_an_unreadable_signal_hint_is_set_aside_and_the_script_counts(cfg) -> None:
    d = run(cfg, BASH_TRAP, "dl:ckpt=1 dl:signal=soon")
    tag = parse_tag(d.changes["admin_comment"])
    assert (tag.signal, tag.lead_s) == ("USR2", 45)
    assert any("ignored dl:signal=soon" in n for n in d.notices)
    assert all(len(n) <= 160 for n in d.notices)
