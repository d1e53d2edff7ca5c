"""``simulate --speeds``: the aware type choice on speeds learnt from the replay's finished runs
(the prioritizer's way) against the oracle (the speeds the run times come from)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.model import Job
from slurm_dl.core.throughput import DEFAULT, RunRecord, ThroughputModel
from slurm_dl.sim.engine.fleet import NodeGroupSpec
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.engine.typed import TypeSetup
from slurm_dl.sim.engine.typed_learn import LearnedSpeeds, named
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.whatif.speeds import load_throughputs, prior_model

# kind "b" truly runs twice as fast on "slow" as on "fast"; the site's speeds say the opposite
TRUE = ThroughputModel({"fast": 1.0, "slow": 0.5}, {"b": {"fast": 1.0, "slow": 2.0}})
PRIOR = ThroughputModel({"fast": 1.0, "slow": 0.5}, min_samples=1)
GROUPS = (NodeGroupSpec("fast", 2, 1), NodeGroupSpec("slow", 2, 1))


def job(i, submit, **kw) -> Job:
    return Job(i, user="u", account="u", num_gpus=1, submit_time=submit, duration=100.0, **kw)


def replay(jobs, prior=PRIOR):
    r = run_cluster(
        jobs,
        ClusterSpec.of_groups("c", GROUPS),
        make_ranker("fifo"),
        PreemptionCost(0.0),
        types=TypeSetup("aware", TRUE, prior=prior),
    )
    return {sj.job.job_id: sj for sj in r.jobs}


def group(sj) -> str:
    """The type a job ran on last (its charge: the type's site speed)."""
    return {1.0: "fast", 0.5: "slow"}[sj.charge]


def test_learnt_speeds_use_only_the_runs_finished_by_then():
    jobs = [
        job(1, 0.0, model="b"),  # its fastest by the prior: fast (runs 200 s there)
        job(2, 0.0, model="b", accepted_types=("slow",)),  # slow only: 100 s
        job(3, 150.0, model="b"),  # job 1 still runs: one type known, no ratio: the prior
        job(4, 250.0, model="b"),  # both ran: slow learnt faster for "b"
    ]
    got = replay(jobs)
    assert [got[i].end_time for i in (1, 2, 3, 4)] == [200.0, 100.0, 350.0, 350.0]
    assert [group(got[i]) for i in (1, 2, 3, 4)] == ["fast", "slow", "fast", "slow"]
    # the oracle knows from the start
    oracle = run_cluster(
        jobs,
        ClusterSpec.of_groups("c", GROUPS),
        make_ranker("fifo"),
        PreemptionCost(0.0),
        types=TypeSetup("aware", TRUE),
    )
    assert {sj.job.job_id: sj.end_time for sj in oracle.jobs}[1] == 100.0


def test_a_job_never_seen_keeps_the_prior_and_a_nameless_job_is_known_by_its_model():
    jobs = [
        job(1, 0.0, model="b"),
        job(2, 0.0, model="b", accepted_types=("slow",)),
        job(5, 250.0, model="b", name="train.py"),  # another name: never seen
        job(4, 251.0, model="b"),  # no name: known as "b", learnt
    ]
    got = replay(jobs)
    assert group(got[5]) == "fast" and got[5].end_time == 450.0
    assert group(got[4]) == "slow" and got[4].end_time == 351.0
    assert named(jobs[3]).name == "b" and named(jobs[2]).name == "train.py"


def test_the_prior_is_the_sites_speeds_without_the_replays_matrix():
    prior = prior_model(TRUE, ["fast", "slow"])
    sp = prior.speeds(job(1, 0.0, model="b"))
    assert {t: (s.value, s.source) for t, s in sp.items()} == {
        "fast": (1.0, DEFAULT),
        "slow": (0.5, DEFAULT),
    }
    assert prior.min_samples == 3  # the site config's default


def test_online_learning_is_learn_over_the_runs_kept():
    rng = random.Random(5)
    prior = ThroughputModel({"v100": 1.0, "k80": 0.3}, min_samples=2)
    online = LearnedSpeeds(prior, keep=40)
    kept: list[RunRecord] = []
    for _ in range(300):
        run = RunRecord(
            rng.choice("xy"), rng.choice("abc"), rng.choice(["v100", "k80"]), rng.uniform(1, 99)
        )
        online.add(run)
        kept = (kept + [run])[-40:]
        ref = prior.learn(kept)
        for user in "xy":
            for name in "abc":
                j = Job(0, user=user, name=name)
                assert online.model.speeds(j) == ref.speeds(j)


def sim(*extra):
    return CliRunner().invoke(app, ["simulate", "--format", "philly", "-q", "--json", *extra])


@pytest.fixture(scope="module")
def philly_head(shared_traces, tmp_path_factory) -> dict:
    lines = (shared_traces / "philly" / "philly.csv").read_text().splitlines()
    rows = [lines[0]] + [ln for ln in lines[1:] if ln.startswith("2017-10-0")][:800]
    d = tmp_path_factory.mktemp("head")
    (d / "p.csv").write_text("\n".join(rows) + "\n")
    return {
        "trace": str(d / "p.csv"),
        "dir": d,
        "matrix": shared_traces / "gavel" / "simulation_throughputs.json",
        "args": [
            "--trace",
            str(d / "p.csv"),
            "--node-types",
            "v100:1,p100:1,k80:1",
            "--gpus-per-node",
            "8",
            "--throughputs",
            str(shared_traces / "gavel" / "simulation_throughputs.json"),
            "--model-seed",
            "0",
            "--no-fairness",
        ],
    }


# the aware replay's figures before --speeds existed (it read the throughputs: the oracle)
BEFORE = {
    # LAS moved twice since the oracle path was pinned, each time on purpose: the replay keeps
    # the preemption hysteresis, and a crowded job declines a slow type only where others gain
    # more from it (the fair-share lease has neither, and kept its figures)
    "las": (80096.51413896322, 72418.73705589771, 426594.61230089184, 0.085, 1924374.94144845),
    "fairshare": (
        303274.1870823258,
        374553.6253724098,
        504454.37396336766,
        0.0825,
        1705664.2183744907,
    ),
}
FIGS = ("avg_jct_s", "median_jct_s", "p99_jct_s", "preemptions_per_job", "makespan_s")


@pytest.mark.parametrize("policy", ["las", "fairshare"])
def test_oracle_speeds_reproduce_the_aware_figures_of_before(philly_head, policy):
    res = sim(*philly_head["args"], "--policy", policy, "--speeds", "oracle")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["policies"][policy]
    assert tuple(s[k] for k in FIGS) == BEFORE[policy]
    assert "type choice aware on oracle speeds" in " ".join(res.stderr.split())


def test_learned_is_the_default_and_a_config_of_the_default_gives_the_same(philly_head):
    docs = []
    cfg = Path(philly_head["dir"]) / "site.toml"
    cfg.write_text(site_of(philly_head["matrix"]))
    args = philly_head["args"]
    at = args.index("--node-types")
    in_config = args[:at] + args[at + 4 :]  # the config's node groups are the cluster
    for extra in (args, [*args, "--speeds", "learned"], [*in_config, "--config", str(cfg)]):
        res = sim(*extra, "--policy", "las")
        assert res.exit_code == 0, res.output
        assert "type choice aware on learned speeds" in " ".join(res.stderr.split())
        docs.append({k: json.loads(res.stdout)["policies"]["las"][k] for k in FIGS})
    assert docs[0] == docs[1] == docs[2]
    assert docs[0]["avg_jct_s"] != BEFORE["las"][0]  # it chose on what it knew, not the oracle


def site_of(matrix: Path) -> str:
    """A site config of the same cluster and speeds as the options (the types' speeds those
    the replay takes from the throughputs), learning from 3 runs per type: the default."""
    model = ThroughputModel.from_matrix(load_throughputs(matrix), ["v100", "p100", "k80"])
    text = '[site]\nname = "s"\n[[partitions]]\nname = "gpu"\ndefault = true\n'
    for t in model.types:
        text += f'[[gpu_types]]\nname = "{t}"\nmemory_gb = 16\nspeed = {model.type_speed(t)!r}\n'
    for t in model.types:
        text += (
            f'[[node_groups]]\nname = "{t}"\nnodes = "{t}n1"\ngpus_per_node = 8\n'
            f'gpu_type = "{t}"\ncpus = 32\nmemory_gb = 256\npartitions = ["gpu"]\n'
        )
    return text + "[throughput]\nmin_samples = 3\n"


@pytest.mark.parametrize(
    "extra, msg",
    [
        (["--speeds", "exact"], "--speeds: got 'exact'; allowed: learned, oracle"),
        (
            ["--speeds", "learned", "--type-choice", "fastest"],
            "--speeds: only --type-choice aware reads it",
        ),
    ],
)
def test_speeds_errors(philly_head, extra, msg):
    res = sim(*philly_head["args"], "--policy", "las", *extra)
    assert res.exit_code != 0 and msg in res.output
