"""The admin_comment tag: round trip, and a strict, total parser (garbage in → None, never raises)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_dl.core.model import JobClass
from slurm_dl.core.tags import TAG_PREFIX, JobTag, encode_tag, parse_tag, safe_value


def test_round_trip_with_every_field() -> None:
    tag = JobTag(JobClass.TRAIN, True, 16, "2x8", 1763700000, "job.gpu:16")
    text = encode_tag(tag)
    assert text == "sdl1:class=train;ckpt=1;gpus=16;shape=2x8;deadline=1763700000;orig=job.gpu:16"
    assert parse_tag(text) == tag
    assert parse_tag(text).shape_nodes == 2 and parse_tag(text).shape_gpus_per_node == 8


def test_a_steps_handler_round_trips() -> None:
    tag = parse_tag("sdl1:class=train;ckpt=steps;gpus=2;shape=any")
    assert tag == JobTag(JobClass.TRAIN, True, 2, "any", signal_target="steps")
    assert encode_tag(tag) == "sdl1:class=train;ckpt=steps;gpus=2;shape=any"


def test_optional_fields_may_be_absent() -> None:
    tag = parse_tag("sdl1:class=serve;ckpt=0;gpus=2;shape=any")
    assert tag == JobTag(JobClass.SERVE, False, 2, "any")
    assert tag.shape_nodes is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sdl1:",
        "sdl2:class=train;ckpt=1;gpus=1;shape=any",  # unknown version
        "sdl1:class=boss;ckpt=1;gpus=1;shape=any",  # unknown class
        "sdl1:class=train;ckpt=2;gpus=1;shape=any",
        "sdl1:class=train;ckpt=1;gpus=-1;shape=any",
        "sdl1:class=train;ckpt=1;gpus=1;shape=2by8",
        "sdl1:class=train;ckpt=1;gpus=1",  # missing shape
        "sdl1:class=train;class=serve;ckpt=1;gpus=1;shape=any",  # duplicate key
        "sdl1:class=train;ckpt=1;gpus=1;shape=any;prio=9",  # unknown key
        "sdl1:class=train;ckpt=1;gpus=1;shape=any;",  # trailing separator
        "sdl1:class=train;ckpt=1;gpus=１;shape=any",  # non-ASCII digit
        " sdl1:class=train;ckpt=1;gpus=1;shape=any",
        "sdl1:class=train;ckpt=1;gpus=1;shape=any;deadline=soon",
        "sdl1:class=train;ckpt=1;gpus=1;shape=any;orig=" + "x" * 600,
    ],
)
def test_malformed_tags_parse_to_none(text: str) -> None:
    assert parse_tag(text) is None


@pytest.mark.parametrize("value", [None, 7, b"sdl1:class=train", ["sdl1:"], {"a": 1}])
def test_non_text_parses_to_none(value: object) -> None:
    assert parse_tag(value) is None


def test_encode_refuses_values_outside_the_format() -> None:
    with pytest.raises(ValueError, match="shape"):
        encode_tag(JobTag(JobClass.TRAIN, True, 1, "wide"))
    with pytest.raises(ValueError, match="orig"):
        encode_tag(JobTag(JobClass.TRAIN, True, 1, "any", original="a;b=c"))


def test_safe_value_maps_free_text_into_the_alphabet() -> None:
    assert safe_value("gres:gpu:h100:2;x=1 y") == "gres:gpu:h100:2.x.1.y"
    assert safe_value("") == "none"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_gives_none(text: str) -> None:
    result = parse_tag(text)
    assert result is None or isinstance(result, JobTag)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="sdl1:;=classtrinpvkgu0123456789xy", max_size=80))
def test_near_miss_text_parses_or_gives_none(text: str) -> None:
    result = parse_tag(TAG_PREFIX + text)
    if result is not None:
        assert parse_tag(encode_tag(result)) == result


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(list(JobClass)),
    st.booleans(),
    st.integers(0, 4096),
    st.one_of(
        st.just("any"),
        st.just("spread"),
        st.builds(lambda n, g: f"{n}x{g}", st.integers(1, 999), st.integers(1, 64)),
    ),
    st.one_of(st.none(), st.integers(0, 10**10)),
    st.one_of(st.none(), st.text(max_size=60).map(safe_value)),
    st.sampled_from(["batch", "steps"]),
)
def test_every_encoded_tag_parses_back(
    job_class, ckpt, gpus, shape, deadline, orig, target
) -> None:
    tag = JobTag(job_class, ckpt, gpus, shape, deadline, orig, target if ckpt else "batch")
    assert parse_tag(encode_tag(tag)) == tag


def test_soft_deadline_steps_round_trip() -> None:
    tag = JobTag(
        JobClass.TRAIN,
        False,
        1,
        soft_deadlines=((1800000000, 1.0), (1800007200, 0.5), (1800010000, 0.0625)),
    )
    text = encode_tag(tag)
    assert "soft=1800000000:1+1800007200:0.5+1800010000:0.0625" in text
    assert parse_tag(text) == tag


@pytest.mark.parametrize(
    "soft",
    [
        "1800000000:0.5",  # the first step is worth the top value
        "1800000000:1+1799999999:0.5",  # times rise
        "1800000000:1+1800000001:1",  # values fall
        "1800000000:1+1800000001:0",  # above 0
        "1800000000:2",  # no more than a strict deadline's worth
        "1800000000:1+" + "+".join(f"{1800000001 + i}:0.{9 - i}" for i in range(8)),  # at most 8
        "1800000000=1",
        "x:1",
        "",
    ],
)
def test_forged_or_malformed_soft_steps_make_the_tag_invalid(soft) -> None:
    assert parse_tag(f"{TAG_PREFIX}class=train;ckpt=0;gpus=1;shape=any;soft={soft}") is None


def test_encode_refuses_soft_steps_outside_the_format() -> None:
    with pytest.raises(ValueError, match="soft"):
        encode_tag(JobTag(JobClass.TRAIN, False, 1, soft_deadlines=((10, 1.0), (5, 0.5))))


def test_a_tag_with_shards_and_soft_steps_keeps_both():
    tag = JobTag(
        JobClass.INFERENCE,
        False,
        0,
        shards=(2, 8),
        soft_deadlines=((1800000000, 1.0), (1800003600, 0.5)),
    )
    back = parse_tag(encode_tag(tag))
    assert back is not None and back.shards == (2, 8) and back.soft_deadlines == tag.soft_deadlines
