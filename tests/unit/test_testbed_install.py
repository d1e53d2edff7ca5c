"""What the testbed says when Slurm is missing or the emulator build took over."""

from __future__ import annotations

import pytest

from slurm_dl.core.errors import SlurmNotInstalledError
from slurm_dl.testbed import install


def test_missing_slurm_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install.shutil, "which", lambda name: None)
    monkeypatch.setattr(install, "SBIN_DIRS", ())
    with pytest.raises(SlurmNotInstalledError) as err:
        install.find_slurm()
    msg = str(err.value)
    assert "missing: slurmctld, slurmd, sbatch" in msg
    assert "apt-get install slurm-wlm slurmctld slurmd slurm-client" in msg
    assert "scripts/setup.sh" in msg
    assert "\n" not in msg


def test_emulator_build_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    emu = tmp_path / "slurmctld-wlm-emulator"
    emu.write_text("")
    monkeypatch.setattr(
        install.shutil, "which", lambda name: str(emu) if name == "slurmctld" else f"/bin/{name}"
    )
    with pytest.raises(
        SlurmNotInstalledError, match="update-alternatives --set slurmctld /usr/sbin/slurmctld-wlm"
    ):
        install.find_slurm()


def test_too_long_state_dir_is_refused_before_anything_starts(tmp_path) -> None:
    from slurm_dl.core.errors import TestbedError
    from slurm_dl.testbed import Testbed

    with pytest.raises(TestbedError, match="choose a shorter --dir"):
        Testbed(tmp_path / ("x" * 80))
    assert not (tmp_path / ("x" * 80)).exists()
