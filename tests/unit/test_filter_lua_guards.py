"""The shim's circuit breaker and its modify guards under lua5.1 (the ``slurm`` table is a
stand-in; sockets, service and JSON are real). Skips without lua5.1, lua-socket and lua-cjson."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from jobsubmit.install import SHIM_TEMPLATE, render_shim
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from test_filter_lua import desc, fake_peer, lua_ready, service_socket  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(lua_ready() is not None, reason=str(lua_ready()))

STUB = r"""
local cjson = require "cjson"
local user, info = {}, {}
slurm = {
    SUCCESS = 0, ERROR = -1, ESLURM_INVALID_TIME_LIMIT = 2051, ESLURM_ACCOUNTING_POLICY = 2050,
    ESLURM_MISSING_TIME_LIMIT = 2054, ESLURM_INVALID_NODE_COUNT = 2006, ESLURM_ACCESS_DENIED = 2002,
    log_user = function(fmt, ...) table.insert(user, string.format(fmt, ...)) end,
    log_info = function(fmt, ...) table.insert(info, string.format(fmt, ...)) end,
}
"""

SUBMIT_MANY = (
    STUB
    + r"""
local socket = require "socket"
dofile(arg[1])
local f = assert(io.open(arg[2])); local calls = cjson.decode(f:read("*a")); f:close()
local out = {}
for i, call in ipairs(calls) do
    if call.sleep then socket.sleep(call.sleep) end
    local t0 = socket.gettime()
    local rc = slurm_job_submit(call.job, {}, 1000)
    out[i] = { rc = rc, ms = (socket.gettime() - t0) * 1000, info = #info }
end
print(cjson.encode({ calls = out, info = info }))
"""
)

MODIFY = (
    STUB
    + r"""
dofile(arg[1])
local f = assert(io.open(arg[2])); local c = cjson.decode(f:read("*a")); f:close()
print(cjson.encode({ rc = slurm_job_modify(c.desc, c.rec, {}, c.uid), info = info }))
"""
)


def shim(tmp_path: Path, sock: Path, failure_mode: str = "accept", **kw) -> Path:
    path = tmp_path / "job_submit.lua"
    kw.setdefault("class_max_minutes", {"train": 1440, "interactive": 120, "serve": 10080})
    path.write_text(render_shim(SHIM_TEMPLATE.read_text(), str(sock), 50, failure_mode, (0,), **kw))
    return path


def lua(tmp_path: Path, script: str, shim_path: Path, data) -> dict:
    (tmp_path / "run.lua").write_text(script)
    (tmp_path / "data.json").write_text(json.dumps(data))
    out = subprocess.run(
        ["lua5.1", str(tmp_path / "run.lua"), str(shim_path), str(tmp_path / "data.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_breaker_opens_after_failures_skips_fast_then_probes_and_closes(
    tmp_path, fake_peer
) -> None:
    sock, state = fake_peer  # accepts and never answers: every ask runs into the 50 ms timeout
    path = shim(tmp_path, sock, breaker_failures=3, breaker_cooldown_s=0.3)
    job = desc(tres_per_job="gres:gpu:1")
    calls = [{"job": job} for _ in range(10)]
    r = lua(tmp_path, SUBMIT_MANY, path, calls)["calls"]
    assert all(c["rc"] == 0 for c in r)  # failure mode accept
    assert len(state["conns"]) == 3  # three asks timed out, then the socket was not touched
    assert [c["info"] for c in r] == [1, 2, 4] + [
        4
    ] * 7  # the third also logged the breaker opening
    info = lua(tmp_path, SUBMIT_MANY, path, calls)["info"]
    assert (
        "no answer within 0.05 s" in info[0] and "no answer within 0.005 s" in info[1]
    )  # suspect: shorter


def test_breaker_probes_after_the_cool_down_and_closes_when_the_service_answers(
    tmp_path, fake_peer
) -> None:
    sock, state = fake_peer
    path = shim(tmp_path, sock, breaker_failures=2, breaker_cooldown_s=0.2)
    job = desc(tres_per_job="gres:gpu:1")
    reply = b'{"v":1,"action":"accept","set":{"time_limit":7}}\n'
    threading.Timer(0.35, lambda: state.update(reply=reply)).start()  # the service comes back
    calls = [
        {"job": job},
        {"job": job},
        {"job": job},
        {"job": job},
        {"job": job, "sleep": 0.6},
        {"job": job},
    ]
    out = lua(tmp_path, SUBMIT_MANY, path, calls)
    r = out["calls"]
    assert [c["info"] for c in r[:4]] == [
        1,
        3,
        3,
        3,
    ]  # two timeouts (the second opens it), two skipped
    assert len(state["conns"]) == 4  # two failures, the probe, and the job after the closed breaker
    text = "\n".join(out["info"])
    assert "2 failures in a row" in text and "answers again; 2 job(s) went by it" in text


def test_breaker_fails_closed_when_the_site_says_reject(tmp_path, fake_peer) -> None:
    sock, _ = fake_peer
    path = shim(tmp_path, sock, breaker_failures=1, breaker_cooldown_s=30, failure_mode="reject")
    r = lua(tmp_path, SUBMIT_MANY, path, [{"job": desc()} for _ in range(4)])["calls"]
    assert all(c["rc"] == -1 for c in r) and [c["info"] for c in r] == [
        2,
        2,
        2,
        2,
    ]  # one ask, then none


def test_service_error_text_reaches_the_log(tmp_path, fake_peer) -> None:
    sock, state = fake_peer
    state["reply"] = b'{"v":1,"action":"error","message":"busy"}\n'
    out = lua(tmp_path, SUBMIT_MANY, shim(tmp_path, sock), [{"job": desc()}])
    assert any("busy" in line for line in out["info"])


TAGGED = "sdl1:class=interactive;ckpt=0;gpus=1;shape=1x1"
CKPT = "sdl1:class=train;ckpt=1;gpus=1;shape=1x1"


def unset(**fields):
    base = {
        "time_limit": NO_VAL,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "num_tasks": NO_VAL,
        "cpus_per_task": NO_VAL16,
        "pn_min_cpus": NO_VAL16,
        "min_cpus": NO_VAL,
        "shared": NO_VAL16,
        "ntasks_per_node": NO_VAL16,
        "sockets_per_node": NO_VAL16,
    }
    base.update(fields)
    return base


@pytest.mark.parametrize(
    "change, rec, guard, allowed",
    [
        ({"time_limit": 2000}, {"time_limit": 30, "admin_comment": TAGGED}, "class_max", False),
        (
            {"time_limit": 4294967295},
            {"time_limit": 30, "admin_comment": TAGGED},
            "class_max",
            False,
        ),
        ({"time_limit": 100}, {"time_limit": 30, "admin_comment": TAGGED}, "class_max", True),
        ({"time_limit": 100}, {"time_limit": 30, "admin_comment": TAGGED}, "any", False),
        ({"time_limit": 20}, {"time_limit": 30, "admin_comment": TAGGED}, "any", True),
        ({"time_limit": 2000}, {"time_limit": 30, "admin_comment": TAGGED}, "off", True),
        (
            {"time_limit": 2000},
            {"time_limit": 30},
            "class_max",
            True,
        ),  # untagged: Slurm's own rules
        ({"requeue": 0}, {"admin_comment": CKPT}, "class_max", False),
        ({"requeue": 0}, {"admin_comment": TAGGED}, "class_max", True),
        ({"min_cpus": 32}, {"min_cpus": 1, "admin_comment": CKPT}, "class_max", False),
        ({"min_cpus": 1}, {"min_cpus": 4, "admin_comment": CKPT}, "class_max", True),
        ({"pn_min_cpus": 16}, {"admin_comment": CKPT}, "class_max", False),
        ({"cpus_per_task": 8}, {"admin_comment": CKPT}, "class_max", False),
        ({"min_mem_per_node": 100000}, {"admin_comment": CKPT}, "class_max", False),
        ({"min_mem_per_cpu": 2000}, {"admin_comment": CKPT}, "class_max", False),
        ({"shared": 0}, {"admin_comment": CKPT}, "class_max", False),
        ({"num_tasks": 4}, {"admin_comment": CKPT}, "class_max", False),
        ({"comment": "dl:class=serve"}, {"comment": "", "admin_comment": CKPT}, "class_max", False),
        (
            {"comment": "dl:deadline=2030-01-01T00:00"},
            {"comment": "x", "admin_comment": CKPT},
            "class_max",
            False,
        ),
        (
            {"comment": "dl:class=train note"},
            {"comment": "dl:class=train", "admin_comment": CKPT},
            "class_max",
            True,
        ),
        ({"comment": "just words"}, {"comment": "", "admin_comment": CKPT}, "class_max", True),
        ({"comment": "dl:ckpt=1"}, {"comment": "", "admin_comment": TAGGED}, "class_max", False),
        ({"account": "serving"}, {"admin_comment": TAGGED}, "class_max", False),
        ({"qos": "prod"}, {"admin_comment": TAGGED}, "class_max", False),
    ],
)
def test_modify_guards(tmp_path, change, rec, guard, allowed) -> None:
    path = shim(tmp_path, tmp_path / "x.sock", time_guard=guard)
    out = lua(
        tmp_path, MODIFY, path, {"desc": unset(**change), "rec": {"job_id": 9, **rec}, "uid": 1000}
    )
    assert (out["rc"] == 0) == allowed, out
    if not allowed:
        assert "may not change" in out["info"][0]
    admin = lua(
        tmp_path, MODIFY, path, {"desc": unset(**change), "rec": {"job_id": 9, **rec}, "uid": 0}
    )
    assert admin["rc"] == 0


SERVE = "sdl1:class=serve;ckpt=0;gpus=1;shape=1x1"


@pytest.mark.parametrize(
    "change, part, allowed",
    [
        ({"time_limit": 3000}, "gpu", False),  # under serve's 10080, over the partition's 2880
        ({"time_limit": 2800}, "gpu", True),
        ({"time_limit": 3000}, "long", True),  # a partition without a maximum in the site config
        ({"time_limit": 3000}, "long,gpu", False),
        ({"shared": 2}, "gpu", False),  # --exclusive=user after submission
        ({"shared": 3}, "gpu", False),
        ({"shared": 1}, "gpu", True),
    ],
)
def test_time_limit_and_exclusive_guards_follow_the_partition(
    tmp_path, change, part, allowed
) -> None:
    path = shim(tmp_path, tmp_path / "x.sock", partition_max_minutes={"gpu": 2880})
    rec = {"job_id": 9, "time_limit": 60, "admin_comment": SERVE, "partition": part}
    out = lua(tmp_path, MODIFY, path, {"desc": unset(**change), "rec": rec, "uid": 1000})
    assert (out["rc"] == 0) == allowed, out
    if not allowed and "time_limit" in change:
        assert "partition gpu maximum 2880" in out["info"][0]


def test_answers_the_service_could_not_make_do_not_open_the_breaker(tmp_path, fake_peer) -> None:
    """Only timeouts and refused connections count as failures: one user's odd job must not make
    the shim skip the service for everyone else."""
    sock, state = fake_peer
    state["reply"] = b'{"v":1,"action":"error","message":"internal error"}\n'
    path = shim(tmp_path, sock, breaker_failures=2, breaker_cooldown_s=30)
    r = lua(tmp_path, SUBMIT_MANY, path, [{"job": desc()} for _ in range(5)])
    assert len(state["conns"]) == 5  # every job was asked about
    assert not any("failures in a row" in line for line in r["info"])


def test_the_prioritizers_user_from_the_site_config_may_move_jobs(tmp_path) -> None:
    """`filter install` reads [prioritizer] user: that user's partition change (a GPU-type
    move) passes the installed shim; another user's is still refused."""
    from jobsubmit.install import FilterInstallError, install
    from slurm_dl.cli.config_file import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml")
    cfg = cfg.model_copy(
        update={"prioritizer": cfg.prioritizer.model_copy(update={"user": "nobody"})}
    )
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmUser=root\n")
    result = install(cfg, tmp_path, str(tmp_path / "x.sock"))
    assert any("nobody" in n for n in result.notes), result.notes
    move = {"desc": unset(partition="h100"), "rec": {"job_id": 28, "partition": "v100"}}
    assert lua(tmp_path, MODIFY, result.shim, {**move, "uid": 65534})["rc"] == 0
    other = lua(tmp_path, MODIFY, result.shim, {**move, "uid": 1000})
    assert other["rc"] != 0 and "may not change partition of job 28" in other["info"][0]
    unknown = cfg.model_copy(
        update={"prioritizer": cfg.prioritizer.model_copy(update={"user": "no-such-user-here"})}
    )
    with pytest.raises(FilterInstallError, match="not a user on this host"):
        install(unknown, tmp_path, str(tmp_path / "x.sock"))
