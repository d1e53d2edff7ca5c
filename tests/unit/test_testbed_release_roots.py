"""Choosing a Slurm release for the testbed, and the pieces that run one from a Debian root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_dl.core import errors
from slurm_dl.testbed import inroot, roots
from slurm_dl.testbed.conf import render_env, render_env_exports, TestbedLayout
from slurm_dl.testbed.releases import (
    RELEASES,
    debootstrap_argv,
    major_of,
    mirror_from_sources,
    progress_phase,
    release_for,
)


def test_supported_releases_and_the_default() -> None:
    assert release_for(None).name == "22.05" and release_for(None).host
    assert release_for("24.11").suite == "trixie"
    assert release_for("24.11.5").name == "24.11"
    assert release_for("26.05").script == "/usr/share/debootstrap/scripts/sid"


@pytest.mark.parametrize("bad", ["19.05", "23.02", "latest", ""])
def test_an_unsupported_release_is_one_line_naming_the_supported_ones(bad: str) -> None:
    with pytest.raises(errors.TestbedError) as err:
        release_for(bad or "x")
    msg = str(err.value)
    assert "\n" not in msg and "supported releases: 22.05, 24.11, 26.05" in msg


def test_mirror_is_read_from_the_hosts_apt_sources() -> None:
    deb822 = (
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
    )
    assert mirror_from_sources(deb822) == "http://deb.debian.org/debian"
    assert mirror_from_sources(
        "deb http://security.debian.org/ x main\n"
        "deb [arch=amd64] http://mirror.example/debian/ bookworm main\n"
    ) == ("http://mirror.example/debian")
    assert mirror_from_sources("# nothing\n") is None


def test_debootstrap_command_per_release() -> None:
    argv = debootstrap_argv(RELEASES["26.05"], "/tmp/r", "http://m/debian")
    assert argv[:2] == ["debootstrap", "--variant=minbase"]
    assert argv[3:] == ["forky", "/tmp/r", "http://m/debian", "/usr/share/debootstrap/scripts/sid"]
    for pkg in (
        "slurmctld",
        "slurmd",
        "slurm-client",
        "slurmdbd",
        "libslurm-dev",
        "lua5.1",
        "lua-socket",
        "lua-cjson",
    ):
        assert pkg in argv[2].split("=", 1)[1].split(",")
    assert debootstrap_argv(RELEASES["24.11"], "/tmp/r", "http://m/debian")[3:] == [
        "trixie",
        "/tmp/r",
        "http://m/debian",
    ]


def test_version_and_progress_lines() -> None:
    assert major_of("slurm-wlm 24.11.5\n") == "24.11" and major_of("slurm 22.05.8") == "22.05"
    assert major_of("nothing") is None
    assert progress_phase("I: Retrieving libc6 2.41-7") == "downloading packages"
    assert progress_phase("I: Configuring slurmctld...") is None
    assert progress_phase("I: Base system installed successfully.") == "done"


def test_env_of_another_release_puts_its_clients_first_on_path() -> None:
    layout = TestbedLayout(Path("/srv/tb"))
    env = render_env(layout, "24.11", Path("/srv/tb/bin"))
    text = render_env_exports(env)
    assert "export SLURM_DL_TESTBED_SLURM=24.11\n" in text
    assert text.endswith('export PATH=/srv/tb/bin:"$PATH"\n')
    out = subprocess.run(
        ["sh", "-c", f'PATH=/usr/bin:/bin; {text} echo "$PATH"'], capture_output=True, text=True
    )
    assert out.stdout.strip() == "/srv/tb/bin:/usr/bin:/bin"


def test_runner_and_wrappers_are_valid_shell(tmp_path: Path) -> None:
    bin_dir = inroot.write_wrappers(Path("/var/cache/roots/24.11"), "24.11", tmp_path)
    runner = inroot.runner_path(tmp_path).read_text()
    assert "mount -t proc proc" in runner and "unshare --mount --propagation private" in runner
    assert str(tmp_path) in runner  # the testbed directory is bound even outside /tmp, /home …
    for path in bin_dir.iterdir():
        assert path.stat().st_mode & 0o111
        assert subprocess.run(["sh", "-n", str(path)]).returncode == 0, path.name
    assert (
        (bin_dir / "sbatch")
        .read_text()
        .endswith(f'{inroot.runner_path(tmp_path)} /usr/bin/sbatch "$@"\n')
    )
    inroot.remove_wrappers(tmp_path)
    assert list(bin_dir.iterdir()) == []


def test_a_failed_bootstrap_leaves_no_root_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(roots.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(roots.shutil, "which", lambda name: "/usr/sbin/debootstrap")

    def failing(release, target, mirror):
        return [
            "sh",
            "-c",
            f"mkdir -p {target}/usr && echo 'I: Retrieving Release' && "
            "echo 'E: Failed getting release file http://m/dists/forky/Release' && exit 1",
        ]

    monkeypatch.setattr(roots, "debootstrap_argv", failing)
    said: list[str] = []
    with pytest.raises(errors.TestbedError) as err:
        roots.ensure_root(RELEASES["26.05"], said.append)
    msg = str(err.value)
    assert (
        "\n" not in msg and "debootstrap exit 1" in msg and "E: Failed getting release file" in msg
    )
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".26.05.lock", "26.05.log"]
    assert said[0].startswith("building the Slurm 26.05 root") and "checking the archive" in said[1]
