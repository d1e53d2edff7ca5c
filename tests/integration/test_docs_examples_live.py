"""Every command example in docs/users.md, run as written by an ordinary user (``nobody``) on a
REAL testbed with the testbed's site config: each is accepted (dlsubmit submits it, sbatch takes
it). The files the examples name (train.py, items.txt, grid.txt, ...) are made first, as a user
would have them. About 20 s.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from users import as_user, user_python

ROOT = Path(__file__).resolve().parents[2]
USERS_MD = ROOT / "docs" / "users.md"
FILES = {
    "train.py": "import sys; print('training', sys.argv[1:])\n",
    "infer.py": "import sys; print('item', sys.argv[1:])\n",
    "items.txt": "a\nb\n",
    "grid.txt": "# lr\n0.1\n0.01\n",
    "big.yaml": "layers: 2\n",
    "train.sbatch": "#!/bin/bash\n#SBATCH --gpus=1\npython3 train.py\n",
}


def examples() -> list[str]:
    """The command lines of the page's ```bash blocks (comments and blank lines left out)."""
    blocks = re.findall(r"```bash\n(.*?)```", USERS_MD.read_text(), re.S)
    lines = [ln.split("  #")[0].strip() for b in blocks for ln in b.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_the_users_guide_lists_examples_of_every_kind() -> None:
    found = " ".join(examples())
    for kind in ("dlsubmit train", "dlsubmit infer", "dlsubmit serve", "dlsubmit sweep", "sbatch"):
        assert kind in found, kind


def test_every_example_in_the_users_guide_runs_as_written(testbed) -> None:
    if testbed.bin_dir is not None:
        pytest.skip(
            "another release's clients run inside its Debian root; this runs on the host's Slurm"
        )
    run, public = as_user(testbed)
    bin_dir = user_python()
    work = public / "work"
    work.mkdir()
    for name, text in FILES.items():
        (work / name).write_text(text)
    shutil.chown(work, "nobody")
    for f in work.iterdir():
        shutil.chown(f, "nobody")
    cfg = public / "site.toml"
    cfg.write_text((ROOT / "site-configs" / "testbed.toml").read_text())
    cfg.chmod(0o644)
    env = [
        "env",
        f"PATH={bin_dir}:/usr/bin:/bin",
        f"SLURM_DL_CONFIG={cfg}",
        f"HOME={work}",
        "COLUMNS=80",
    ]
    jobs: list[str] = []
    try:
        for line in examples():
            argv = shlex.split(line)
            if argv[0] == "cat":  # reads what a running job wrote: not a submission
                continue
            out = run("bash", "-c", f'cd {work} && exec "$@"', "-", *env, *argv)
            assert out.returncode == 0, f"{line}\n{out.stdout}{out.stderr}"
            assert "Traceback" not in out.stderr, out.stderr
            ids = re.findall(r"^submitted \w+ job (\d+)", out.stdout, re.M) or re.findall(
                r"Submitted batch job (\d+)", out.stdout
            )
            assert ids, f"{line}: no job id in\n{out.stdout}"
            jobs += ids
    finally:
        if jobs:
            subprocess.run(["scancel", *jobs], env=testbed.env(), capture_output=True)
        shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(bin_dir.parent.parent, ignore_errors=True)
