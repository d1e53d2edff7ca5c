"""How fast a job runs on each GPU type: the throughput model the filter, the prioritizer and
the simulator share (pure: plain data in, numbers out).

Three kinds of evidence, the most specific first:

1. **learnt** — runs of the same user and job name on different types (``learn``, plain
   :class:`RunRecord` s): a job's work is the same, so its speed on a type is the inverse of
   its median run time there. Used only for the types with at least ``min_samples`` runs of
   that (user, name), and only when two or more types have them (one type alone gives no ratio);
2. **matrix** — relative throughputs per job kind (``[throughput] matrix``, a CSV
   ``kind,TYPE1,TYPE2,...``; or Gavel's measurements, :func:`matrix_from_gavel`). A job's kind
   is its ``model``, else its class (``train``, ``inference``, …), else the row ``*``. A row
   ``KIND@N`` holds the throughputs of N-GPU jobs of that kind: a job of g GPUs takes the row of
   the largest N ≤ g, else the plain ``KIND`` row;
3. **default** — the site's per-type speed (``[[gpu_types]] speed``, 1.0 = reference).

Every value is on the site default scale: a learnt set or a matrix row is scaled so that its
geometric mean over the types it covers equals the defaults' there. Only the ratios between
types for one job carry information (a row in steps per second works as well as one in
relative units), and types a row does not cover keep comparable defaults.

``type_speed`` is the site default alone: what the prioritizer and the simulator normalise
charges by (service × speed), so a GPU-hour on a slow type costs less than one on a fast type.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

LEARNT, MATRIX, DEFAULT = "learnt", "matrix", "default"
ANY_KIND = "*"
MAX_SPEED = 1e12
_TYPE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
Matrix = dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True)
class Speed:
    """A job's speed on one GPU type: ``value`` on the site default scale, which evidence
    gave it (``learnt``, ``matrix`` or ``default``) and how many runs were behind it."""

    value: float
    source: str
    samples: int = 0


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run: who, which job name, on which GPU type, how long it ran."""

    user: str
    name: str
    gpu_type: str
    run_time_s: float


