"""A replay's GPU types: where the node groups come from, the throughput model, and the model
drawn for each job of a trace that names none (``simulate --node-types/--fleet/--throughputs
/--model-seed/--type-choice/--speeds``). File reading here; the parsing is in :mod:`slurm_dl.sim.engine.fleet` and
:mod:`slurm_dl.core.throughput`. Every problem is one ValueError line naming the option."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...core.throughput import (
    Matrix,
    ThroughputModel,
    kinds_of,
    matrix_from_gavel,
    parse_matrix_csv,
)
from ..engine.fleet import (
    NodeGroupSpec,
    describe,
    groups_from_config,
    parse_node_types,
    read_fleet,
    several_types,
)
from ...core.config.throughput import ThroughputConfig
from ..engine.typed import CHOICES, TypeSetup

SPEEDS = ("learned", "oracle")
DEFAULT_SPEEDS = "learned"
"""``--speeds``: what the aware choice knows of each job's speeds. ``learned`` (the default:
what the prioritizer does) learns them from the replay's finished runs, from the prior of
:func:`prior_model`; ``oracle`` reads the speeds the run times come from (an upper bound)."""


@dataclass
class TypedCluster:
    """Node groups of several types (or sizes), how jobs choose among them, and a line saying so."""

    groups: tuple[NodeGroupSpec, ...]
    types: TypeSetup
    line: str


def _read(path: Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{what}: cannot read {path}: {getattr(e, 'strerror', None) or e}"
        ) from None


def load_throughputs(path: Path) -> Matrix:
    """``--throughputs``: Gavel's JSON (``simulation_throughputs.json``) or a CSV matrix
    ``kind,TYPE1,TYPE2,...``."""
    text = _read(path, "--throughputs")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"--throughputs: {path}:{e.lineno}: not valid JSON ({e.msg})"
            ) from None
        try:
            return matrix_from_gavel(data, source=str(path))
        except ValueError as e:
            raise ValueError(f"--throughputs: {e}") from None
    try:
        return parse_matrix_csv(text, str(path))
    except ValueError as e:
        raise ValueError(f"--throughputs: {e}") from None


def draw_models(jobs: Sequence, kinds: Sequence[str], seed: int) -> int:
    """Give each job without a ``model`` one of ``kinds``, uniformly at random, seeded (in trace
    order, so the same trace and seed give every policy the same models); returns how many."""
    rng = random.Random(seed)
    n = 0
    for j in jobs:
        if not j.model:
            j.model = rng.choice(list(kinds))
            n += 1
    return n


def cluster_groups(
    *,
    node_types: str | None,
    gpus_per_node: int | None,
    fleet: Path | None,
    cfg=None,
    live_groups: Sequence[NodeGroupSpec] | None = None,
) -> list[NodeGroupSpec] | None:
    """The node groups the options name, or None when none of them names groups."""
    if node_types is not None:
        return parse_node_types(node_types, gpus_per_node)
    if fleet is not None:
        return read_fleet(_read(fleet, "--fleet"), str(fleet))
    if live_groups is not None:
        return list(live_groups)
    if cfg is not None:
        return groups_from_config(cfg)
    return None


def throughput_model(
    types: Sequence[str], matrix: Matrix | None, cfg=None
) -> ThroughputModel | None:
    """The model of the replay: the site config's (its speeds and [throughput] matrix, or
    ``matrix`` in its place), else ``matrix`` alone, else None (every type as fast)."""
    if cfg is not None and all(t in cfg.gpu_type_names for t in types):
        try:
            return ThroughputModel.from_config(cfg, matrix)
        except ValueError as e:
            raise ValueError(f"--throughputs: {e}") from None
    if matrix:
        covered = {t for row in matrix.values() for t in row}
        missing = [t for t in types if t not in covered]
        if missing:
            raise ValueError(
                f"--throughputs: no speeds for GPU type {', '.join(missing)}; "
                f"it has {', '.join(sorted(covered))}"
            )
        return ThroughputModel.from_matrix(matrix, list(types))
    return None


def prior_model(model: ThroughputModel, types: Sequence[str], cfg=None) -> ThroughputModel:
    """What the prioritizer knows of the speeds before any run finished: the site config's
    (its ``[[gpu_types]] speed`` and its own ``[throughput]`` matrix, not ``--throughputs``)
    when it names the types; else each type's speed in ``model`` alone (as a site would set
    ``[[gpu_types]] speed``), no row per model."""
    if cfg is not None and all(t in cfg.gpu_type_names for t in types):
        return ThroughputModel.from_config(cfg)
    tp = getattr(cfg, "throughput", None) or ThroughputConfig()
    return ThroughputModel(
        {t: model.type_speed(t) for t in model.types}, min_samples=tp.min_samples
    )


def typed_cluster(
    groups: list[NodeGroupSpec] | None,
    choice: str | None,
    matrix: Matrix | None,
    cfg=None,
    recorded: bool = False,
    speeds: str | None = None,
) -> TypedCluster | None:
    """The typed cluster of a replay, or None when ``groups`` are of one type and node size
    (then the replay is the plain one, exactly as before). ``speeds``: see :data:`SPEEDS`."""
    if choice is not None and choice not in CHOICES:
        raise ValueError(f"--type-choice: got {choice!r}; allowed: {', '.join(CHOICES)}")
    if speeds is not None and speeds not in SPEEDS:
        raise ValueError(f"--speeds: got {speeds!r}; allowed: {', '.join(SPEEDS)}")
    if not groups or not several_types(groups):
        return None
    types = list(dict.fromkeys(g.gpu_type for g in groups))
    model = throughput_model(types, matrix, cfg)
    choice = choice or "aware"
    known = (speeds or DEFAULT_SPEEDS) if choice == "aware" and model is not None else None
    prior = prior_model(model, types, cfg) if known == "learned" else None
    setup = TypeSetup(choice, model, recorded, prior)
    speeds_of = ", ".join(f"{t} {model.type_speed(t):.3g}" for t in types) if model else "all 1"
    how = f" on {known} speeds" if known else ""
    line = (
        f"GPU types: {describe(groups)}; type choice {setup.choice}{how}; type speeds {speeds_of}"
    )
    return TypedCluster(tuple(groups), setup, line)


@dataclass
class TypesAsked:
    """What ``simulate``'s GPU-type options ask, checked before a long trace is read."""

    node_types: str | None = None
    fleet: Path | None = None
    matrix: Matrix | None = None
    throughputs: Path | None = None
    seed: int = 0
    choice: str | None = None
    speeds: str | None = None

    @classmethod
    def check(
        cls,
        *,
        node_types,
        fleet,
        throughputs,
        model_seed,
        type_choice,
        nodes,
        cluster_per_vc,
        from_slurm,
        speeds=None,
    ) -> "TypesAsked":
        if node_types is not None and fleet is not None:
            raise ValueError("--node-types: give it or --fleet, not both")
        named = (
            "--node-types" if node_types is not None else "--fleet" if fleet is not None else None
        )
        if named and (nodes is not None or cluster_per_vc or from_slurm):
            raise ValueError(
                f"{named}: give it instead of --nodes / --cluster-per-vc / --cluster-from-slurm"
            )
        if type_choice is not None and type_choice not in CHOICES:
            raise ValueError(f"--type-choice: got {type_choice!r}; allowed: {', '.join(CHOICES)}")
        if speeds is not None and speeds not in SPEEDS:
            raise ValueError(f"--speeds: got {speeds!r}; allowed: {', '.join(SPEEDS)}")
        if speeds is not None and type_choice not in (None, "aware"):
            raise ValueError(
                f"--speeds: only --type-choice aware reads it; {type_choice} chooses as "
                "it always does"
            )
        if model_seed is not None and throughputs is None:
            raise ValueError(
                "--model-seed: draws each job's model from --throughputs; give --throughputs"
            )
        if node_types is not None:
            parse_node_types(node_types, None)  # the syntax, now
        matrix = load_throughputs(throughputs) if throughputs is not None else None
        return cls(
            node_types,
            fleet,
            matrix,
            throughputs,
            0 if model_seed is None else model_seed,
            type_choice,
            speeds,
        )

    def draw(self, jobs: Sequence) -> str | None:
        """Models for the jobs that name none (with ``--throughputs``); a line saying so."""
        if not self.matrix:
            return None
        kinds = kinds_of(self.matrix)
        n = draw_models(jobs, kinds, self.seed)
        if not n:
            return None
        return (
            f"models: {n} of {len(jobs)} jobs name none; each drawn from the {len(kinds)} models of "
            f"{self.throughputs.name} (--model-seed {self.seed}); a trace duration is the run time on "
            "the job's fastest type"
        )

    def cluster(
        self,
        cfg,
        gpus_per_node: int | None,
        live: Sequence[NodeGroupSpec] | None,
        recorded: bool,
        cfg_groups: bool = True,
    ) -> TypedCluster | None:
        """The typed cluster of one site config's replay (``cfg_groups``: its node groups are
        the cluster unless an option names another; its speeds are used either way)."""
        groups = cluster_groups(
            node_types=self.node_types,
            gpus_per_node=gpus_per_node,
            fleet=self.fleet,
            cfg=cfg if cfg_groups else None,
            live_groups=live,
        )
        return typed_cluster(groups, self.choice, self.matrix, cfg, recorded, self.speeds)

    def check_used(self, typed: bool) -> None:
        """Options that only mean something on several GPU types, when the cluster has one."""
        if typed:
            return
        for flag, given in (
            ("--type-choice", self.choice),
            ("--throughputs", self.throughputs),
            ("--speeds", self.speeds),
        ):
            if given is not None:
                raise ValueError(
                    f"{flag}: the cluster has one GPU type and node size; give several "
                    "(--node-types, --fleet, --config with node groups of several types, "
                    "--cluster-from-slurm)"
                )
