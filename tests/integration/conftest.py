"""Integration fixtures: a REAL local Slurm started by slurm_dl.testbed for the whole session.

Every test under tests/integration/ is marked ``integration`` (deselect with ``-m "not integration"``).
Without Slurm installed (or not root) they skip with the reason — except under CI (``CI`` set),
where a missing Slurm is an error, so a broken setup cannot pass as "all skipped".

``SLURM_DL_TEST_SLURM=24.11`` (or 26.05) runs every testbed of the run on that release, from its
Debian root (built once, cached); unset, the machine's own Slurm. ``SLURM_DL_TEST_TESTBED=DIR``
makes the session fixture use the testbed already up in DIR (and leave it up): the pyslurm suite
of another release runs inside that release's root, against a testbed started outside it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pytest

from slurm_dl.core.errors import SlurmNotInstalledError
from slurm_dl.testbed import Testbed, submit, wait_for_job_state
from slurm_dl.testbed.install import find_slurm
from slurm_dl.testbed.releases import release_for

HERE = Path(__file__).resolve().parent
# The Slurm release every testbed of this run starts (None: the machine's own).
TEST_SLURM = os.environ.get("SLURM_DL_TEST_SLURM") or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)


def testbed_unavailable_reason() -> str | None:
    """Why a live testbed cannot run here, or None when it can."""
    try:
        if release_for(TEST_SLURM).host:
            find_slurm()
    except SlurmNotInstalledError as e:
        return str(e)
    if os.geteuid() != 0:
        return "the testbed needs root (slurmd and mknod); run the integration tests as root"
    return None


def require_testbed_support() -> None:
    reason = testbed_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the integration tests, but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """An up 4 x 8 h100 testbed for the session; SLURM_CONF points at it; down at the end."""
    require_testbed_support()
    given = os.environ.get("SLURM_DL_TEST_TESTBED")
    if given:
        tb = Testbed(given, nodes=4, gpus_per_node=8, gpu_type="h100")
    else:
        tb = Testbed(
            tmp_path_factory.mktemp("testbed"),
            nodes=4,
            gpus_per_node=8,
            gpu_type="h100",
            slurm=TEST_SLURM,
        )
    old = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    try:
        if not given or not tb.status().up:
            tb.up()
        os.environ["SLURM_CONF"] = str(tb.slurm_conf)
        os.environ["PATH"] = tb.env()["PATH"]  # another release: its clients first
        yield tb
    finally:
        if not given:
            tb.down()
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def make_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Testbed]]:
    """Extra, private testbeds (e.g. 1 node) for tests that stop or break a cluster; all downed after."""
    require_testbed_support()
    made: list[Testbed] = []

    def make(**kwargs) -> Testbed:
        tb = Testbed(
            tmp_path_factory.mktemp("tb"),
            **{"nodes": 1, "gpus_per_node": 2, "slurm": TEST_SLURM, **kwargs},
        )
        made.append(tb)
        return tb

    yield make
    for tb in made:
        tb.down()


@pytest.fixture
def run_job(testbed: Testbed, tmp_path: Path) -> Callable[..., tuple[dict[str, str], str]]:
    """Submit a batch script to the session testbed, wait for a state; returns (fields, stdout text)."""

    def run(
        script: str,
        args: Iterable[str] = (),
        *,
        states: Iterable[str] = ("COMPLETED",),
        timeout: float = 60.0,
    ) -> tuple[dict[str, str], str]:
        out = tmp_path / "job-%j.out"
        job_id = submit(script, testbed.env(), [f"--output={out}", *args])
        fields = wait_for_job_state(job_id, testbed.env(), states, timeout=timeout)
        out_file = tmp_path / f"job-{job_id}.out"
        return fields, out_file.read_text() if out_file.exists() else ""

    return run


@pytest.fixture(scope="session")
def pg():
    """One throwaway PostgreSQL server (pgserver.PgServer) for every test that needs one; each
    test makes its own database with ``pg.create_db()``. CI must run them: there a missing
    server fails instead of skipping."""
    import pgserver

    reason = pgserver.unavailable_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL tests, but: {reason}", pytrace=False)
        pytest.skip(reason)
    server = pgserver.PgServer().start()
    yield server
    server.stop()
