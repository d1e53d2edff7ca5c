"""The prioritizer re-checks live jobs' class limits each cycle and demotes a job whose limits no
longer hold (e.g. its time limit was raised past the class maximum around the filter)."""

from __future__ import annotations

from pathlib import Path

from prioritizer import Prioritizer
from prioritizer.jobs import class_violation, demote_violations
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import Job, JobClass
from slurm_dl.store import Store
from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]
CFG = load_config(ROOT / "site-configs" / "testbed.toml")  # interactive: at most 120 min
TAG = "sdl1:class=interactive;ckpt=0;gpus=1;shape=1x1"


def test_class_violation_names_the_limit() -> None:
    ok = Job(1, num_gpus=1, time_limit=30 * 60.0, job_class=JobClass.INTERACTIVE)
    assert class_violation(ok, CFG) is None
    long = Job(2, num_gpus=1, time_limit=2000 * 60.0, job_class=JobClass.INTERACTIVE)
    assert "2000 min exceeds class interactive's maximum 120 min" in class_violation(long, CFG)
    wide = Job(3, num_gpus=16, num_nodes=2, time_limit=60.0, job_class=JobClass.INTERACTIVE)
    assert "one node" in class_violation(wide, CFG)
    train = Job(4, num_gpus=16, time_limit=10**6, job_class=JobClass.TRAIN)
    assert class_violation(train, CFG) is None
    jobs = [ok, long, wide, train]
    assert set(demote_violations(jobs, CFG)) == {2, 3}
    assert [j.job_class for j in jobs] == [
        JobClass.INTERACTIVE,
        JobClass.TRAIN,
        JobClass.TRAIN,
        JobClass.TRAIN,
    ]


def test_cycle_demotes_and_records_it_once(tmp_path) -> None:
    c = MemoryCluster()
    c.add(1, 1, time_limit=2000 * 60.0, admin_comment=TAG)
    c.add(2, 1, time_limit=30 * 60.0, admin_comment=TAG)
    p = Prioritizer(CFG, c, Store(f"sqlite:///{tmp_path / 'p.db'}"))
    p.run_cycle()
    notes = [d for d in p.store.decisions(1) if d.kind == "class"]
    assert len(notes) == 1 and "demoted to train" in notes[0].reason
    assert not [d for d in p.store.decisions(2) if d.kind == "class"]
    assert c.jobs[2].site_factor > c.jobs[1].site_factor  # the honest interactive job ranks above
    c.now += 5
    p.run_cycle()
    assert len([d for d in p.store.decisions(1) if d.kind == "class"]) == 1
