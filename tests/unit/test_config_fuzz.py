"""No config value ends in a traceback, in any reader.

The shipped site configs are mutated (keys replaced by random values of random types: inf, nan,
huge and negative numbers, strings, lists, tables; keys removed or added), written back as TOML
and read by ``load_config``. Each file either loads or raises :class:`ConfigError`; one that
loads also builds and runs everything that reads a config: the prioritizer (its policy, one
cycle on a small in-memory cluster, the loop and its timer), the filter service and its rules on
a few job descriptions, dlsubmit's renderer and ``slurm-dl config check``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from apscheduler.triggers.interval import IntervalTrigger
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from jobsubmit.service import FilterService
from prioritizer import Prioritizer
from prioritizer.loop import Loop
from slurm_dl.cli.main import app
from slurm_dl.core.config import SiteConfig
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import ConfigError
from slurm_dl.core.model import ClusterSnapshot, Job, JobClass, JobState, Node
from slurm_dl.dlsubmit.render import JobSpec, RenderError, render
from slurm_dl.core.rules import FilterContext, FilterDecision, decide
from slurm_dl.store import Store

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {
    p.stem: tomllib.loads(p.read_text()) for p in sorted((REPO / "site-configs").glob("*.toml"))
}
NOW = 1_800_000_000.0
EXAMPLES_RUN = int(os.environ.get("SLURM_DL_CONFIG_FUZZ_EXAMPLES", "200"))


# --- writing TOML (the standard library only reads it) --------------------------------------------
def _toml_str(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return (
            "{" + ", ".join(f"{_toml_str(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
        )
    raise TypeError(type(v))


def to_toml(data: dict[str, Any]) -> str:
    return "".join(f"{_toml_str(k)} = {_toml_value(v)}\n" for k, v in data.items())


def test_the_toml_writer_round_trips_every_example() -> None:
    for data in EXAMPLES.values():
        assert tomllib.loads(to_toml(data)) == data


# --- mutations -------------------------------------------------------------------------------------
def leaf_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in the document (tables, arrays and their members)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += leaf_paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += leaf_paths(v, prefix + (i,))
    return out


SPECIAL = [
    math.inf,
    -math.inf,
    math.nan,
    0,
    -1,
    0.0,
    -0.0,
    1e-300,
    1e308,
    2**63 - 1,
    -(2**63),
    10**30,
    "",
    "tiresias",
    "inf",
    "gpu[01-04]",
    "h100",
    "gpu",
    "USR2",
    "cancel",
    True,
    False,
    [],
    {},
]
scalars = st.one_of(
    st.sampled_from(SPECIAL),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10, max_value=1e6),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.integers(min_value=0, max_value=100),
    st.booleans(),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["name", "x", "weight", "las", "a"]), inner, max_size=3),
    ),
    max_leaves=6,
)


def same_type(old: Any) -> st.SearchStrategy:
    if isinstance(old, bool):
        return st.booleans()
    if isinstance(old, int):
        return st.one_of(
            st.integers(1, 64),
            st.integers(1, 64),
            st.integers(0, 10**6),
            st.integers(-(2**63), 2**63 - 1),
            st.sampled_from([old * 1000, -old]),
        )
    if isinstance(old, float):
        return st.one_of(
            st.floats(0.5, 100),
            st.floats(0.5, 100),
            st.floats(0, 1e7),
            st.floats(1e-9, 1e13),
            st.sampled_from([math.inf, math.nan, old * 1e6]),
        )
    if isinstance(old, str):
        return st.one_of(
            st.sampled_from(["gpu", "h100", "a100", "train", "gpu[01-02]", "", old + "x"]),
            st.text(max_size=8),
        )
    return values


@st.composite
def mutated_configs(draw) -> tuple[str, dict[str, Any], list[str]]:
    name = draw(st.sampled_from(sorted(EXAMPLES)))
    data = json.loads(json.dumps(EXAMPLES[name]))  # a deep copy
    done: list[str] = []
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(leaf_paths(data)))
        parent: Any = data
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "tweak", "tweak", "tweak", "delete", "add"]))
        old = parent[path[-1]]
        if action == "tweak":  # a value of the same type, often one a site could mean
            parent[path[-1]] = draw(same_type(old))
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent[path[-1]], dict):
            key = draw(
                st.sampled_from(["enabled", "weight", "grace_seconds", "bogus", "interval_seconds"])
            )
            parent[path[-1]][key] = draw(values)
        else:
            parent[path[-1]] = draw(values)
        done.append(f"{action} {'.'.join(map(str, path))}")
    return name, data, done


# --- what reads a config ---------------------------------------------------------------------------
@dataclasses.dataclass
class PushResult:
    updated: int
    calls: int
    missing: tuple[int, ...] = ()


class SmallCluster:
    """The backend calls one cycle makes, over two nodes of the config's first node group."""

    def __init__(self, cfg: SiteConfig) -> None:
        g = cfg.node_groups[0]
        names = g.node_names[:2]
        self.nodes = [
            Node(n, g.gpus_per_node, g.gpu_type, partitions=tuple(g.partitions)) for n in names
        ]
        part = g.partitions[0] if g.partitions else cfg.default_partition
        full = g.gpus_per_node
        self.jobs = [
            Job(
                1,
                user="u1",
                account="nlp",
                num_gpus=full,
                partition=part,
                submit_time=NOW - 4000,
                state=JobState.RUNNING,
                start_time=NOW - 3000,
                nodes=(names[0],),
                time_limit=7200.0,
            ),
            Job(
                2,
                user="u2",
                account="vision",
                num_gpus=1,
                partition=part,
                submit_time=NOW - 100,
                job_class=JobClass.INTERACTIVE,
                deadline=NOW + 900.0,
            ),
            Job(
                3,
                user="u3",
                account="students",
                num_gpus=full,
                partition=part,
                submit_time=NOW - 50,
                job_class=JobClass.SWEEP,
                time_limit=3600.0,
            ),
        ]
        if len(names) > 1:
            self.jobs.append(
                Job(
                    4,
                    user="u2",
                    account="vision",
                    num_gpus=full,
                    partition=part,
                    submit_time=NOW - 900,
                    state=JobState.RUNNING,
                    start_time=NOW - 800,
                    nodes=(names[1],),
                )
            )
        self.now = NOW

    def snapshot(self) -> ClusterSnapshot:
        used = {
            n: sum(j.num_gpus for j in self.jobs if j.state.active and n in j.nodes)
            for n in (x.name for x in self.nodes)
        }
        nodes = [dataclasses.replace(n, gpus_used=min(n.gpus, used[n.name])) for n in self.nodes]
        return ClusterSnapshot(
            taken_at=self.now, jobs=[dataclasses.replace(j) for j in self.jobs], nodes=nodes
        )

    def set_site_factor(self, values: dict[int, int]) -> PushResult:
        return PushResult(updated=len(values), calls=len(set(values.values())))

    def signal_batch(self, job_id: int, signal: str) -> None:
        pass

    def requeue(self, job_id: int) -> None:
        pass


