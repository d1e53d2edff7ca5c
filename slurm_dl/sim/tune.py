"""``slurm-dl tune``: the pure parts of searching site-config settings on a site's history.

A setting is named by its dotted path in the site config (``policy.las.starvation_factor``);
its candidate values are separated by ``:`` and a list value's items by ``,``
(``policy.las.thresholds_gpu_s=3600,36000:100000,3000000``). Every candidate is checked by the
site config's own validation before any replay starts. The history is split in time: the
search runs on the earlier part, the proposal is then judged on the later part, which the
search never saw (out of sample).
"""

from __future__ import annotations

import copy
import difflib
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.config import SiteConfig, parse_config
from ..core.errors import ConfigError, SlurmDLError

MIN_JOBS_PER_PART = 50
"""A part of the history with fewer jobs than this says nothing about a setting."""

# objective name -> (summary key, +1 minimise / -1 maximise, what it is in words)
OBJECTIVES: dict[str, tuple[str, int, str]] = {
    "avg_jct": ("avg_jct_s", 1, "average JCT (s)"),
    "median_jct": ("median_jct_s", 1, "median JCT (s)"),
    "p99_jct": ("p99_jct_s", 1, "99th percentile JCT (s)"),
    "avg_queue": ("avg_queue_s", 1, "average wait (s)"),
    "worst_rho": ("max_rho", 1, "worst finish-time fairness rho"),
    "deadline_miss": ("deadline_miss_rate", 1, "strict deadlines missed (fraction)"),
    "utility": ("utility_fraction", -1, "deadline utility earned (fraction)"),
    "best_effort_jct": ("best_effort_avg_jct_s", 1, "best-effort average JCT (s)"),
}
_OPS = ("<=", ">=", "<", ">")


class TuneError(SlurmDLError, ValueError):
    """A tune request that cannot run: one line that says what and where."""


@dataclass(frozen=True)
class Param:
    """One setting to search: its dotted ``key``, the candidate values as typed (``raw``) and
    as the config takes them (``values``)."""

    key: str
    raw: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Constraint:
    key: str  # summary key
    name: str  # as the user wrote it
    op: str
    bound: float

    def holds(self, summary: Mapping[str, Any]) -> bool:
        v = summary.get(self.key)
        if v is None or not isinstance(v, (int, float)) or math.isnan(v):
            return False
        return {
            "<=": v <= self.bound,
            ">=": v >= self.bound,
            "<": v < self.bound,
            ">": v > self.bound,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.name} {self.op} {self.bound:g}"


def flat_keys(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every setting of a config dump by its dotted path (tables are walked, values kept)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flat_keys(v, path + "."))
        else:
            out[path] = v
    return out