def _valid_speed(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and 0 < x <= MAX_SPEED


def _geo_mean(xs: Iterable[float]) -> float:
    vals = list(xs)
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def parse_matrix_csv(text: str, source: str = "matrix") -> Matrix:
    """``kind,TYPE1,TYPE2,...`` rows of positive finite throughputs → {kind: {type: value}}.
    Every cell must hold a number; a ValueError names the line and the bad cell."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(c.strip() for c in rows[0]):
        raise ValueError(
            f"{source}: empty; allowed: a header kind,TYPE1,TYPE2,... and one row per kind"
        )
    head = [c.strip() for c in rows[0]]
    types = head[1:]
    if not types:
        raise ValueError(f"{source}, line 1: no GPU type columns; allowed: kind,TYPE1,TYPE2,...")
    for t in types:
        if not _TYPE_NAME.match(t):
            raise ValueError(
                f"{source}, line 1: GPU type {t!r} is not a type name (letters, digits, _ . -)"
            )
    if len(set(types)) != len(types):
        raise ValueError(f"{source}, line 1: a GPU type is named twice: {types}")
    out: Matrix = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        kind = row[0].strip()
        if not kind:
            raise ValueError(f"{source}, line {line}: empty kind")
        if kind in out:
            raise ValueError(f"{source}, line {line}: kind {kind!r} given twice")
        if len(row) != len(head):
            raise ValueError(f"{source}, line {line}: {len(row)} cells; the header has {len(head)}")
        vals = {}
        for t, cell in zip(types, row[1:]):
            try:
                x = float(cell)
            except ValueError:
                x = math.nan
            if not _valid_speed(x):
                raise ValueError(
                    f"{source}, line {line}: {kind} on {t}: {cell.strip()[:40]!r}; "
                    f"allowed: a throughput above 0 and at most {MAX_SPEED:g}"
                )
            vals[t] = x
        out[kind] = vals
    if not out:
        raise ValueError(f"{source}: no rows; allowed: one row per kind after the header")
    return out


def matrix_from_gavel(
    data: Mapping[str, Any], types: Sequence[str] | None = None, source: str = "throughputs"
) -> Matrix:
    """Gavel's ``simulation_throughputs.json`` (``d[type]["('MODEL', N)"]["null"]`` = steps/s of
    an N-GPU job alone) → rows ``MODEL@N`` over ``types`` (default: every type without
    ``_unconsolidated``). An entry of 0 (the model does not fit those GPUs: ResNet-50 at batch
    size 128 on 2–8 K80s) leaves that row out; such jobs take the next smaller row."""
    if not isinstance(data, Mapping) or not data:
        raise ValueError(f"{source}: not a JSON object of GPU types")
    names = list(types) if types is not None else [t for t in data if "_unconsolidated" not in t]
    missing = [t for t in names if t not in data]
    if missing or not names:
        raise ValueError(f"{source}: no GPU type {missing or names}; it has {sorted(data)}")
    out: Matrix = {}
    keys = data[names[0]]
    if not isinstance(keys, Mapping):
        raise ValueError(f"{source}: {names[0]}: not an object of models")
    for key in keys:
        try:
            model, n = ast.literal_eval(key)
            n = int(n)
        except (ValueError, SyntaxError, TypeError):
            raise ValueError(
                f"{source}: {names[0]}: key {key[:60]!r} is not ('MODEL', N)"
            ) from None
        row = {}
        for t in names:
            try:
                x = data[t][key]["null"]
            except (KeyError, TypeError):
                raise ValueError(
                    f"{source}: {t}: no entry {key!r} with a 'null' throughput"
                ) from None
            if (
                isinstance(x, bool)
                or not isinstance(x, (int, float))
                or not math.isfinite(x)
                or x < 0
            ):
                raise ValueError(f"{source}: {t}: {key}: throughput {x!r} is not a number ≥ 0")
            row[t] = float(x)
        if all(v > 0 for v in row.values()):
            out[f"{model}@{n}"] = row
    if not out:
        raise ValueError(f"{source}: no model has a throughput on every type of {names}")
    return out


def kinds_of(matrix: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The matrix's kinds without their ``@N`` suffix, in first-seen order (to draw from)."""
    return list(dict.fromkeys(k.rsplit("@", 1)[0] if _split_n(k)[1] else k for k in matrix))


def _split_n(kind: str) -> tuple[str, int | None]:
    base, sep, n = kind.rpartition("@")
    if sep and n.isdigit():
        return base, int(n)
    return kind, None


def _scaled(values: Mapping[str, float], defaults: Mapping[str, float]) -> dict[str, float]:
    """``values`` scaled onto the default scale (equal geometric means over their types)."""
    known = [t for t in values if t in defaults]
    if not known:
        return {}
    f = _geo_mean(defaults[t] for t in known) / _geo_mean(values[t] for t in known)
    return {t: values[t] * f for t in known}