JOB_DESCS = [
    {"tres_per_job": "gres:gpu:1", "time_limit": 60, "user_name": "u1"},
    {
        "tres_per_node": "gres:gpu:h100:8",
        "min_nodes": 2,
        "comment": "dl:class=train dl:ckpt=1",
        "user_name": "u2",
    },
    {
        "tres_per_job": "gres:gpu:2",
        "comment": f"dl:class=train dl:deadline={int(NOW) + 7200}",
        "user_name": "u3",
    },
    {"tres_per_job": "gres:gpu:1", "comment": "dl:class=interactive", "partition": "gpu"},
    {"time_limit": 30},
]


def exercise(path: Path, cfg: SiteConfig) -> None:
    """Build and run everything that reads ``cfg``; any exception fails the test."""
    cluster = SmallCluster(cfg)
    with tempfile.TemporaryDirectory(prefix="cfgfuzz-") as tmp:
        prio = Prioritizer(cfg, cluster, Store(f"sqlite:///{tmp}/prio.db"))
        prio.run_cycle()
        cluster.now += cfg.prioritizer.interval_seconds
        prio.run_cycle()
        loop = Loop(prio)
        IntervalTrigger(seconds=loop.interval_s)  # what Loop.run schedules the cycle with
        loop.backoff.failed(0.0)
        loop.backoff.failed(1.0)
    service = FilterService(
        path, clock=lambda: NOW
    )  # reads the file itself, as `filter serve` does
    for job in JOB_DESCS:
        assert isinstance(decide(job, service.config, FilterContext(now=NOW)), FilterDecision)
        assert service.handle_line(
            json.dumps({"v": 1, "submit_uid": 1000, "job": job}).encode()
        ).endswith(b"\n")
    try:
        render(JobSpec(kind="train", command=("python3", "train.py"), gpus=1), cfg)
    except RenderError:
        pass  # a clean refusal (e.g. no partition fits) is fine; a traceback is not


