"""The pure renderer: golden scripts for every template variant, defaults, and rejected values.

Update the golden files after an intended template change with:
    SLURM_DL_REGEN_GOLDEN=1 pytest tests/unit/test_render.py
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_dl.dlsubmit.defaults import builtin_site
from slurm_dl.cli.config_file import load_config
from slurm_dl.dlsubmit.render import (
    JobSpec,
    RenderError,
    UserDefaults,
    render,
    sbatch_directive,
    shell_words,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "dlsubmit"
TESTBED = load_config(ROOT / "site-configs" / "testbed.toml")

VARIANTS: dict[str, tuple[JobSpec, str]] = {
    "train-single": (
        JobSpec(
            kind="train",
            command=("python3", "train.py", "--lr", "0.1"),
            gpus=4,
            time_minutes=90,
            name="resnet",
        ),
        "testbed",
    ),
    "train-multinode": (
        JobSpec(
            kind="train",
            command=("python3", "train.py"),
            gpus=16,
            nodes=2,
            gpu_type="h100",
            launcher="torchrun",
            name="llm",
            cpus_per_gpu=4,
            mem_per_gpu_gb=30,
        ),
        "testbed",
    ),
    "train-plain-timeout-requeue": (
        JobSpec(
            kind="train",
            command=("./loop.sh",),
            gpus=1,
            launcher="none",
            requeue_on_timeout=True,
            env=(("SEED", "7"),),
        ),
        "builtin",
    ),
    "infer": (
        JobSpec(
            kind="infer",
            command=("python3", "infer.py", "--item", "{item}"),
            gpus=1,
            inputs="items.txt",
            name="embed",
        ),
        "testbed",
    ),
    "serve": (
        JobSpec(
            kind="serve", command=("python3", "-m", "http.server", "{port}"), gpus=1, name="api"
        ),
        "testbed",
    ),
    "serve-preemptible": (
        JobSpec(
            kind="serve",
            command=("./server", "--port={port}"),
            gpus=0,
            preemptible=True,
            endpoint_file="/shared/api.endpoint",
        ),
        "builtin",
    ),
    "sweep": (
        JobSpec(
            kind="sweep",
            command=("python3", "train.py", "--hp={param}"),
            gpus=1,
            params=("lr=0.1", "lr=0.01", "lr=0.001 wd=0.1"),
            parallel=2,
            name="hpo",
        ),
        "testbed",
    ),
}


def _site(which: str):
    return TESTBED if which == "testbed" else builtin_site()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden_script(variant: str) -> None:
    spec, site = VARIANTS[variant]
    script = render(spec, _site(site)).script
    path = GOLDEN / f"{variant}.sh"
    if os.environ.get("SLURM_DL_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script)
    assert path.exists(), (
        f"missing golden file {path}; run SLURM_DL_REGEN_GOLDEN=1 pytest {__file__}"
    )
    assert script == path.read_text(), (
        f"{variant} changed; if intended: SLURM_DL_REGEN_GOLDEN=1 pytest {__file__}"
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_script_is_valid_bash_with_checkpoint_contract(variant: str) -> None:
    spec, site = VARIANTS[variant]
    job = render(spec, _site(site))
    assert subprocess.run(["bash", "-n"], input=job.script, text=True).returncode == 0
    for needed in (
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "SLURM_RESTART_COUNT",
        "RESUME_FROM",
        "export PYTHONUNBUFFERED=1",
        "CKPT_DIR",
    ):
        assert needed in job.script
    if spec.kind != "serve" or spec.preemptible:
        assert "#SBATCH --signal=B:USR2@" in job.script and "trap dl_on_usr2 USR2" in job.script
    else:
        assert "--signal" not in job.script
    if spec.kind != "serve":
        assert (
            "MASTER_ADDR" in job.script
            and "MASTER_PORT" in job.script
            and "WORLD_SIZE" in job.script
        )


def test_rendering_is_deterministic() -> None:
    spec, _ = VARIANTS["train-single"]
    assert render(spec, TESTBED) == render(spec, TESTBED)


def test_site_and_user_defaults_apply() -> None:
    spec = JobSpec(kind="train", command=("x",))
    job = render(spec, TESTBED)
    assert "--time=60" in job.directives  # testbed: classes.train.default_time_minutes
    assert "--signal=B:USR2@10" in job.directives  # testbed: preemption.grace_seconds
    assert "--partition=gpu" in job.directives
    user = UserDefaults(
        partition="other",
        account="vision",
        time_minutes=45,
        output_dir="logs",
        checkpoint_root="/scratch/ck",
        max_restarts=2,
    )
    job = render(spec, TESTBED, user)
    assert {"--time=45", "--partition=other", "--account=vision"} <= set(job.directives)
    assert job.output == "logs/train-x-%j.out" and job.checkpoint_dir == "/scratch/ck/train-x"
    assert "DL_MAX_RESTARTS=2" in job.script
    # The command line beats the user's file.
    job = render(
        JobSpec(kind="train", command=("x",), time_minutes=5, partition="gpu"), TESTBED, user
    )
    assert {"--time=5", "--partition=gpu"} <= set(job.directives)


def test_output_lands_in_the_submit_directory_by_default() -> None:
    job = render(JobSpec(kind="train", command=("python3",), name="a b/c"), TESTBED)
    assert job.output == "a_b_c-%j.out" and "/" not in job.output
    sweep = render(
        JobSpec(kind="sweep", command=("x",), params=("1", "2", "3"), parallel=2), TESTBED
    )
    assert "--array=0-2%2" in sweep.directives and sweep.output.endswith("-%A_%a.out")


def test_filter_args_are_every_directive_the_filter_check_reads() -> None:
    from slurm_dl.core.rules.sbatch_args import parse_sbatch_args

    job = render(JobSpec(kind="train", command=("x",), gpus=16, nodes=2), TESTBED)
    args = job.filter_args()
    assert "--gpus-per-node=8" in args and "--nodes=2" in args and "--requeue" in args
    assert any(a.startswith("--signal=B:USR2@") for a in args)
    parse_sbatch_args(args)  # every directive dlsubmit writes is one `filter check` reads


@pytest.mark.parametrize(
    "spec, fragment",
    [
        (JobSpec(kind="train", command=("x",), name="a\nb"), "job name"),
        (JobSpec(kind="train", command=("x",), name='say "hi"'), "job name"),
        (JobSpec(kind="train", command=("x",), name="back\\slash"), "job name"),
        (JobSpec(kind="train", command=("x",), output="out\r.txt"), "output path"),
        (JobSpec(kind="train", command=("x",), partition="gpu --uid=0"), "partition"),
        (JobSpec(kind="train", command=("x",), account="a;b"), "account"),
        (JobSpec(kind="train", command=("x",), gpu_type="a100"), "GPU type"),
        (
            JobSpec(kind="train", command=("x",), env=(("BAD-NAME", "1"),)),
            "environment variable name",
        ),
        (JobSpec(kind="train", command=("a\x00b",)), "NUL"),
        (JobSpec(kind="train", command=()), "no command"),
        (JobSpec(kind="train", command=("x",), gpus=12), "per node"),
        (JobSpec(kind="train", command=("x",), gpus=9, nodes=2), "split evenly"),
        (JobSpec(kind="infer", command=("x",), nodes=2, gpus=2), "only train"),
        (JobSpec(kind="train", command=("x",), time_minutes=99999), "--time"),
        (JobSpec(kind="train", command=("x",), cpus_per_gpu=64), "--cpus-per-gpu"),
        (JobSpec(kind="infer", command=("x",)), "--inputs"),
        (JobSpec(kind="sweep", command=("x",)), "parameter sets"),
        (JobSpec(kind="train", command=("x",), time_minutes=1, grace_seconds=60), "--grace"),
    ],
)
def test_unsafe_or_impossible_values_are_rejected_with_the_value_named(
    spec: JobSpec, fragment: str
) -> None:
    with pytest.raises(RenderError) as e:
        render(spec, TESTBED)
    assert fragment in str(e.value)


def test_sbatch_directive_quotes_for_sbatch_not_shell() -> None:
    assert sbatch_directive("--job-name", "plain-1.0") == "--job-name=plain-1.0"
    assert sbatch_directive("--job-name", "a b; $(x) `y` #z") == '--job-name="a b; $(x) `y` #z"'


def test_placeholders_expand_only_for_their_kind() -> None:
    assert (
        shell_words(("echo", "{item}", "x{item}y"), "infer") == 'echo "${DL_ITEM}" x"${DL_ITEM}"y'
    )
    assert shell_words(("echo", "{item}"), "train") == "echo '{item}'"
    assert shell_words(("echo", "--port={port}"), "serve") == 'echo --port="${PORT}"'


def test_share_asks_the_filter_for_a_shard_and_only_for_one_gpu() -> None:
    spec = JobSpec(
        kind="infer",
        command=("python3", "infer.py", "{item}"),
        gpus=1,
        inputs="items.txt",
        share=True,
    )
    assert "#SBATCH --comment=dl:class=inference;ckpt=1;share=1" in render(spec, TESTBED).script
    assert (
        ";share=1"
        not in render(
            JobSpec(
                kind="infer", command=("python3", "infer.py", "{item}"), gpus=1, inputs="items.txt"
            ),
            TESTBED,
        ).script
    )
    with pytest.raises(
        RenderError, match=r"--share: only a 1-GPU job can share a GPU \(this one asks 2\)"
    ):
        render(
            JobSpec(
                kind="infer",
                command=("python3", "infer.py", "{item}"),
                gpus=2,
                inputs="items.txt",
                share=True,
            ),
            TESTBED,
        )


def test_deadline_and_deadline_steps_go_into_the_comment_the_filter_reads() -> None:
    job = render(
        JobSpec(kind="train", command=("x",), time_minutes=60, deadline_steps="4h=10,6h=5"), TESTBED
    )
    assert "--comment=dl:class=train;ckpt=1;deadline_steps=4h=10,6h=5" in job.directives
    job = render(JobSpec(kind="train", command=("x",), deadline="2030-01-01T00:00"), TESTBED)
    assert "--comment=dl:class=train;ckpt=1;deadline=2030-01-01T00:00" in job.directives
    job = render(JobSpec(kind="train", command=("x",), time_minutes=60, deadline="6h"), TESTBED)
    assert "--comment=dl:class=train;ckpt=1;deadline=6h" in job.directives  # the filter reads it


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"deadline": "soon"}, "--deadline soon: expected YYYY-MM-DDTHH:MM"),
        ({"deadline": "6 hours"}, "--deadline 6 hours: expected"),
        ({"deadline_steps": "4h=5,6h=10"}, "values must fall"),
        ({"deadline_steps": "4h=10;class=serve"}, "no spaces"),
        ({"deadline": "2030-01-01T00:00", "deadline_steps": "4h=1"}, "one or the other"),
    ],
)
def test_bad_deadlines_are_refused_before_anything_is_submitted(fields, words) -> None:
    with pytest.raises(RenderError, match=words):
        render(JobSpec(kind="train", command=("x",), **fields), TESTBED)


def test_elastic_train_job_is_submitted_at_its_maximum_and_reads_its_size_from_slurm() -> None:
    """``--gpus 8-32``: the directives ask for the top (4 x 8), the comment names the sizes for
    the filter, and each start reads what Slurm granted (a resize changes it)."""
    from slurm_dl.dlsubmit.elastic import gpus_option

    site = load_config(ROOT / "site-configs" / "testbed.toml")
    fields = gpus_option("train", "8-32")
    assert fields == {"gpus": 32, "elastic": "8-32"}
    job = render(JobSpec(kind="train", command=("python3", "t.py"), **fields), site)
    assert "#SBATCH --nodes=4\n" in job.script and "#SBATCH --gpus-per-node=8\n" in job.script
    assert "#SBATCH --comment=dl:class=train;ckpt=1;elastic=8-32\n" in job.script
    assert "export SLURM_DL_WORLD_GPUS=$(( DL_NNODES * DL_GPUS_PER_NODE ))" in job.script
    assert '--nproc_per_node="$DL_GPUS_PER_NODE"' in job.script
    rigid = render(JobSpec(kind="train", command=("python3", "t.py"), gpus=32, nodes=4), site)
    assert "SLURM_DL_WORLD_GPUS" not in rigid.script and "elastic" not in rigid.script
    for bad, says in (("16,8", "sort"), ("0-8", "at least 1"), ("8-8", "below")):
        with pytest.raises(ValueError, match=says):
            gpus_option("train", bad)
    with pytest.raises(ValueError, match="only train jobs"):
        gpus_option("infer", "1-2")
