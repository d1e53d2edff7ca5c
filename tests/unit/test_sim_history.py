"""Importing a centre's own history: sacct --json (22.05 and newer layouts), sacct -P, Helios CSV;
steps, arrays, requeues, jobs that never started, GPUs from TRES, bad records and bad files."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.errors import TraceError
from slurm_dl.sim.workloads.history import (
    gpus_from_tres,
    read_helios,
    read_sacct_json,
    read_sacct_text,
)
from slurm_dl.sim.workloads.traces import read_history


def _job_2205(
    jid, state="COMPLETED", submit=1000, start=1010, end=1110, gpus=2, account="phys", **kw
):
    return {
        "job_id": jid,
        "account": account,
        "user": "ann",
        "partition": "gpu",
        "name": "train",
        "state": {"current": state, "reason": "None"},
        "time": {
            "submission": submit,
            "start": start,
            "end": end,
            "elapsed": max(0, end - start) if start else 0,
            "limit": 60,
        },
        "tres": {
            "allocated": [
                {"type": "cpu", "count": 4},
                {"type": "gres", "name": "gpu", "count": gpus},
            ]
            if start
            else [],
            "requested": [{"type": "gres", "name": "gpu", "count": gpus}],
        },
        "steps": [{"step": {"name": "batch"}}, {"step": {"name": "extern"}}],
        "array": {"job_id": 0, "task_id": None},
        **kw,
    }


def _num(v):
    return {"set": v is not None, "infinite": False, "number": v or 0}


def _job_new(
    jid, state="COMPLETED", submit=1000, start=1010, end=1110, gpus=2, account="bio", task=None
):
    return {
        "job_id": jid,
        "account": account,
        "user": "bob",
        "partition": "gpu",
        "name": "x",
        "state": {"current": [state], "reason": "None"},
        "time": {
            "submission": submit,
            "start": start,
            "end": end,
            "elapsed": end - start if start else 0,
            "limit": _num(30),
        },
        "tres": {
            "allocated": [{"type": "gres", "name": "gpu:a100", "count": gpus}],
            "requested": [],
        },
        "steps": [],
        "array": {"job_id": 40 if task is not None else 0, "task_id": _num(task)},
    }


def test_sacct_json_2205_layout_folds_steps_and_counts_not_started():
    doc = {
        "jobs": [
            _job_2205(1),
            _job_2205(2, gpus=4, account="chem"),
            _job_2205(3, state="CANCELLED", start=0, end=1200),
            _job_2205(4, state="PENDING", start=0, end=0),
            _job_2205(5, gpus=0),
        ]
    }
    jobs, st = read_sacct_json(json.dumps(doc), "h.json")
    assert [j.job_id for j in jobs] == [1, 2]
    assert jobs[1].num_gpus == 4 and jobs[1].account == "chem" and jobs[0].duration == 100.0
    assert jobs[0].time_limit == 3600.0 and float(jobs[0].tags["recorded_start"]) == 1010.0
    assert (st.records, st.not_started, st.unfinished, st.cpu_only_dropped, st.steps_folded) == (
        5,
        1,
        1,
        1,
        10,
    )
    kept, st2 = read_sacct_json(json.dumps(doc), "h.json", keep_cpu=True)
    assert len(kept) == 3 and st2.cpu_only_dropped == 0


def test_sacct_json_newer_layout_arrays_requeues_and_gpu_type():
    doc = {
        "jobs": [
            _job_new(41, task=0),
            _job_new(42, task=1),
            _job_new(50, start=1010, end=1050, state="REQUEUED"),
            _job_new(50, submit=1050, start=1100, end=1160),
        ]
    }
    jobs, st = read_sacct_json(json.dumps(doc), "h.json", group="partition")
    assert [j.job_id for j in jobs] == [41, 42, 50]
    assert st.array_tasks == 2 and st.requeue_records_merged == 1
    j50 = jobs[2]
    assert j50.duration == 40 + 60 and j50.submit_time == 1000 and j50.gpu_type == "a100"
    assert j50.account == "gpu" and j50.time_limit == 1800.0


def test_sacct_json_bad_record_names_index_and_field_or_is_skipped():
    doc = {"jobs": [_job_2205(1), _job_2205(2)]}
    doc["jobs"][1]["time"]["submission"] = "yesterday"
    with pytest.raises(TraceError, match=r"jobs\[1\].*time.submission"):
        read_sacct_json(json.dumps(doc), "h.json")
    jobs, st = read_sacct_json(json.dumps(doc), "h.json", skip_bad=True)
    assert len(jobs) == 1 and st.bad_skipped == 1
    with pytest.raises(TraceError, match="NaN is not allowed"):
        read_sacct_json('{"jobs": [{"job_id": 1, "time": {"submission": NaN}}]}', "h.json")


SACCT_P = """JobID|JobIDRaw|User|Account|Partition|JobName|State|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES
7|7|ann|phys|gpu|a|COMPLETED|2024-01-01T00:00:00|2024-01-01T00:00:10|2024-01-01T00:01:10|00:01:00|01:00:00|billing=2,cpu=2,gres/gpu:v100=2,mem=8G,node=1|cpu=2,gres/gpu=2
7.batch|7.batch||phys||batch|COMPLETED|2024-01-01T00:00:10|2024-01-01T00:00:10|2024-01-01T00:01:10|00:01:00||cpu=2,gres/gpu=2|
7.0|7.0||phys||python|COMPLETED|2024-01-01T00:00:11|2024-01-01T00:00:11|2024-01-01T00:01:09|00:00:58||cpu=2,gres/gpu=2|
8_1|9|bob|bio|gpu|arr|COMPLETED|2024-01-01T00:00:05+02:00|2024-01-01T00:00:20+02:00|2024-01-01T00:10:20+02:00|00:10:00|1-00:00:00|gres/gpu=1|gres/gpu=1
8_[2-5]|8|bob|bio|gpu|arr|PENDING|2024-01-01T00:00:05|Unknown|Unknown|00:00:00|1-00:00:00||gres/gpu=1
10|10|cat|bio|cpu|c|CANCELLED by 0|2024-01-01T00:00:30|None|2024-01-01T00:02:00|00:00:00|00:10:00||cpu=1
"""


def test_sacct_text_steps_arrays_time_zones():
    jobs, st = read_sacct_text(SACCT_P, "h.txt")
    assert [j.tags["slurm_job_id"] for j in jobs] == [
        "9",
        "7",
    ]  # 8_1 submitted at 22:00 UTC the day before
    j7 = next(j for j in jobs if j.job_id == 7)
    assert (
        j7.num_gpus == 2
        and j7.gpu_type == "v100"
        and j7.duration == 60.0
        and j7.time_limit == 3600.0
    )
    assert (
        st.steps_folded == 2 and st.not_started == 1 and st.unfinished == 1 and st.array_tasks == 1
    )


def test_sacct_text_bad_line_names_line_and_field():
    bad = SACCT_P.replace(
        "2024-01-01T00:00:10|2024-01-01T00:01:10|00:01:00|01:00:00",
        "2024-01-01T00:00:10|2024-13-01T00:01:10|00:01:00|01:00:00",
        1,
    )
    with pytest.raises(TraceError, match=r"h.txt:2: field 'End'"):
        read_sacct_text(bad, "h.txt")
    jobs, st = read_sacct_text(bad, "h.txt", skip_bad=True)
    assert st.bad_skipped == 1 and len(jobs) == 1


def _with_energy(cells: list[str]) -> str:
    """SACCT_P with a ConsumedEnergyRaw column: one value per line, in order."""
    lines = SACCT_P.splitlines()
    out = [lines[0] + "|ConsumedEnergyRaw"]
    out += [f"{line}|{cell}" for line, cell in zip(lines[1:], cells)]
    return "\n".join(out) + "\n"


def test_sacct_text_keeps_slurms_energy_where_it_was_measured():
    # job 7 (and its steps, folded), array task 9 with 0 (not measured), 8's pending record,
    # 10 never started
    jobs, st = read_sacct_text(_with_energy(["36000000", "", "", "0", "", "5"]), "h.txt")
    by_id = {j.tags["slurm_job_id"]: j for j in jobs}
    assert by_id["7"].tags["consumed_energy_j"] == repr(36e6)
    assert "consumed_energy_j" not in by_id["9"].tags, "0 is not measured, not zero"
    assert (st.energy_jobs, st.energy_joules) == (1, 36e6)
    assert "1 with Slurm's node energy (10.0 kWh)" in st.describe()
    no_value = _with_energy([str(2**64 - 2), "", "", "", "", ""])  # Slurm's NO_VAL64
    assert read_sacct_text(no_value, "h.txt")[1].energy_jobs == 0
    with pytest.raises(TraceError, match=r"h.txt:2: field 'ConsumedEnergyRaw': '-3'"):
        read_sacct_text(_with_energy(["-3", "", "", "", "", ""]), "h.txt")


HELIOS = """job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration
a1,u1,vcA,j,8,32,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:10,2020-04-01 01:00:10,3600
a2,u2,vcB,j,1,4,1,CANCELLED,2020-04-01 00:01:00,,2020-04-01 00:02:00,0
a3,u2,vcB,j,0,4,1,COMPLETED,2020-04-01 00:01:00,2020-04-01 00:01:00,2020-04-01 00:02:00,60
a4,u3,vcB,j,2,4,1,FAILED,2020-04-01 00:03:00,2020-04-01 00:03:00,2020-04-01 00:05:00,120
"""


def test_helios_csv():
    jobs, st = read_helios(HELIOS, "h.csv")
    assert [(j.account, j.num_gpus, j.duration) for j in jobs] == [
        ("vcA", 8, 3600.0),
        ("vcB", 2, 120.0),
    ]
    assert st.not_started == 1 and st.cpu_only_dropped == 1
    with pytest.raises(TraceError, match=r"h.csv:3: field 'gpu_num'"):
        read_helios(HELIOS.replace(",1,4,1,CANCELLED", ",inf,4,1,CANCELLED"), "h.csv")


def test_gpus_from_tres():
    assert gpus_from_tres("cpu=4,gres/gpu=2,gres/gpu:a100=2") == (2, "a100")
    assert gpus_from_tres("gres/gpu:a100=1,gres/gpu:v100=2") == (3, "a100")
    assert gpus_from_tres("cpu=4,mem=1G") == (0, None)


@pytest.mark.parametrize(
    "content,fmt,msg",
    [
        (b"", "sacct-json", "the file is empty"),
        (b"   \n", "csv", "the file is empty"),
        (b"job_id,num_gpus\n1,\xff\xfe\n", "csv", "not UTF-8 text"),
        (b'{"jobs": [', "sacct-json", "not sacct --json output"),
        (b"submit_time,duration,num_gpus\n0,nan,1\n", "csv", "not a finite number"),
        (b"submit_time,duration,num_gpus\ninf,10,1\n", "csv", "not a time"),
    ],
)
def test_bad_files_give_one_error_line(tmp_path, content, fmt, msg):
    p = tmp_path / "t"
    p.write_bytes(content)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--format", fmt, "--nodes", "1"])
    assert r.exit_code != 0
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and msg in lines[0], r.output


def test_simulate_reads_sacct_json_and_reports_counts(tmp_path):
    doc = {
        "jobs": [
            _job_2205(
                i,
                submit=1000 + 10 * i,
                start=1000 + 10 * i,
                end=1100 + 10 * i,
                gpus=1 + i % 2,
                account="ab"[i % 2],
            )
            for i in range(1, 9)
        ]
        + [_job_2205(99, state="CANCELLED", start=0)]
    }
    p = tmp_path / "h.json"
    p.write_text(json.dumps(doc))
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(p),
            "--format",
            "sacct-json",
            "--nodes",
            "1",
            "--gpus-per-node",
            "4",
            "--policy",
            "fifo",
            "--policy",
            "fairshare",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["import"]["jobs"] == 8 and out["import"]["not_started"] == 1
    assert out["policies"]["fifo"]["jobs"] == 8
    assert read_history(p, "sacct-json")[1].steps_folded == 18


def test_the_filters_tag_says_who_opted_in_to_preemption():
    """The admin comment holds the filter's tag: its class, deadline and ``ckpt`` come into the
    replay; a job without a tag did not pass the filter and may not be preempted."""
    tag = "sdl1:class=train;ckpt=1;gpus=2;shape=any;deadline=5000"
    doc = {
        "jobs": [
            _job_2205(1, comment={"administrator": tag, "job": "", "system": ""}),
            _job_2205(
                2, comment={"administrator": "sdl1:class=interactive;ckpt=0;gpus=2;shape=any"}
            ),
            _job_2205(3, comment={"administrator": "sdl1:class=train;ckpt=1"}),  # not a whole tag
            _job_2205(4),
        ]
    }
    jobs, st = read_sacct_json(json.dumps(doc), "h.json")
    by = {j.job_id: j for j in jobs}
    assert by[1].checkpointable and by[1].requeue and by[1].deadline == 5000.0
    assert by[2].job_class.value == "interactive" and not by[2].checkpointable
    assert not by[3].checkpointable and not by[4].checkpointable
    assert (st.tagged, st.opted_in) == (2, 1) and "1 opted in to preemption" in st.describe()
    header, *rows = SACCT_P.splitlines()
    text = "\n".join(
        [header + "|AdminComment"] + [r + ("|" + tag if r.startswith("7|") else "|") for r in rows]
    )
    jobs, st = read_sacct_text(text, "h.txt")
    assert {j.tags["slurm_job_id"]: j.checkpointable for j in jobs} == {"7": True, "9": False}
    jobs, st = read_sacct_text(SACCT_P, "h.txt")  # an export without the field: nothing recorded
    assert all(j.checkpointable for j in jobs) and "no AdminComment field" in st.describe()


def test_simulate_opt_in_choices(tmp_path):
    doc = {
        "jobs": [
            _job_2205(i, submit=1000 + i, start=1000 + i, end=5000 + 10 * i, gpus=4)
            for i in range(1, 5)
        ]
    }
    p = tmp_path / "h.json"
    p.write_text(json.dumps(doc))
    base = [
        "simulate",
        "--trace",
        str(p),
        "--format",
        "sacct-json",
        "--nodes",
        "1",
        "--gpus-per-node",
        "4",
        "--policy",
        "las",
        "--las-thresholds",
        "100",
        "--no-fairness",
        "--json",
    ]
    runs = {}
    for choice in ("recorded", "all", "none"):
        r = CliRunner().invoke(app, base + ["--opt-in", choice])
        assert r.exit_code == 0, r.output
        runs[choice] = json.loads(r.stdout)["policies"]["las"]["preemptions"]
    assert runs["recorded"] == runs["none"] == 0 < runs["all"]  # no tags: nobody opted in
    r = CliRunner().invoke(app, base + ["--opt-in", "some"])
    assert r.exit_code != 0 and r.output.strip().splitlines()[-1].startswith("error: --opt-in")
    # a bad choice is refused before the trace is read: a missing trace is not the error shown
    missing = [a if a != str(p) else str(tmp_path / "absent.json") for a in base]
    r = CliRunner().invoke(app, missing + ["--opt-in", "some"])
    assert r.exit_code != 0 and r.output.strip().splitlines()[-1].startswith("error: --opt-in"), (
        r.output
    )


def test_simulate_sets_the_recorded_figures_beside_the_replay(tmp_path):
    """A history: the table, the JSON say what the history itself shows (mean JCT, wait,
    makespan) and how far each replay started its jobs from their recorded starts, in units
    that fit a short history."""
    # 1 GPU each on 2 GPUs: jobs 1, 2 start at once, 3 waits for 1 (ends 1100), 4 for 2 (1110)
    doc = {
        "jobs": [
            _job_2205(
                i,
                submit=1000 + 5 * i,
                start=max(1000 + 5 * i, 1000 + 100 * ((i - 1) // 2)),
                end=max(1000 + 5 * i, 1000 + 100 * ((i - 1) // 2)) + 100,
                gpus=1,
                account="a",
            )
            for i in range(1, 5)
        ]
    }
    p = tmp_path / "h.json"
    p.write_text(json.dumps(doc))
    args = [
        "simulate",
        "--trace",
        str(p),
        "--format",
        "sacct-json",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--policy",
        "fifo",
        "--no-fairness",
    ]
    r = CliRunner().invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    starts = [max(1000 + 5 * i, 1000 + 100 * ((i - 1) // 2)) for i in range(1, 5)]
    waits = [s - (1000 + 5 * i) for i, s in zip(range(1, 5), starts)]
    assert out["recorded"]["jobs"] == 4
    assert out["recorded"]["avg_queue_s"] == sum(waits) / 4
    assert out["recorded"]["avg_jct_s"] == sum(w + 100 for w in waits) / 4
    assert out["recorded"]["makespan_s"] == max(starts) + 100 - 1005
    err = out["policies"]["fifo"]["start_error_s"]
    assert err["jobs"] == 4 and err["median"] >= 0 and err["p90"] >= err["median"]
    text = CliRunner().invoke(app, args).stdout
    rows = [ln for ln in text.splitlines() if ln.startswith(("recorded ", "fifo "))]
    assert [r.split()[0] for r in rows] == ["recorded", "fifo"], text
    assert any(
        ln.startswith("recorded: the history itself (4 jobs): mean JCT ") and " s," in ln
        for ln in text.splitlines()
    ), text
    assert any(
        ln.startswith("start error (replayed - recorded start, absolute): fifo median")
        for ln in text.splitlines()
    ), text
    assert all(len(ln) <= 80 for ln in text.splitlines())
