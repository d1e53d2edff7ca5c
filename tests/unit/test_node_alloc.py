"""One node's GPU allocations from local and single-job reads (the GPU agent's Slurm reads):
the parsers on output captured from Slurm 22.05, and which commands a sample runs."""

from __future__ import annotations

from slurm_dl.core.errors import JobNotFoundError, SlurmError
from slurm_dl.slurm.gpu_alloc import GpuAllocation
from slurm_dl.slurm.node_alloc import (
    NodeAllocations,
    gpus_in_use,
    job_allocations,
    parse_listpid_jobs,
    parse_listpids,
)

LISTPIDS = """PID      JOBID    STEPID   LOCALID GLOBALID
18094    11       batch    0       0
18122    11       batch    -       -
18095    9        batch    0       0
18121    9        batch    -       -
18124    8        0        0       0
18092    7        batch    0       0
18096    8        batch    0       0
"""
MULTI = (
    "JobId=8 JobName=wrap UserId=ann(1001) GroupId=ann(1001) MCS_label=N/A Priority=1000 JobState=RUNNING "
    "Reason=None NodeList=gpu[01-02] BatchHost=gpu01 NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 "
    "JOB_GRES=gpu:h100:4   Nodes=gpu01 CPU_IDs=1 Mem=8000 GRES=gpu:h100:2(IDX:3-4)   "
    "Nodes=gpu02 CPU_IDs=1 Mem=8000 GRES=gpu:h100:2(IDX:1-2) MinCPUsNode=1 TresPerNode=gres:gpu:2 "
)
# ``scontrol show job 9`` for an array whose task 2 kept the array's id lists every task
ARRAY = "\n".join(
    f"JobId={j} ArrayJobId=9 ArrayTaskId={t} JobName=wrap UserId=bob(1002) JobState=RUNNING NumNodes=1 "
    f"JOB_GRES=gpu:h100:1   Nodes=gpu01 CPU_IDs={t} Mem=8000 GRES=gpu:h100:1(IDX:{i}) MinCPUsNode=1"
    for j, t, i in ((9, 2, 7), (12, 1, 6), (11, 0, 5))
)
NODE = (
    "NodeName=gpu01 Arch=x86_64 CoresPerSocket=1 CPUAlloc=6 Gres=gpu:h100:8 GresDrain=N/A "
    "GresUsed=gpu:h100:8(IDX:0-7) NodeAddr=127.0.0.1"
)


def test_listpids_gives_each_job_its_lowest_process() -> None:
    assert parse_listpids(LISTPIDS) == {11: 18094, 9: 18095, 8: 18096, 7: 18092}
    assert parse_listpids("PID      JOBID    STEPID   LOCALID GLOBALID\n") == {}


def test_listpids_names_the_job_of_every_process_slurmstepd_tracks() -> None:
    """The agent's evidence of whose a process is, where cgroups do not say (never SLURM_JOB_ID)."""
    assert parse_listpid_jobs(LISTPIDS) == {
        18094: 11,
        18122: 11,
        18095: 9,
        18121: 9,
        18124: 8,
        18092: 7,
        18096: 8,
    }
    r = Scripted(_answers())
    r("gpu01")
    assert r.pids[18124] == 8 and r.pids[18122] == 77
    r.answers["scontrol listpids"] = SlurmError("scontrol listpids: Permission denied")
    r("gpu01")
    assert r.pids == {}, "a failed listpids vouches for no process"


def test_a_jobs_gpus_on_one_node_of_several() -> None:
    assert job_allocations(MULTI, "gpu02", 8) == [GpuAllocation(8, "ann", "gpu02", (1, 2))]
    assert job_allocations(MULTI, "gpu01", 8) == [GpuAllocation(8, "ann", "gpu01", (3, 4))]
    assert job_allocations(MULTI, "gpu03", 8) == []
    # NumNodes=2 is not a node segment; a job not running holds nothing
    assert job_allocations(MULTI.replace("JobState=RUNNING", "JobState=PENDING"), "gpu01", 8) == []


def test_only_the_asked_task_of_an_array_counts() -> None:
    assert job_allocations(ARRAY, "gpu01", 9) == [GpuAllocation(9, "bob", "gpu01", (7,))]
    assert job_allocations(ARRAY, "gpu01", 12) == [GpuAllocation(12, "bob", "gpu01", (6,))]
    assert job_allocations(ARRAY, "gpu01", 13) == []


def test_node_segments_as_a_hostlist_and_shards() -> None:
    same = (
        "JobId=5 UserId=cy(7) JobState=RUNNING Nodes=gpu[01-02] CPU_IDs=0-1 Mem=8000 "
        "GRES=gpu:h100:8(IDX:0-7) MinCPUsNode=1"
    )
    assert job_allocations(same, "gpu02", 5) == [GpuAllocation(5, "cy", "gpu02", tuple(range(8)))]
    shard = "JobId=6 UserId=cy(7) JobState=RUNNING Nodes=gpu01 CPU_IDs=0 Mem=800 GRES=shard:2(IDX:0) Min=1"
    assert job_allocations(shard, "gpu01", 6) == [GpuAllocation(6, "cy", "gpu01", (0,), 2)]


def test_gpus_slurm_counts_in_use() -> None:
    assert gpus_in_use(NODE) == frozenset(range(8))
    assert gpus_in_use(NODE.replace("gpu:h100:8(IDX:0-7)", "gpu:h100:0(IDX:N/A)")) == frozenset()