@settings(max_examples=EXAMPLES_RUN, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_configs())
def test_any_config_loads_cleanly_or_is_refused_and_every_reader_agrees(case) -> None:
    name, data, done = case
    with tempfile.TemporaryDirectory(prefix="cfgfuzz-") as tmp:
        path = Path(tmp) / f"{name}.toml"
        path.write_text(to_toml(data), encoding="utf-8")
        try:
            cfg = load_config(path)
        except ConfigError as e:
            event("refused")
            assert e.problems and all(isinstance(p, str) and p for p in e.problems)
            cfg = None
        else:
            event("loaded")
            exercise(path, cfg)
        res = CliRunner().invoke(app, ["config", "check", str(path)])
        assert res.exit_code == (0 if cfg is not None else 1), (done, res.output)
        assert (
            "Traceback" not in res.output
            and res.exception is None
            or isinstance(res.exception, SystemExit)
        )


@pytest.mark.parametrize(
    "key",
    [
        ("prioritizer", "interval_seconds"),
        ("policy", "deadline", "boost_slack_minutes"),
        ("preemption", "grace_seconds"),
        ("policy", "fairshare", "half_life_hours"),
        ("preemption", "min_runtime_seconds"),
        ("telemetry", "sample_seconds"),
        ("policy", "qssf", "default_gpu_s"),
    ],
)
@pytest.mark.parametrize("value", [math.inf, math.nan, -math.inf, 1e300])
def test_non_finite_and_huge_numbers_are_refused_with_key_value_and_range(
    tmp_path, key, value
) -> None:
    data = json.loads(json.dumps(EXAMPLES["testbed"]))
    table = data
    for part in key[:-1]:
        table = table.setdefault(part, {})
    table[key[-1]] = value
    path = tmp_path / "site.toml"
    path.write_text(to_toml(data))  # written as TOML's own inf / nan / -inf
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    (p,) = ei.value.problems
    assert p.startswith(f"{'.'.join(key)}: got {value!r}; allowed: a finite number "), p
    res = CliRunner().invoke(app, ["config", "check", str(path)])
    assert res.exit_code == 1 and p in res.output.replace("\n", "\n")


SWEEP = [math.inf, -math.inf, math.nan, 1e300, -1, 0, 10**30, True, "5", [1.0]]


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_number_of_every_example_swept_through_bad_values(tmp_path, example) -> None:
    """Each number in the example (list items and table values too), one at a time, set to each of
    SWEEP: refused with its key path in the message, or loaded and usable by every reader."""
    base = EXAMPLES[example]
    paths = [p for p in leaf_paths(base) if _get(base, p).__class__ in (int, float)]
    assert len(paths) >= 10
    path_file = tmp_path / "site.toml"
    tried = loaded = 0
    for path in paths:
        for value in SWEEP:
            data = json.loads(json.dumps(base))
            parent = _get(data, path[:-1])
            parent[path[-1]] = value
            path_file.write_text(to_toml(data))
            tried += 1
            try:
                cfg = load_config(path_file)
            except ConfigError as e:
                leaf, table = _loc(path), _loc(path[:-1])
                if (
                    not isinstance(value, (int, float))
                    or isinstance(value, bool)
                    or not math.isfinite(value)
                ):
                    assert [p for p in e.problems if p.startswith(f"{leaf}: got ")], (
                        path,
                        value,
                        e.problems,
                    )
                else:  # in range for the key alone, yet refused by a rule on its table or list
                    assert [p for p in e.problems if p.startswith((leaf, table))], (
                        path,
                        value,
                        e.problems,
                    )
                continue
            loaded += 1
            exercise(path_file, cfg)
    assert tried == len(paths) * len(SWEEP) and 0 < loaded < tried
    print(f"{example}: {tried} files, {loaded} loaded")


