"""Mistakes a newcomer makes, caught at submission with a message that says what to do:
no GPU for training, more GPUs than the cluster has, the command as one quoted string, a
program that is not there, an inputs file that does not exist, a GPU type in capitals."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.dlsubmit.cli import app
from slurm_dl.dlsubmit.checks import ClusterFacts, command_problem, too_many_gpus
from slurm_dl.cli.config_file import load_config
from slurm_dl.dlsubmit.render import JobSpec, RenderError, UserDefaults, render

ROOT = Path(__file__).resolve().parents[2]
TESTBED = load_config(ROOT / "site-configs" / "testbed.toml")
runner = CliRunner()


@pytest.mark.parametrize("kind", ["train", "sweep"])
def test_a_training_job_without_gpus_is_refused(kind: str) -> None:
    params = ("1",) if kind == "sweep" else ()
    with pytest.raises(RenderError, match=r"--gpus 0: a (train|sweep) job needs at least one GPU"):
        render(
            JobSpec(kind=kind, command=("python3", "t.py"), gpus=0, params=params),
            TESTBED,
            UserDefaults(),
        )


def test_the_command_as_one_quoted_string_is_refused_with_its_words() -> None:
    with pytest.raises(RenderError) as e:
        render(
            JobSpec(kind="train", command=("python3 train.py --lr 0.1",)), TESTBED, UserDefaults()
        )
    assert "-- python3 train.py --lr 0.1" in str(e.value) and all(
        len(ln) <= 80 for ln in str(e.value).splitlines()
    )
    # a program whose path has a space is a program, not a command line
    render(JobSpec(kind="train", command=("./my run.sh",)), TESTBED, UserDefaults())


def test_gpu_type_names_are_taken_in_any_case() -> None:
    job = render(
        JobSpec(kind="train", command=("x",), gpus=2, gpu_type="H100"), TESTBED, UserDefaults()
    )
    assert "--gpus-per-node=h100:2" in job.directives


def test_more_gpus_than_the_cluster_has_says_how_many_it_has() -> None:
    facts = ClusterFacts(checked=True, gpus_per_node=[8, 8, 8, 8])
    assert (
        too_many_gpus(100, facts)
        == "--gpus 100: this cluster has 32 GPUs in all (4 nodes x 8); ask for 32 or fewer"
    )
    assert too_many_gpus(32, facts) is None
    assert (
        too_many_gpus(100, ClusterFacts(checked=False, why="no Slurm")) is None
    )  # cannot tell: Slurm decides


def test_a_program_not_found_here_is_warned_about() -> None:
    text = command_problem(["pyhton3", "t.py"], found=False)
    assert text and "'pyhton3' is not a program here" in text and "127" in text
    assert command_problem(["python3", "t.py"], found=True) is None


def test_inputs_that_do_not_exist_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
    r = runner.invoke(
        app,
        [
            "infer",
            "--config",
            str(ROOT / "site-configs" / "testbed.toml"),
            "--inputs",
            "nosuch.txt",
            "--dry-run",
            "--",
            "python3",
            "x.py",
            "{item}",
        ],
    )
    assert r.exit_code == 1 and "--inputs nosuch.txt: no such file in" in r.output, r.output


def test_common_sbatch_options_pass_through_as_sbatch_takes_them() -> None:
    job = render(
        JobSpec(
            kind="train",
            command=("x",),
            qos="high",
            constraint="ib",
            dependency="afterok:12",
            mail_type="END,FAIL",
            mail_user="me@example.org",
        ),
        TESTBED,
        UserDefaults(),
    )
    for d in (
        "--qos=high",
        "--constraint=ib",
        "--dependency=afterok:12",
        "--mail-type=END,FAIL",
        "--mail-user=me@example.org",
    ):
        assert d in job.directives and f"#SBATCH {d}" in job.script
    # the filter reads them as it reads any sbatch job's
    from slurm_dl.core.rules.sbatch_args import parse_sbatch_args

    desc = parse_sbatch_args(job.filter_args(), user_name="u", now=0.0)
    assert desc.get("qos") == "high"
    with pytest.raises(RenderError, match="no spaces"):
        render(
            JobSpec(kind="train", command=("x",), dependency="afterok:1 afterok:2"),
            TESTBED,
            UserDefaults(),
        )
