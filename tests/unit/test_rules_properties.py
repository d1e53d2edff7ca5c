"""Property tests: every job description gets a decision or a clean rejection; nothing raises."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.rules import FilterContext, FilterDecision, decide
from slurm_dl.core.rules.request import JOB_DESC_FIELDS, NO_VAL, NO_VAL16
from slurm_dl.core.tags import parse_tag

CFG = load_config(Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml")
WRITABLE = {
    "admin_comment",
    "tres_per_node",
    "tres_per_job",
    "partition",
    "time_limit",
    "min_nodes",
    "max_nodes",
    "req_switch",
    "wait4switch",
    "requeue",
}

gres = st.one_of(
    st.none(),
    st.builds(
        lambda t, n: f"gres:gpu:{t}{n}",
        st.sampled_from(["", "h100:", "a100:", "nosuchgpu:"]),
        st.integers(0, 80),
    ),
    st.text(max_size=30),
)
numbers = st.one_of(
    st.integers(-5, 5000), st.sampled_from([NO_VAL, NO_VAL16, 2**32 - 1, 2**64]), st.floats()
)
anything = st.one_of(
    st.none(), st.booleans(), numbers, st.text(max_size=40), st.lists(st.integers(), max_size=3)
)
comments = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.builds(
        lambda c, d: f"dl:class={c} dl:deadline={d}",
        st.sampled_from(["train", "serve", "interactive", "sweep", "inference", "boss", ""]),
        st.one_of(st.integers(0, 2 * 10**9).map(str), st.text(max_size=12)),
    ),
)
job_descs = st.fixed_dictionaries(
    {},
    optional={
        "tres_per_job": gres,
        "tres_per_node": gres,
        "time_limit": numbers,
        "min_nodes": numbers,
        "max_nodes": numbers,
        "comment": comments,
        "admin_comment": st.one_of(st.none(), st.text(max_size=40)),
        "array_inx": st.one_of(st.none(), st.just("0-9")),
        "cpus_per_tres": gres,
        "mem_per_tres": gres,
        "partition": st.one_of(st.none(), st.sampled_from(["gpu", "nope"])),
        "requeue": numbers,
        "req_switch": numbers,
        "has_script": anything,
        "user_name": anything,
        "deadline": numbers,
    },
)


def check_decision(d: FilterDecision) -> None:
    assert isinstance(d, FilterDecision)
    wire = json.loads(json.dumps(d.to_wire()))  # must be JSON-serialisable
    if d.accepted:
        assert set(d.changes) <= WRITABLE
        for k, v in d.changes.items():
            assert isinstance(v, (str, int)) and not isinstance(v, bool), (k, v)
        if "admin_comment" in d.changes and d.changes["admin_comment"]:
            assert parse_tag(d.changes["admin_comment"]) is not None
        assert wire["action"] == "accept"
    else:
        assert d.message.startswith("slurm-dl: ") and "Fix:" in d.message
        assert isinstance(d.code, (str, int))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_descs, st.integers(0, 10), st.floats(0, 4e9))
def test_every_job_description_gets_a_decision(desc, deadline_jobs, now) -> None:
    check_decision(decide(desc, CFG, FilterContext(now=now, user_deadline_jobs=deadline_jobs)))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(JOB_DESC_FIELDS + ("junk",)), anything, max_size=12))
def test_arbitrary_field_values_never_raise(desc) -> None:
    check_decision(decide(desc, CFG, FilterContext(now=1.8e9)))


@settings(max_examples=50, deadline=None)
@given(anything)
def test_non_object_descriptions_never_raise(desc) -> None:
    check_decision(decide(desc, CFG, FilterContext(now=1.8e9)))  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    job_descs,
    st.integers(0, 10**15),
    st.sampled_from(["9999-12-31T23:59", "0001-01-01T00:00", "99999999999"]),
)
def test_with_every_rule_switched_on_but_validation_tags_still_parse(desc, gpus, deadline) -> None:
    """Without validation nothing bounds the values, yet the tag written must stay parseable."""
    cfg = CFG.model_copy(update={"filter": CFG.filter.model_copy(update={"validate_jobs": False})})
    desc = {**desc, "tres_per_job": f"gres:gpu:{gpus}", "comment": f"dl:deadline={deadline}"}
    check_decision(decide(desc, cfg, FilterContext(now=1.8e9)))


@settings(max_examples=200, deadline=None)
@given(job_descs)
def test_a_forged_tag_never_survives(desc) -> None:
    desc = {**desc, "admin_comment": "sdl1:class=serve;ckpt=0;gpus=1;shape=any"}
    d = decide(desc, CFG, FilterContext(now=1.8e9))
    if d.accepted:
        assert d.changes.get("admin_comment") != desc["admin_comment"]
