"""SiteFactor quantisation and the grouped, changes-only pushes."""

import math

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.sitefactor import SiteFactorScale, plan_pushes, site_factors

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_levels_span_zero_to_max():
    s = SiteFactorScale(levels=5, maximum=1000)
    assert [s.value(x) for x in (0.0, 0.25, 0.5, 0.75, 1.0)] == [0, 250, 500, 750, 1000]


def test_scores_out_of_range_clamp_and_nan_is_lowest():
    s = SiteFactorScale(levels=64, maximum=1_000_000)
    assert s.value(-3.0) == 0
    assert s.value(7.0) == 1_000_000
    assert s.value(math.nan) == 0


def test_quantisation_groups_close_scores():
    s = SiteFactorScale(levels=4, maximum=300)
    vals = site_factors({1: 0.01, 2: 0.02, 3: 0.99, 4: 0.5}, s)
    assert vals[1] == vals[2] == 0
    assert vals[3] == 300
    assert vals[4] in (100, 200)


def test_order_is_kept_by_levels():
    s = SiteFactorScale(levels=64, maximum=1_000_000)
    xs = [i / 100 for i in range(101)]
    vals = [s.value(x) for x in xs]
    assert vals == sorted(vals)


def test_bad_scale_is_rejected_with_the_setting_named():
    with pytest.raises(ValueError, match="site_factor_levels"):
        SiteFactorScale(levels=1, maximum=10)
    with pytest.raises(ValueError, match="site_factor_max"):
        SiteFactorScale(levels=4, maximum=2_147_483_646)


def test_only_changed_values_are_pushed_grouped_by_value():
    desired = {1: 100, 2: 100, 3: 200, 4: 0, 5: 200}
    current = {1: 100, 3: 0, 5: 300}
    p = plan_pushes(desired, current)
    # job 1 unchanged; job 4 is 0 and absent from current (Slurm's default) -> unchanged
    assert p.by_value == {100: [2], 200: [3, 5]}
    assert p.unchanged == 2
    assert p.jobs == 3
    assert p.assignments() == {2: 100, 3: 200, 5: 200}


def test_pushes_are_deterministic():
    desired = {9: 5, 3: 5, 7: 1}
    assert list(plan_pushes(desired, {}).by_value.items()) == [(1, [7]), (5, [3, 9])]


def test_scale_from_site_config():
    cfg = load_config(ROOT / "site-configs" / "testbed.toml")
    s = SiteFactorScale.from_config(cfg)
    assert s.levels == cfg.prioritizer.site_factor_levels
    assert s.value(1.0) == cfg.prioritizer.site_factor_max


def test_a_push_limit_takes_the_top_of_the_queue_first_and_defers_the_rest():
    desired = {1: 10, 2: 50, 3: 30, 4: 0, 5: 20}
    current = {4: 90}  # job 4 holds a high value it must lose: near the top, so it goes early
    p = plan_pushes(desired, current, limit=3)
    assert p.assignments() == {4: 0, 2: 50, 3: 30} and p.deferred == 2
    # the next cycle, with those pushed, takes the rest
    nxt = plan_pushes(desired, {**current, **p.assignments()}, limit=3)
    assert nxt.assignments() == {5: 20, 1: 10} and nxt.deferred == 0 and nxt.unchanged == 3
    assert plan_pushes(desired, current).deferred == 0  # no limit: everything at once


def test_site_factors_map_each_score_as_the_scale_does_edges_included():
    scale = SiteFactorScale(levels=64, maximum=100_000)
    scores = [
        0.0,
        1.0,
        0.5,
        0.49999,
        1e-9,
        1.5,
        -0.2,
        float("nan"),
        float("inf"),
        float("-inf"),
        *(i / 997 for i in range(998)),
    ]
    got = site_factors(dict(enumerate(scores)), scale)
    assert got == {i: scale.value(s) for i, s in enumerate(scores)}
