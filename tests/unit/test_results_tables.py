"""docs/results.md's as-deployed tables are the benchmark's: each is written from the measured
record (benchmarks/results/as_deployed.json) by benchmarks/results_tables.py, so a figure there
cannot drift from what bench_as_deployed.py printed."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import results_tables  # noqa: E402

RESULTS = REPO / "docs" / "results.md"


def record() -> dict:
    return json.loads(results_tables.RECORD.read_text())


def test_the_published_tables_are_the_recorded_measurement():
    text = RESULTS.read_text()
    assert results_tables.rewrite(text, record()) == text, (
        "docs/results.md's as-deployed tables differ from benchmarks/results/as_deployed.json: "
        "run `python benchmarks/results_tables.py --write docs/results.md` (or the benchmark "
        "with --write-results)"
    )


def test_every_part_has_its_block_and_is_measured_with_the_defaults():
    doc = record()
    assert doc["config"] == "the shipped defaults (no --config)"
    for name in results_tables.PARTS:
        assert name in doc
        assert results_tables.block(name).search(RESULTS.read_text())


def test_a_new_measurement_rewrites_only_its_own_table():
    text = RESULTS.read_text()
    doc = copy.deepcopy(record())
    doc["fairness"]["policies"]["las"]["avg_jct_s"] = 36_000
    only = {"fairness": doc["fairness"]}
    new = results_tables.rewrite(text, only)
    assert "| `las` | 10.00 h |" in new
    changed = [a for a, b in zip(text.splitlines(), new.splitlines()) if a != b]
    assert len(changed) == 1 and changed[0].startswith("| `las` |")
    assert results_tables.rewrite(new, only) == new  # idempotent


def test_a_file_without_the_block_is_an_error():
    with pytest.raises(ValueError, match="as-deployed:types"):
        results_tables.rewrite("no tables here", {"types": record()["types"]})


def test_the_record_merges_parts(tmp_path):
    rec = tmp_path / "r.json"
    results_tables.merge_record({"config": "c", "types": {"x": 1}}, rec)
    got = results_tables.merge_record({"fairness": {"y": 2}}, rec)
    assert got == {"config": "c", "types": {"x": 1}, "fairness": {"y": 2}}
    assert json.loads(rec.read_text()) == got
