from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_dl.core.hostlist import compress_hostlist, expand_hostlist


def test_expand_ranges_and_lists() -> None:
    assert expand_hostlist("gpu[01-03,07]") == ["gpu01", "gpu02", "gpu03", "gpu07"]
    assert expand_hostlist("a1,b[1-2]") == ["a1", "b1", "b2"]
    assert expand_hostlist("node") == ["node"]


@pytest.mark.parametrize("bad", ["", "gpu[1-", "gpu]1[", "gpu[a-b]", "gpu[3-1]"])
def test_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(bad)


def test_compress() -> None:
    assert compress_hostlist(["gpu01", "gpu02", "gpu03", "gpu07"]) == "gpu[01-03,07]"
    assert compress_hostlist(["x"]) == "x"


@given(st.sets(st.integers(min_value=0, max_value=999), min_size=1, max_size=40))
def test_round_trip(nums: set[int]) -> None:
    names = [f"n{i:03d}" for i in sorted(nums)]
    assert expand_hostlist(compress_hostlist(names)) == names
