"""The testbed's power saving: slurm.conf lines and the suspend/resume programs it writes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from slurm_dl.testbed import power
from slurm_dl.testbed.conf import ClusterParams, TestbedLayout, render_slurm_conf

LAYOUT = TestbedLayout(Path("/srv/tb"))


def params(**kw) -> ClusterParams:
    return ClusterParams.one_type(
        nodes=2, gpus_per_node=8, gpu_type="h100", ctld_port=20001, node_ports=(20011, 20012), **kw
    )


def keys(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and " " not in line)


def test_power_save_off_by_default_writes_no_power_keys():
    conf = keys(render_slurm_conf(LAYOUT, params()))
    assert not {"SuspendProgram", "ResumeProgram", "SuspendTime"} & conf.keys()


def test_power_save_names_its_programs_and_times():
    conf = keys(render_slurm_conf(LAYOUT, params(power_save=True)))
    assert conf["SuspendProgram"] == "/srv/tb/etc/power-suspend.sh"
    assert conf["ResumeProgram"] == "/srv/tb/etc/power-resume.sh"
    assert conf["SuspendTime"] == str(power.SUSPEND_TIME_S)
    assert conf["ResumeTimeout"] == str(power.RESUME_TIMEOUT_S)
    assert "SuspendExcNodes" not in conf  # the power service decides which nodes stay on


def test_power_save_survives_testbed_json():
    p = params(power_save=True)
    assert ClusterParams.from_dict(p.to_dict()).power_save
    assert "power_save" not in params().to_dict()  # older testbed.json files stay as they were


def test_programs_are_valid_bash_with_paths_in_full():
    root = Path("/srv/tb")
    suspend = power.render_suspend(root, "/usr/bin/scontrol")
    resume = power.render_resume(root, "/usr/bin/scontrol", ("/usr/sbin/slurmd",))
    for text in (suspend, resume):
        assert text.startswith("#!/bin/bash\n")
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
        assert "export SLURM_DL_TESTBED=/srv/tb" in text  # so that `testbed down` finds slurmd
    assert "/srv/tb/run/slurmd-$node.off" in suspend.replace("$RUN", "/srv/tb/run")
    assert "unshare --time" in resume and "/usr/sbin/slurmd -D -N" in resume


def test_suspend_then_resume_runs_against_a_fake_slurmd(tmp_path: Path):
    """The programs themselves, with a stand-in scontrol and slurmd: the suspend program stops
    only a process that carries the testbed's marker and leaves the off marker; the resume
    program starts slurmd again and removes it."""
    root = tmp_path
    for d in ("run", "log", "etc"):
        (root / d).mkdir()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text('#!/bin/sh\necho "$3"\n')
    # Like slurmd, it writes its own pid file (SlurmdPidFile), which the suspend program reads.
    (fake / "slurmd").write_text(
        f'#!/bin/sh\necho $$ > {root}/run/slurmd-"$3".slurm-pid\nexec sleep 30\n'
    )
    for f in fake.iterdir():
        f.chmod(0o755)
    resume = root / "etc" / "resume.sh"
    suspend = root / "etc" / "suspend.sh"
    resume.write_text(power.render_resume(root, str(fake / "scontrol"), (str(fake / "slurmd"),)))
    suspend.write_text(power.render_suspend(root, str(fake / "scontrol")))
    (root / "run" / "slurmd-n1.off").touch()
    subprocess.run(["bash", str(resume), "n1"], check=True, timeout=20)
    pid = int((root / "run" / "slurmd-n1.pid").read_text())
    assert Path(f"/proc/{pid}").exists()
    assert not (root / "run" / "slurmd-n1.off").exists()
    for _ in range(50):  # the "boot" waits 2 s before it starts slurmd
        if (root / "run" / "slurmd-n1.slurm-pid").exists():
            break
        time.sleep(0.1)
    slurmd = int((root / "run" / "slurmd-n1.slurm-pid").read_text())
    subprocess.run(["bash", str(suspend), "n1"], check=True, timeout=20)
    assert not Path(f"/proc/{slurmd}").exists()
    assert (root / "run" / "slurmd-n1.off").exists()
    assert not (root / "run" / "slurmd-n1.pid").exists()
    log = (root / "log" / "power.log").read_text().split()
    assert log[1:3] == ["resume", "n1"] and log[4:6] == ["suspend", "n1"]
