"""The cycle over Jobs the squeue reader hands out again (``LineMemo``: the same object for the
same line, cycle after cycle) decides exactly what it decides over Jobs parsed afresh each
cycle: what a cycle changes on a job that depends on the cycle (a class demoted, a deadline
dropped, an admission tag) must not stay on the job for the next one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config

from test_cycle import admission_share
from slurm_dl.core.model import ClusterSnapshot, Job, JobClass, JobState, Node
from slurm_dl.core.tags import JobTag, encode_tag
from slurm_dl.slurm.cli_backend import with_node_gpu_types, with_site_factors
from slurm_dl.slurm.squeue_format import FIELDS, SEP, LineMemo, parse_squeue_format
from slurm_dl.store import Store

ROOT = Path(__file__).resolve().parents[2]
BASE_PRIORITY = 10_000


def squeue_line(j: Job, site_factor: int) -> str:
    """The job as ``squeue -O`` with the reader's format prints it (times as epoch seconds)."""
    running = j.state is JobState.RUNNING
    limit = int(j.time_limit or 0)
    values = {
        "JobID": j.job_id,
        "UserName": j.user,
        "Account": j.account,
        "Name": j.name,
        "Partition": "gpu",
        "State": j.state.value,
        "Reason": "None" if running else (j.state_reason or "Priority"),
        "tres-per-node": "N/A",
        "tres-per-job": f"gres:gpu:{j.num_gpus}",
        "NumNodes": 1,
        "TimeLimit": f"0-{limit // 3600:02d}:{limit % 3600 // 60:02d}:{limit % 60:02d}"
        if limit
        else "UNLIMITED",
        "SubmitTime": int(j.submit_time),
        "StartTime": int(j.start_time) if running else "N/A",
        "EligibleTime": int(j.submit_time),
        "Deadline": int(j.deadline) if j.deadline is not None else "N/A",
        "Nice": 0,
        "PriorityLong": BASE_PRIORITY + site_factor,
        "RestartCnt": 0,
        "NodeList": ",".join(j.nodes),
        "Comment": j.comment or "(null)",
        "admin_comment": j.admin_comment or "(null)",
        "tres-per-task": "",
        "tres-per-socket": "",
        "NumTasks": 1,
        "Sockets": "*",
        "tres-alloc": f"cpu=1,mem=1G,node=1,billing=1,gres/gpu={j.num_gpus}" if running else "",
        "Requeue": 1,
        "ArrayJobID": j.job_id,
        "ArrayTaskID": "N/A",
        "QOS": "normal",
        "Feature": "(null)",
    }
    return "".join(f"{values[name]}{SEP}" for name, _ in FIELDS)


class TextCluster:
    """Jobs kept as Slurm would hold them, read back through squeue's text every snapshot,
    with the reader's memo (``shared``) or without it."""

    def __init__(self, jobs: list[Job], nodes: list[Node], shared: bool) -> None:
        self.jobs = {j.job_id: dataclasses.replace(j) for j in jobs}
        self.nodes, self.now = nodes, 1_000_000.0
        self.memo = LineMemo() if shared else None
        self.site_factor: dict[int, int] = {}
        self.calls: list[tuple] = []

    def snapshot(self) -> ClusterSnapshot:
        text = "".join(
            squeue_line(j, self.site_factor.get(j.job_id, 0)) + "\n" for j in self.jobs.values()
        )
        jobs = parse_squeue_format(text, memo=self.memo)
        pending = {j.job_id for j in self.jobs.values() if j.state is JobState.PENDING}
        jobs = with_node_gpu_types(
            with_site_factors(jobs, {k: v for k, v in self.site_factor.items() if k in pending}),
            self.nodes,
        )
        return ClusterSnapshot(taken_at=self.now, jobs=jobs, nodes=list(self.nodes))

    def set_site_factor(self, values):
        self.calls.append(("site_factor", dict(values)))
        self.site_factor.update(values)

    def signal_batch(self, job_id, signal):
        self.calls.append(("signal", job_id, signal))

    def signal_steps(self, job_id, signal):
        self.calls.append(("signal_steps", job_id, signal))

    def requeue(self, job_id):
        self.calls.append(("requeue", job_id))

    def start(self, job_id: int, node: str) -> None:
        j = self.jobs[job_id]
        j.state, j.start_time, j.nodes = JobState.RUNNING, self.now, (node,)

    def end(self, job_id: int) -> None:
        del self.jobs[job_id]


def tag(job_class: JobClass, gpus: int, deadline: float | None = None) -> str:
    return encode_tag(
        JobTag(
            job_class=job_class,
            checkpointable=True,
            gpus=gpus,
            deadline=int(deadline) if deadline is not None else None,
        )
    )


