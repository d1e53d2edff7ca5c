"""The explain endpoint's live facts read the nodes and running jobs once per few seconds, not
once per question (each running-job read makes slurmctld pack the whole queue)."""

from __future__ import annotations

from types import SimpleNamespace

import slurm_dl.explain.query as q


class Counting:
    def __init__(self) -> None:
        self.node_reads = 0
        self.job_reads = 0

    def nodes(self):
        self.node_reads += 1
        return [SimpleNamespace(name="gpu01")]

    def jobs(self):
        self.job_reads += 1
        return [SimpleNamespace(running=True, job_id=1), SimpleNamespace(running=False, job_id=2)]


def test_questions_within_the_window_share_one_read(monkeypatch) -> None:
    monkeypatch.setattr(q, "_view", {})
    clock = [100.0]
    monkeypatch.setattr(q.time, "monotonic", lambda: clock[0])
    b = Counting()
    for _ in range(5):
        nodes, running = q._cluster_view(b, with_running=True)
    assert (b.node_reads, b.job_reads) == (1, 1)
    assert [j.job_id for j in running] == [1] and [n.name for n in nodes] == ["gpu01"]
    q._cluster_view(b, with_running=False)  # a running job's question needs no job read
    assert (b.node_reads, b.job_reads) == (2, 1)
    clock[0] += q.LIVE_VIEW_SECONDS
    q._cluster_view(b, with_running=True)
    assert (b.node_reads, b.job_reads) == (3, 2)