class ThroughputModel:
    """A job's relative speed on each GPU type (see the module docstring).

    ``type_speeds``: the site default per type, in the site's type order (that order breaks
    ties); ``matrix``: {kind: {type: throughput}}; ``min_samples``: learnt runs per type
    needed. Immutable: :meth:`learn` returns a new model."""

    def __init__(
        self,
        type_speeds: Mapping[str, float],
        matrix: Mapping[str, Mapping[str, float]] | None = None,
        *,
        min_samples: int = 3,
        _learnt: Mapping | None = None,
    ) -> None:
        if not type_speeds:
            raise ValueError("a throughput model needs at least one GPU type")
        for t, v in type_speeds.items():
            if not _valid_speed(v):
                raise ValueError(
                    f"GPU type {t}: speed {v!r}; allowed: above 0 and at most {MAX_SPEED:g}"
                )
        if min_samples < 1:
            raise ValueError(f"min_samples: got {min_samples}; allowed: 1 or more")
        self._defaults = {str(t): float(v) for t, v in type_speeds.items()}
        self.types: tuple[str, ...] = tuple(self._defaults)
        self.min_samples = min_samples
        unknown = sorted({t for row in (matrix or {}).values() for t in row} - set(self.types))
        if unknown:
            raise ValueError(f"matrix: unknown GPU types {unknown}; allowed: {list(self.types)}")
        self._matrix = {k: dict(row) for k, row in (matrix or {}).items()}
        self._rows = {k: _scaled(row, self._defaults) for k, row in self._matrix.items()}
        self._by_n: dict[str, list[tuple[int, str]]] = {}
        for k in self._rows:
            base, n = _split_n(k)
            if n is not None:
                self._by_n.setdefault(base, []).append((n, k))
        for lst in self._by_n.values():
            lst.sort()
        # (user, name) -> {type: (median run time, runs)} for the types with enough runs
        self._learnt: dict[tuple[str, str], dict[str, tuple[float, int]]] = dict(_learnt or {})
        self._cache: dict = {}

    # --- construction ---------------------------------------------------------------------
    @classmethod
    def from_config(
        cls, config: Any, matrix: Mapping[str, Mapping[str, float]] | None = None
    ) -> "ThroughputModel":
        """The site config's ``[[gpu_types]] speed`` and ``[throughput]`` (its matrix, read at
        load, unless ``matrix`` is given)."""
        tp = getattr(config, "throughput", None)
        rows = matrix if matrix is not None else (tp.matrix_rows if tp is not None else None)
        return cls(
            {g.name: g.speed for g in config.gpu_types},
            rows,
            min_samples=tp.min_samples if tp is not None else 3,
        )

    @classmethod
    def from_matrix(
        cls,
        matrix: Mapping[str, Mapping[str, float]],
        types: Sequence[str] | None = None,
        *,
        min_samples: int = 3,
    ) -> "ThroughputModel":
        """Without site speeds: each type's default is the geometric mean over the rows of its
        throughput over the row's fastest (1.0: fastest for every kind)."""
        names = (
            list(types)
            if types is not None
            else list(dict.fromkeys(t for r in matrix.values() for t in r))
        )
        rows = [r for r in matrix.values() if all(t in r for t in names)]
        if not rows:
            raise ValueError(f"matrix: no row covers every type of {names}")
        defaults = {t: _geo_mean(r[t] / max(r[u] for u in names) for r in rows) for t in names}
        return cls(
            defaults,
            {k: {t: v for t, v in r.items() if t in defaults} for k, r in matrix.items()},
            min_samples=min_samples,
        )

    def learn(self, history: Iterable[RunRecord | tuple]) -> "ThroughputModel":
        """A model that also knows the speedups in ``history`` (records or ``(user, name,
        gpu_type, run_time_s)`` tuples; types the model does not know and run times that are
        not positive and finite are left out)."""
        runs: dict[tuple[str, str], dict[str, list[float]]] = {}
        for r in history:
            user, name, gtype, rt = (
                (r.user, r.name, r.gpu_type, r.run_time_s) if isinstance(r, RunRecord) else r
            )
            if (
                gtype in self._defaults
                and isinstance(rt, (int, float))
                and math.isfinite(rt)
                and rt > 0
            ):
                runs.setdefault((user, name), {}).setdefault(gtype, []).append(float(rt))
        learnt = dict(self._learnt)
        for key, by_type in runs.items():
            enough = self._enough(by_type)
            if enough is not None:
                learnt[key] = enough
        return ThroughputModel(
            self._defaults, self._matrix, min_samples=self.min_samples, _learnt=learnt
        )

    def relearn(
        self, user: str, name: str, run_times: Mapping[str, Sequence[float]]
    ) -> "ThroughputModel":
        """A model whose speedups for ``(user, name)`` are those its runs teach (none when
        they teach none): ``run_times`` {GPU type: the run times there, positive and finite}
        are all its runs, and the answer is what :meth:`learn` over a history holding them
        gives that job, without reading the other jobs' runs again (a replay that learns as
        runs finish). The others' speedups are kept; ``self`` when nothing changes."""
        key = (user, name)
        enough = self._enough({t: v for t, v in run_times.items() if t in self._defaults})
        if enough == self._learnt.get(key):
            return self
        new = object.__new__(ThroughputModel)  # the same model but this job's speedups
        new.__dict__.update(self.__dict__)
        new._learnt = dict(self._learnt)
        if enough is None:
            del new._learnt[key]
        else:
            new._learnt[key] = enough
        new._cache = {}
        return new

    def _enough(self, by_type: Mapping[str, list[float]]) -> dict | None:
        """{type: (median run time, runs)} of the types with ``min_samples`` runs, when two
        or more have them (one type alone gives no ratio); else None."""
        enough = {
            t: (statistics.median(v), len(v))
            for t, v in by_type.items()
            if len(v) >= self.min_samples
        }
        return enough if len(enough) >= 2 else None

    # --- questions ------------------------------------------------------------------------
    def type_speed(self, gpu_type: str) -> float:
        """The site default speed of ``gpu_type`` (what charges are normalised by)."""
        try:
            return self._defaults[gpu_type]
        except KeyError:
            raise ValueError(
                f"unknown GPU type {gpu_type!r}; allowed: {', '.join(self.types)}"
            ) from None

    def row_of(self, job: Any) -> str | None:
        """The matrix row that describes ``job`` (see the module docstring), or None."""
        model = getattr(job, "model", None)
        g = getattr(job, "num_gpus", 1) or 1
        for kind in (model, getattr(getattr(job, "job_class", None), "value", None), ANY_KIND):
            if not kind:
                continue
            best = None
            for n, k in self._by_n.get(kind, ()):
                if n <= g:
                    best = k
            if best is not None:
                return best
            if kind in self._rows:
                return kind
        return None

    def speeds(self, job: Any) -> dict[str, Speed]:
        """``job``'s :class:`Speed` on every type, in the site's type order."""
        row_key = self.row_of(job)
        learnt = (
            self._learnt.get((getattr(job, "user", ""), getattr(job, "name", "")))
            if self._learnt
            else None
        )
        ck = (row_key, id(learnt) if learnt else None)
        got = self._cache.get(ck)
        if got is not None:
            return dict(got)
        row = self._rows.get(row_key, {}) if row_key is not None else {}
        base = {
            t: Speed(row[t], MATRIX) if t in row else Speed(v, DEFAULT)
            for t, v in self._defaults.items()
        }
        if learnt:
            inv = _scaled(
                {t: 1.0 / m for t, (m, _) in learnt.items()}, {t: base[t].value for t in learnt}
            )
            for t, v in inv.items():
                base[t] = Speed(v, LEARNT, learnt[t][1])
        if len(self._cache) < 100_000:
            self._cache[ck] = base
        return dict(base)

    def speed(self, job: Any, gpu_type: str) -> Speed:
        """``job``'s speed on ``gpu_type`` with its evidence."""
        got = self.speeds(job).get(gpu_type)
        if got is None:
            self.type_speed(gpu_type)  # raises the unknown-type error
        return got

    def best_types(self, job: Any, accepted_types: Iterable[str] | None = None) -> list[str]:
        """The types ``job`` may run on (``accepted_types``; empty or None: every type), fastest
        for it first; ties in the site's type order. Types the model does not know are left out."""
        sp = self.speeds(job)
        acc = set(accepted_types or ())
        cands = [t for t in self.types if not acc or t in acc]
        return sorted(cands, key=lambda t: -sp[t].value)

    def relative(self, job: Any) -> dict[str, float]:
        """``job``'s speed on each type over its speed on its fastest type (≤ 1)."""
        sp = self.speeds(job)
        top = max(s.value for s in sp.values())
        return {t: s.value / top for t, s in sp.items()}

    def describe(self) -> list[tuple[str, float, str]]:
        """Per type: (name, default speed, what else the model knows there), for reports."""
        out = []
        for t, v in self._defaults.items():
            rows = [k for k, r in self._rows.items() if t in r]
            learnt = sum(1 for m in self._learnt.values() if t in m)
            bits = []
            if rows:
                vals = sorted(self._rows[k][t] for k in rows)
                bits.append(f"{len(rows)} matrix rows ({vals[0]:.3g}–{vals[-1]:.3g})")
            if learnt:
                bits.append(f"{learnt} learnt jobs")
            out.append((t, v, ", ".join(bits) or "default only"))
        return out