def scene(now: float) -> list[Job]:
    def job(
        jid,
        user,
        gpus,
        cls=JobClass.TRAIN,
        deadline=None,
        tag_gpus=None,
        limit=3600.0,
        tagged=True,
        **kw,
    ):
        # a deadline in the tag, or (``tagged=False``) only in squeue's line: sbatch --deadline
        text = tag(cls, tag_gpus or gpus, deadline if tagged else None)
        return Job(
            jid,
            user=user,
            account="a",
            name=f"j{jid}",
            num_gpus=gpus,
            submit_time=now - 1000 + jid,
            time_limit=limit,
            admin_comment=text,
            comment="dl:ckpt=1",
            deadline=deadline,
            **kw,
        )

    return [
        job(
            1, "u1", 2, JobClass.INTERACTIVE, limit=1800.0
        ),  # holds u1's interactive quota (4) with job 2
        job(2, "u1", 2, JobClass.INTERACTIVE, limit=1800.0),
        job(
            3, "u1", 2, JobClass.INTERACTIVE, limit=1800.0
        ),  # over the quota: demoted while 1 and 2 live
        # six tight deadlines of one user: the last two are ignored while the first four live
        *(
            job(10 + i, "u2", 1, deadline=now + 900.0 + 60 * i, limit=600.0, tagged=False)
            for i in range(6)
        ),
        job(20, "u3", 1, tag_gpus=4),  # the filter counted 4 GPUs; squeue shows 1
        job(21, "u3", 6, deadline=now + 5400.0),  # admission: the first is promised,
        job(22, "u3", 6, deadline=now + 5400.0),  # the second cannot be kept next to it
        *(job(30 + i, f"v{i}", 1 + i % 3) for i in range(8)),
    ]


def outcome(p: Prioritizer, report) -> dict:
    r = {k: v for k, v in report.to_dict().items() if k not in ("seconds", "slurm_s")}
    return {
        "report": r,
        "ledger": p.ledger.to_dict(),
        "site_factors": p.store.site_factors(),
        "explanations": p.store.explanations(),
        "records": dict(p.explain_cache.records),
        "decisions": {
            jid: [(d.kind, d.value, d.reason) for d in p.store.decisions(jid, 100)]
            for jid in p.ledger.jobs
        },
    }


def test_a_cycle_over_jobs_handed_out_again_decides_as_over_fresh_ones(tmp_path):
    # the scene's demotion is sized for a deadline share of 0.475 (the default is 0.9)
    config = admission_share(load_config(ROOT / "site-configs" / "testbed.toml"), 0.475)
    nodes = [Node(f"gpu{i + 1:02d}", 8, "h100") for i in range(2)]
    runs = {}
    for shared in (True, False):
        c = TextCluster(scene(1_000_000.0), nodes, shared)
        p = Prioritizer(config, c, Store(f"sqlite:///{tmp_path / f'{shared}.db'}"))
        seen, parsed = [], []
        for step in range(8):
            if step == 1:
                for jid in (1, 2, 10, 11):
                    c.start(jid, "gpu01")
            if step == 3:
                for jid in (1, 10, 11):
                    c.end(jid)  # job 3 keeps its class now; 14 and 15 their deadlines
            if step == 5:
                c.start(21, "gpu02")
            seen.append(outcome(p, p.run_cycle()))
            parsed.append(c.memo.parsed if c.memo is not None else None)
            c.now += 30.0
        runs[shared] = (seen, c.calls, parsed)
    shared, fresh = runs[True], runs[False]
    assert 0 in shared[2]  # whole cycles over Jobs handed out again
    assert shared[1] == fresh[1]  # the same Slurm calls
    for step, (a, b) in enumerate(zip(shared[0], fresh[0])):
        assert a == b, f"cycle {step + 1} differs"
    # the scene does what it is for: a demotion that ends, deadlines dropped then kept
    first, last = fresh[0][0]["report"], fresh[0][-1]["report"]
    assert first["jobs_by_class"]["pending"].get("interactive") == 2
    assert last["jobs_by_class"]["pending"].get("interactive") == 1  # job 3 (2 runs)
    ignored = [
        jid
        for jid in range(14, 16)
        if any(k == "deadline" for k, _, _ in fresh[0][2]["decisions"][jid])
    ]
    assert ignored == [14, 15]
    assert any(
        "not admitted" in why for k, _, why in fresh[0][0]["decisions"][22] if k == "deadline"
    )
    slack = [run["explanations"][14]["deadline_slack_s"] for run in fresh[0]]
    assert slack[1] is None and slack[-1] is not None  # dropped, then honoured once 10 and 11 ended