def _get(node: Any, path: tuple) -> Any:
    for part in path:
        node = node[part]
    return node


def _loc(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


READERS = [
    ["config", "check", "{f}"],
    ["filter", "serve", "--config", "{f}", "--socket", "{d}/filter.sock"],
    ["filter", "check", "--config", "{f}", "--", "--gpus=1"],
    [
        "prioritizer",
        "once",
        "--init",
        "--dry-run",
        "--config",
        "{f}",
        "--db",
        "sqlite:///{d}/ledger.db",
    ],
    ["explain", "1", "--config", "{f}", "--db", "sqlite:///{d}/ledger.db"],
]


@pytest.mark.parametrize(
    "edit",
    [
        ("[prioritizer]\ninterval_seconds = 3", "[prioritizer]\ninterval_seconds = inf"),
        ("boost_slack_minutes = 30", "boost_slack_minutes = inf"),
        ("grace_seconds = 10", "grace_seconds = nan"),
        ("half_life_hours = 1.0", "half_life_hours = inf"),
        ("timeout_ms = 200", 'timeout_ms = "200"'),
    ],
)
def test_every_reader_refuses_a_bad_file_with_the_same_message(tmp_path, edit) -> None:
    """config check, the filter service and the prioritizer read through one function: the same
    one-line problem, exit 1, no traceback; the file given through $SLURM_DL_CONFIG as well."""
    text = (REPO / "site-configs" / "testbed.toml").read_text()
    assert edit[0] in text
    bad = tmp_path / "site.toml"
    bad.write_text(text.replace(edit[0], edit[1]))
    messages = set()
    for argv in READERS:
        for via_env in (False, True):
            args = [a.format(f=bad, d=tmp_path) for a in argv]
            env = {}
            if via_env and "--config" in args:
                i = args.index("--config")
                env["SLURM_DL_CONFIG"] = args.pop(i + 1)
                args.pop(i)
            res = CliRunner().invoke(app, args, env=env)
            assert res.exit_code == 1, (args, res.output)
            assert "Traceback" not in res.output and isinstance(res.exception, SystemExit), (
                args,
                res.output,
            )
            messages.add(res.output.strip().splitlines()[-1])
    assert len(messages) == 1, messages
    (line,) = messages
    assert line.strip().startswith("- ") and "allowed:" in line


def number_fields() -> list[tuple[str, list]]:
    """Every int/float key of the site config (list items and table values too) with the
    constraint objects declared on it."""
    from typing import Annotated, Union, get_args, get_origin
    from types import UnionType

    from pydantic import BaseModel

    out: list[tuple[str, list]] = []

    def strip(ann, meta):
        if get_origin(ann) is Annotated:
            base, *extra = get_args(ann)
            for m in extra:
                meta = meta + list(getattr(m, "metadata", [m]))
            ann = base
        if get_origin(ann) in (Union, UnionType):
            args = [a for a in get_args(ann) if a is not type(None)]
            if len(args) == 1:
                return strip(args[0], meta)
        return ann, meta

    def walk(model, prefix: str) -> None:
        for name, info in model.model_fields.items():
            ann, meta = strip(info.annotation, list(info.metadata))
            key = prefix + name
            if get_origin(ann) in (list, dict):
                ann, meta = strip(get_args(ann)[-1], [])
                key += "[]"
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, key + ".")
            elif ann in (int, float):
                out.append((key, meta))

    walk(SiteConfig, "")
    return out


def test_every_number_in_the_config_has_a_finite_range_and_no_coercion() -> None:
    """A key added later without num() (no upper end, or accepting true/"5") fails here."""
    fields = number_fields()
    assert len(fields) >= 45
    for key, meta in fields:
        kinds = {type(m).__name__ for m in meta}
        assert "Le" in kinds and kinds & {"Ge", "Gt"}, (
            f"{key}: declare both ends of its range with num()"
        )
        assert any(getattr(m, "strict", False) for m in meta), (
            f"{key}: declare it with num() (strict)"
        )
    assert SiteConfig.model_config.get("allow_inf_nan") is False
