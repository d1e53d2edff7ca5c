"""Fuzz of the filter's protocol: every field of the job description with huge, negative,
non-numeric, deeply nested and non-UTF-8 values, and random bytes on the wire. Each request
gets a decision (accept or reject with a message); none gets ``error``, which the shim would
count against the service and which, under failure mode accept, lets the job in unchecked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsubmit.protocol import answer_line
from jobsubmit.service import FilterService
from slurm_dl.core.rules import JOB_DESC_FIELDS

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"

NASTY = [
    "9" * 4400,
    "-" + "9" * 4400,
    10**4000,
    -(10**4000),
    -1,
    -(2**63),
    2**64,
    4294967294,
    65534,
    0,
    1e308,
    -1e308,
    float("nan"),
    float("inf"),
    "nan",
    "inf",
    True,
    None,
    "",
    " ",
    "\x00",
    "\u2603" * 1000,
    "x" * 200_000,
    ["gres:gpu:1"],
    {"a": {"b": {"c": 1}}},
    [[[[[[[[[[[]]]]]]]]]]],
    "gres:gpu:" + "9" * 30,
    "gres:gpu:-1",
    "gres:gpu:h100:",
    "gres:gpu::",
    "gres/gpu=٣",
    "٣",
    "0-" + "9" * 20,
    "1-3%" + "9" * 20,
    "dl:class=serve;" * 1000,
    "dl:deadline=" + "9" * 400,
    "gres:gpu:1," * 5000,
]


@pytest.fixture(scope="module")
def service():
    return FilterService(CONFIG, clock=lambda: 1_800_000_000.0)


def ask(service: FilterService, raw: bytes) -> dict:
    line, _, _ = answer_line(raw, service.decide_job)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    return json.loads(line)


def wire(job) -> bytes:
    return json.dumps({"v": 1, "submit_uid": 1000, "job": job}, allow_nan=True).encode() + b"\n"


def decided(answer: dict) -> bool:
    if answer["action"] == "accept":
        return isinstance(answer["set"], dict)
    return (
        answer["action"] == "reject"
        and answer["message"].startswith("slurm-dl")
        and len(answer["message"]) < 600
    )


@pytest.mark.parametrize("field", sorted(JOB_DESC_FIELDS))
def test_every_field_with_every_nasty_value_gets_a_decision(service, field) -> None:
    for value in NASTY:
        base = {"user_name": "alice", "tres_per_job": "gres:gpu:1", "time_limit": 30}
        answer = ask(service, wire({**base, field: value}))
        assert decided(answer), (field, repr(value)[:80], answer)


def test_non_utf8_bytes_in_fields_get_a_decision(service) -> None:
    raw = (
        b'{"v": 1, "submit_uid": 1000, "job": {"user_name": "\xff\xfe", "comment": "dl:class=\xc3\x28",'
        b' "tres_per_job": "gres:gpu:\xe2\x82"}}\n'
    )
    assert decided(ask(service, raw))


def test_deeply_nested_values_get_a_decision(service) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    raw = b'{"v": 1, "job": {"comment": ' + deep + b"}}\n"
    assert decided(ask(service, raw))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=60),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(st.sampled_from(sorted(JOB_DESC_FIELDS)), json_values, max_size=12))
def test_random_job_descriptions_get_a_decision(service, job) -> None:
    assert decided(ask(service, wire(job)))


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=400))
def test_random_bytes_get_a_refusal_or_a_version_error_never_a_crash(service, raw) -> None:
    answer = ask(service, raw)
    assert decided(answer) or (
        answer["action"] == "error" and "protocol version" in answer["message"]
    )