class Scripted(NodeAllocations):
    """The reader with Slurm's answers given: which commands one sample runs."""

    def __init__(self, answers: dict[str, object]):
        self.full_calls = 0
        self.now = 0.0

        def full(node: str) -> list[GpuAllocation]:
            self.full_calls += 1
            return [GpuAllocation(99, "x", node, (0,))]

        super().__init__(full, grace_s=60.0, clock=lambda: self.now)
        self.answers = answers
        self.ran: list[str] = []

    def _run_listpids(self, argv: list[str]) -> tuple[int, str, str]:
        self.ran.append("scontrol listpids")
        answer = self.answers["scontrol listpids"]
        if isinstance(answer, tuple):
            return answer
        if isinstance(answer, Exception):
            return 1, "PID      JOBID    STEPID   LOCALID GLOBALID\n", str(answer)
        return 0, str(answer), ""

    def _run(self, argv: list[str]) -> str:
        key = " ".join(argv[-2:])
        self.ran.append(key)
        answer = self.answers[key]
        if isinstance(answer, Exception):
            raise answer
        return str(answer)


def _answers(used: str = "gpu:h100:3(IDX:3-4,7)") -> dict[str, object]:
    return {
        "scontrol listpids": LISTPIDS.replace("11 ", "77 "),
        "job 8": MULTI,
        "job 9": ARRAY,
        "job 77": "",
        "job 7": "JobId=7 UserId=ann(1) JobState=COMPLETING Nodes=gpu01 CPU_IDs=0 Mem=1 GRES=gpu:1(IDX:0)",
        "node gpu01": NODE.replace("gpu:h100:8(IDX:0-7)", used),
    }


def test_known_jobs_are_read_once_and_the_queue_not_at_all() -> None:
    r = Scripted(_answers())
    first = r("gpu01")
    assert sorted(a.job_id for a in first) == [8, 9]
    assert sorted(k for k in r.ran if k.startswith("job")) == ["job 7", "job 77", "job 8", "job 9"]
    r.ran.clear()
    assert r("gpu01") == first
    # jobs that held nothing (ended, or not started) are asked again; the known ones are not
    assert sorted(k for k in r.ran if k.startswith("job")) == ["job 7", "job 77"]
    assert r.full_calls == 0 and r.job_reads == 6


def test_a_new_run_of_a_job_is_read_again() -> None:
    r = Scripted(_answers())
    r("gpu01")
    r.answers["scontrol listpids"] = (
        str(r.answers["scontrol listpids"]).replace("18096", "28096").replace("18124", "28124")
    )
    r.ran.clear()
    r("gpu01")
    assert "job 8" in r.ran


def test_gpus_in_use_without_a_known_job_for_the_grace_fall_back_to_the_queue_once() -> None:
    r = Scripted(
        _answers(used="gpu:h100:4(IDX:0,3-4,7)")
    )  # GPU 0: an allocation with no process here
    assert sorted(a.job_id for a in r("gpu01")) == [8, 9]  # first seen: a job may still be starting
    r.now = 59.0
    assert sorted(a.job_id for a in r("gpu01")) == [8, 9] and r.full_calls == 0
    r.now = 60.0
    assert [a.job_id for a in r("gpu01")] == [99]  # unexplained for the grace: the queue says whose
    assert r.full_calls == 1 and r.full_reads == 1
    # from now on that job is read alone, not the queue
    r.answers["job 99"] = (
        "JobId=99 UserId=x(1) JobState=RUNNING Nodes=gpu01 CPU_IDs=0 Mem=1 GRES=gpu:1(IDX:0)"
    )
    r.ran.clear()
    assert sorted(a.job_id for a in r("gpu01")) == [8, 9, 99]
    assert r.full_calls == 1 and "job 99" in r.ran
    # once it ends, it is forgotten
    r.answers["job 99"] = JobNotFoundError("scontrol: error: Invalid job id specified")
    r.answers["node gpu01"] = NODE.replace("gpu:h100:8(IDX:0-7)", "gpu:h100:3(IDX:3-4,7)")
    assert sorted(a.job_id for a in r("gpu01")) == [8, 9] and not r.quiet


def test_gpus_that_change_each_sample_are_jobs_starting() -> None:
    r = Scripted(_answers(used="gpu:h100:4(IDX:0,3-4,7)"))
    r("gpu01")
    r.answers["node gpu01"] = NODE.replace("gpu:h100:8(IDX:0-7)", "gpu:h100:4(IDX:1,3-4,7)")
    r.now = 60.0
    r("gpu01")
    assert r.full_calls == 0


def test_an_idle_node_and_a_failing_listpids() -> None:
    idle = Scripted(
        {
            "scontrol listpids": SlurmError("scontrol listpids: No job steps exist on this node."),
            "node gpu01": NODE.replace("gpu:h100:8(IDX:0-7)", "gpu:h100:0(IDX:N/A)"),
        }
    )
    assert idle("gpu01") == [] and idle.full_calls == 0 and idle.local_error is None
    denied = Scripted({"scontrol listpids": SlurmError("scontrol listpids: Permission denied")})
    assert [a.job_id for a in denied("gpu01")] == [99]
    assert denied.local_error and "Permission denied" in denied.local_error


def test_rows_listpids_printed_beside_a_stale_step_socket_count() -> None:
    stale = "scontrol: error: Unable to connect to slurmstepd: Connection refused\n"
    r = Scripted({**_answers(), "scontrol listpids": (1, LISTPIDS.replace("11 ", "77 "), stale)})
    assert (
        sorted(a.job_id for a in r("gpu01")) == [8, 9]
        and r.local_error is None
        and r.full_calls == 0
    )
    gone = Scripted(
        {
            "scontrol listpids": (
                1,
                "PID      JOBID    STEPID   LOCALID GLOBALID\n",
                "scontrol: error: Domain socket directory /x/gpu01: No such file",
            )
        }
    )
    assert [a.job_id for a in gone("gpu01")] == [
        99
    ] and "Domain socket directory" in gone.local_error