def _scalar(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("none", "off"):
        return None
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def parse_param(text: str, known: Mapping[str, Any]) -> Param:
    """``KEY=V1:V2...`` checked against the config's settings ``known`` (dotted path → current
    value: a list-valued setting takes ``a,b`` lists; a single item becomes a one-item list)."""
    key, eq, rest = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise TuneError(
            f"--param {text!r}: write KEY=VALUE[:VALUE...], e.g. policy.las.starvation_factor=0:4"
        )
    if key not in known:
        close = difflib.get_close_matches(key, list(known), n=1)
        hint = f"did you mean {close[0]}?" if close else "keys are the site config's dotted paths"
        raise TuneError(f"--param {key}: no such setting in the site config;\n  {hint}")
    raw = tuple(p.strip() for p in rest.split(":"))
    if not rest.strip() or any(not p for p in raw):
        raise TuneError(f"--param {key}: an empty value in {rest!r}; give values separated by ':'")
    if len(set(raw)) < len(raw):
        raise TuneError(f"--param {key}: a value is given twice in {rest!r}")
    is_list = isinstance(known[key], (list, tuple))
    values = tuple(
        [_scalar(x) for x in p.split(",")] if is_list or "," in p else _scalar(p) for p in raw
    )
    return Param(key, raw, values)


def parse_objective(name: str) -> tuple[str, int, str]:
    if name not in OBJECTIVES:
        raise TuneError(f"--objective {name!r}: allowed: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def parse_constraint(text: str) -> Constraint:
    for op in _OPS:
        name, found, bound = text.partition(op)
        if found:
            name = name.strip()
            if name not in OBJECTIVES:
                raise TuneError(
                    f"--constraint {text!r}: {name!r} is not a figure; allowed: {', '.join(OBJECTIVES)}"
                )
            try:
                b = float(bound)
            except ValueError:
                raise TuneError(
                    f"--constraint {text!r}: {bound.strip()!r} is not a number"
                ) from None
            return Constraint(OBJECTIVES[name][0], name, op, b)
    raise TuneError(f"--constraint {text!r}: write FIGURE<=NUMBER, e.g. worst_rho<=1.2")


def _set(data: dict, key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value  # None: the setting's own "off" (left out of the TOML written)


@dataclass(frozen=True)
class Point:
    """One candidate: a value per parameter (in the parameters' order)."""

    values: tuple[Any, ...]
    label: str
    settings: dict = field(compare=False, hash=False)  # dotted key -> value


def label_of(params: Sequence[Param], values: Sequence[Any]) -> str:
    def show(v):
        if isinstance(v, list):
            return ",".join(f"{x:.12g}" if isinstance(x, (int, float)) else str(x) for x in v)
        return (
            "none"
            if v is None
            else (
                f"{v:.12g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
            )
        )

    return " ".join(f"{p.key.rsplit('.', 1)[-1]}={show(v)}" for p, v in zip(params, values))


def candidate_config(
    base: Mapping[str, Any], params: Sequence[Param], values: Sequence[Any], base_dir=None
) -> SiteConfig:
    """The site config ``base`` (its TOML data) with each parameter set to its value, validated;
    a value the config refuses is a :class:`TuneError` naming the parameter."""
    data = copy.deepcopy(dict(base))
    for p, v in zip(params, values):
        _set(data, p.key, v)
    try:
        return parse_config(data, "tune", base_dir)
    except ConfigError as e:
        shown = ", ".join(
            f"{p.key}={r}"
            for p, v in zip(params, values)
            for r, pv in zip(p.raw, p.values)
            if pv == v
        )
        raise TuneError(
            f"--param {shown}: the site config refuses it:\n"
            + "\n".join(f"  {p}" for p in e.problems)
        ) from None


def check_candidates(
    base: Mapping[str, Any], params: Sequence[Param], base_dir=None
) -> list[Point]:
    """Every point of the grid (the product of the parameters' values), each validated; one
    value at a time first, so a refused value is named on its own."""
    for i, p in enumerate(params):
        for v in p.values:
            candidate_config(base, [p], [v], base_dir)
    points = []
    for combo in itertools.product(*(p.values for p in params)):
        candidate_config(
            base, params, combo, base_dir
        )  # combinations too (e.g. two lists that must agree)
        points.append(
            Point(
                tuple(map(_freeze, combo)),
                label_of(params, combo),
                {p.key: v for p, v in zip(params, combo)},
            )
        )
    return points


def _freeze(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def split_time(
    submits: Sequence[float], fraction: float, min_jobs: int = MIN_JOBS_PER_PART
) -> tuple[float, int, int]:
    """The time that splits the history: ``fraction`` of its submit-time span lies before it;
    (time, jobs before, jobs from it on). Fewer than ``min_jobs`` on either side is a
    :class:`TuneError`."""
    if not 0.0 < fraction < 1.0:
        raise TuneError(f"--split {fraction:g}: give a fraction between 0 and 1, e.g. 0.5")
    if min_jobs < 1:
        raise TuneError(f"--min-jobs {min_jobs}: give at least 1")
    if not submits:
        raise TuneError("the history holds no jobs")
    lo, hi = min(submits), max(submits)
    cut = lo + (hi - lo) * fraction
    before = sum(1 for t in submits if t < cut)
    after = len(submits) - before
    if before < min_jobs or after < min_jobs:
        raise TuneError(
            f"the history is too short to split: {before} jobs before the split, {after} "
            f"after;\n  each part needs {min_jobs} (a longer window, another --split, or a "
            "lower --min-jobs)"
        )
    return cut, before, after


def score(summary: Mapping[str, Any], key: str, sign: int) -> float:
    v = summary.get(key)
    if v is None or not isinstance(v, (int, float)) or math.isnan(v):
        return math.inf
    return sign * float(v)


def _num_list(v: Any) -> Any:
    """A value as the config holds it (numbers as floats), to compare with its current one."""
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
        return tuple(float(x) for x in v)
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else _freeze(v)


def changed(settings: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The ``settings`` (dotted key → value) that differ from the ``current`` ones."""
    return {k: v for k, v in settings.items() if _num_list(v) != _num_list(current.get(k))}


def choose(
    results: Mapping[Point, Mapping[str, Any]],
    key: str,
    sign: int,
    constraints: Sequence[Constraint] = (),
    current: Mapping[str, Any] | None = None,
) -> tuple[Point | None, list[Point]]:
    """The best point (lowest signed objective among those meeting every constraint; ties: the
    one changing fewest of the ``current`` settings, then the first in grid order) and every
    point ranked. ``None`` when no point meets them."""
    order = list(results)
    ranked = sorted(
        order,
        key=lambda p: (
            score(results[p], key, sign),
            len(changed(p.settings, current)) if current else 0,
            order.index(p),
        ),
    )
    ok = [p for p in ranked if all(c.holds(results[p]) for c in constraints)]
    return (ok[0] if ok else None), ranked


def sensitivity(
    params: Sequence[Param], results: Mapping[Point, Mapping[str, Any]], key: str, sign: int
) -> dict[str, list[tuple[str, float]]]:
    """Per parameter, per value: the mean objective over every point with that value (the
    marginal over the other parameters); its spread says how much the setting matters."""
    out: dict[str, list[tuple[str, float]]] = {}
    for i, p in enumerate(params):
        rows = []
        for raw, v in zip(p.raw, p.values):
            vs = [
                sign * score(s, key, sign)
                for pt, s in results.items()
                if pt.values[i] == _freeze(v)
            ]
            vs = [x for x in vs if math.isfinite(x)]
            rows.append((raw, sum(vs) / len(vs) if vs else math.nan))
        out[p.key] = rows
    return out


def proposed_text(current_text: str, settings: Mapping[str, Any]) -> str:
    """The current config file's text with each setting changed (comments and layout kept)."""
    import tomlkit

    doc = tomlkit.parse(current_text)
    for key, value in settings.items():
        parts = key.split(".")
        node = doc
        for p in parts[:-1]:
            if p not in node:
                node[p] = tomlkit.table()
            node = node[p]
        if value is None:
            if parts[-1] in node:
                del node[parts[-1]]
        else:
            node[parts[-1]] = list(value) if isinstance(value, tuple) else value
    return tomlkit.dumps(doc)


def unified_diff(before: str, after: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(True),
            after.splitlines(True),
            f"{name} (current)",
            f"{name} (proposed)",
        )
    )


def known_settings(base: Mapping[str, Any], base_dir=None) -> dict[str, Any]:
    """Dotted path → value of every setting the config has (its defaults included)."""
    try:
        cfg = parse_config(dict(base), "tune", base_dir)
    except ConfigError as e:
        raise TuneError(str(e)) from None
    return flat_keys(cfg.model_dump(mode="python", warnings=False))
