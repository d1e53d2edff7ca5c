"""``slurm-dl prioritizer reset`` against the in-memory cluster: every SiteFactor the daemon set
goes back to 0, the store forgets them, and jobs the store does not know are left alone unless
asked."""

from __future__ import annotations

from pathlib import Path

from prioritizer import Prioritizer
from prioritizer.reset import REASON, reset_site_factors
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import SlurmError
from slurm_dl.store import Store

from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]


def _pushed(tmp_path: Path):
    c = MemoryCluster(nodes=1)
    c.add(1, 8, running_on="gpu01")
    for i in range(2, 6):
        c.add(i, 1)
    p = Prioritizer(
        load_config(ROOT / "site-configs" / "testbed.toml"),
        c,
        Store(f"sqlite:///{tmp_path / 'p.db'}"),
    )
    p.run_cycle()
    assert any(c.jobs[i].site_factor for i in range(2, 6))
    return c, p.store


def test_reset_sets_every_recorded_site_factor_to_zero(tmp_path: Path) -> None:
    c, store = _pushed(tmp_path)
    recorded = store.site_factors()
    c.add(9, 1, site_factor=77)  # set by someone else: not ours, left alone
    ended = max(recorded)
    del c.jobs[ended]  # ended since
    report = reset_site_factors(c, store)
    assert report.reset == sorted(j for j in recorded if j != ended)
    assert all(c.jobs[j].site_factor == 0 for j in report.reset)
    assert c.jobs[9].site_factor == 77
    assert ended in report.gone
    assert store.site_factors() == {}
    assert any(d.reason == REASON and d.value == 0 for d in store.decisions(2))


def test_all_pending_also_resets_unknown_ones_and_dry_run_changes_nothing(tmp_path: Path) -> None:
    c, store = _pushed(tmp_path)
    c.add(9, 1, site_factor=77)
    before = {j: c.jobs[j].site_factor for j in c.jobs}
    dry = reset_site_factors(c, store, all_pending=True, dry_run=True)
    assert 9 in dry.reset and {j: c.jobs[j].site_factor for j in c.jobs} == before
    assert store.site_factors() != {}
    report = reset_site_factors(c, store, all_pending=True)
    assert 9 in report.reset and c.jobs[9].site_factor == 0


def test_a_refused_job_is_reported_and_the_others_are_reset(tmp_path: Path) -> None:
    c, store = _pushed(tmp_path)
    real = c.set_site_factor

    def picky(values):
        if 3 in values:
            raise SlurmError("scontrol: error: Job 3 is being held")
        return real(values)

    c.set_site_factor = picky
    report = reset_site_factors(c, store)
    assert 3 in report.failed and "held" in report.failed[3]
    assert 3 not in report.reset and report.reset
    assert 3 in store.site_factors()  # still recorded: a later reset tries again


def test_pending_site_factors_the_store_does_not_know_are_named(tmp_path: Path) -> None:
    """A replaced store knows no jobs: reset changes nothing it does not own, but says which
    pending jobs still carry a SiteFactor and how to reset them."""
    c, _ = _pushed(tmp_path)
    carrying = sorted(j for j, job in c.jobs.items() if job.pending and job.site_factor)
    fresh = Store(f"sqlite:///{tmp_path / 'new.db'}")
    report = reset_site_factors(c, fresh)
    assert report.reset == [] and report.unknown == carrying and carrying
    assert all(c.jobs[j].site_factor for j in carrying)  # left alone
    assert report.to_dict()["unknown"] == carrying
