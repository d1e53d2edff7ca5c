"""The site's policy mix: tiers compared lexicographically, weighted score sums within a tier.

``config.policy.combined.tiers`` lists component names per tier, e.g.
``[["deadline"], ["class"], ["las", "fairshare"]]``: deadline urgency first, then class weight,
then ``1.0 × LAS score + w × fair-share factor``. Jobs with the same sum in a tier are ordered
by the components' ``tiebreak`` (EDF among boosted deadline jobs) before the next tier is
consulted. Last ties: submit time, then job id. Components are
the single policies (``fifo``, ``las``, ``gittins``, ``qssf``, ``fairshare``, ``deadline``,
``class``) built from the same config; each contributes its absolute ``score`` in [0, 1].

Preemptive when a LAS or Gittins component is (their order changes as jobs run); otherwise
``firstfit``. A job's key changes when any component's does. Scores for the daemon are
rank-based (the inherited ``scores``), so every tier keeps its resolution in SiteFactor.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any, Callable, Mapping, Sequence

from ..model import Job
from .base import PolicyContext, PriorityPolicy, policy_settings

COMPONENTS = ("fifo", "las", "gittins", "qssf", "fairshare", "deadline", "class")
_AS_POLICY = {"fairshare": "fairshare-queue"}  # a component is a score: fair share's queue order
_PREEMPTIVE_COMPONENTS = {"las", "gittins"}


def _at(fn: Callable, ctx: PolicyContext, job: Job):
    """``fn(job, ctx)``: a component's function bound to one context (see ``bound_key``)."""
    return fn(job, ctx)


def _generated_key(plan: list) -> Callable[[Job], tuple]:
    """``key``'s loop unrolled for one plan (``bound_key``'s: per tier, its (weight, function,
    fused) triples, whether it is fused, its other tiebreaks): one function whose body names
    each tier's calls, built from the plan's shape only. The same arithmetic as ``key`` in the
    same order (``0 + w * s`` summed left to right; ``sum`` of a list where ``key`` uses one),
    so the same floats. The loop, with its tuple unpacking and list appends per component,
    cost about as much as the components' own calls (a third of a 100,000-job ranking:
    measured)."""
    env: dict[str, Any] = {}
    for t, (fns, _, rest) in enumerate(plan):
        for i, (w, fn, _) in enumerate(fns):
            env[f"w{t}_{i}"], env[f"f{t}_{i}"] = w, fn
        for k, tb in enumerate(rest):
            env[f"r{t}_{k}"] = tb
    shape = tuple(
        (tuple(is_fused for _, _, is_fused in fns), fused, len(rest)) for fns, fused, rest in plan
    )
    exec(_key_code(shape), env)  # noqa: S102 - names made from the plan's positions, values passed in env
    return env["key"]


@lru_cache(maxsize=64)
def _key_code(shape: tuple) -> Any:
    """The compiled key for a plan's shape (per tier: its components' fused flags, whether it
    is fused, its other tiebreaks' count): written and compiled once (about 0.1 ms; the
    preemption planner binds a key for every handful of jobs it scores)."""
    body, items = [], []
    for t, (fused_flags, fused, rest) in enumerate(shape):
        n = len(fused_flags)
        if not fused:
            if n == 1:
                items.append(f"-(0 + w{t}_0 * f{t}_0(job))")
            else:
                items.append(
                    "-sum([" + ", ".join(f"w{t}_{i} * f{t}_{i}(job)" for i in range(n)) + "])"
                )
            items.extend(f"*r{t}_{k}(job)" for k in range(rest))
            continue
        tbs = []
        for i, is_fused in enumerate(fused_flags):
            if is_fused:
                body.append(f"s{t}_{i}, b{t}_{i} = f{t}_{i}(job)")
                tbs.append(f"*b{t}_{i}")
            else:
                body.append(f"s{t}_{i} = f{t}_{i}(job)")
        items.append("-(0 + " + " + ".join(f"w{t}_{i} * s{t}_{i}" for i in range(n)) + ")")
        items.extend(tbs)
    items += ["job.submit_time", "job.job_id"]
    src = (
        "def key(job):\n"
        + "".join(f"    {line}\n" for line in body)
        + f"    return ({', '.join(items)},)\n"
    )
    return compile(src, "<combined key>", "exec")


class CombinedPolicy(PriorityPolicy):
    name = "combined"
    discipline = "firstfit"

    def __init__(
        self,
        config=None,
        *,
        tiers: Sequence[Sequence[str]] | None = None,
        weights: Mapping[str, float] | None = None,
        component_overrides: Mapping[str, Mapping[str, Any]] | None = None,
        preemptive: bool | None = None,
    ) -> None:
        from . import get_policy  # the registry imports this module lazily

        cc = policy_settings(config).combined
        if tiers is None:
            tiers = cc.tiers
        tiers = [list(t) for t in tiers]
        if not tiers or any(not t for t in tiers):
            raise ValueError("combined: tiers must be a non-empty list of non-empty lists")
        names = [n for t in tiers for n in t]
        unknown = sorted(set(names) - set(COMPONENTS))
        if unknown:
            raise ValueError(
                f"combined: unknown component(s) {unknown}; valid: {', '.join(COMPONENTS)}"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"combined: a component appears in more than one tier: {tiers}")
        w = dict(cc.weights)
        w.update(weights or {})
        overrides = dict(component_overrides or {})
        self.tiers: list[list[str]] = tiers
        self.weights: dict[str, float] = {n: float(w.get(n, 1.0)) for n in names}
        self.components: dict[str, PriorityPolicy] = {
            n: get_policy(_AS_POLICY.get(n, n), config, **dict(overrides.get(n, {}))) for n in names
        }
        self._tier_parts = [[(self.weights[n], self.components[n]) for n in t] for t in tiers]
        base_tiebreak = PriorityPolicy.tiebreak
        self._tier_tiebreaks = [
            [
                self.components[n].tiebreak
                for n in t
                if type(self.components[n]).tiebreak is not base_tiebreak
            ]
            for t in tiers
        ]
        self._compile()
        if preemptive is None:
            preemptive = bool(_PREEMPTIVE_COMPONENTS.intersection(names))
        if preemptive:
            self.discipline = "preemptive"
            self.preemptive = True
        self.config = config

    def tier_scores(self, job: Job, ctx: PolicyContext) -> list[float]:
        return [sum(w * p.score(job, ctx) for w, p in parts) for parts in self._tier_parts]

    def _compile(self) -> None:
        """What ``key`` runs, from ``_tier_parts`` and ``_tier_tiebreaks`` (call again after
        changing them): per tier, its (weight, score function, fused) triples, whether it is
        fused, and its tiebreak functions. A tier whose every tiebreak comes from a component
        with a ``score_and_tiebreak`` function is fused: each such component gives its score
        and its tiebreak from one call (same values, same order, same float operations).
        ``_nexts``: the components' ``next_key_change`` that can return a time."""
        base_next = PriorityPolicy.next_key_change  # None always: such components are skipped
        self._nexts = tuple(
            p.next_key_change
            for p in self.components.values()
            if type(p).next_key_change is not base_next
        )
        tiers = []
        for parts, tbs in zip(self._tier_parts, self._tier_tiebreaks):
            # fused only when every tiebreak of the tier comes from such a call (their order kept)
            both = {
                id(p): f
                for _, p in parts
                if getattr(p, "tiebreak", None) in tbs
                and (f := getattr(p, "score_and_tiebreak", lambda: None)()) is not None
            }
            if len(both) == len(tbs) and both:
                tiers.append(
                    (
                        tuple((w, both.get(id(p), p.score), id(p) in both) for w, p in parts),
                        True,
                        (),
                    )
                )
            else:
                tiers.append((tuple((w, p.score, False) for w, p in parts), False, tuple(tbs)))
        self._tiers = tiers
        self._parts = [
            [p for _, p in parts] for parts in self._tier_parts
        ]  # _tiers' components, in order

    def bound_key(self, ctx: PolicyContext) -> Callable[[Job], tuple]:
        """``key`` at one context as a function of the job alone (what ``order`` sorts with):
        each component's ``bind_score`` / ``bind_score_and_tiebreak`` where it has one, so
        what depends on the context alone (fair-share factors, the time) is looked up once per
        queue instead of once per job. The same tuple as ``key``, float for float."""
        plan = []
        for (fns, fused, rest), comps in zip(self._tiers, self._parts):
            bound = []
            for (w, fn, is_fused), p in zip(fns, comps):
                binder = getattr(p, "bind_score_and_tiebreak" if is_fused else "bind_score", None)
                f = binder(ctx) if binder is not None else None
                bound.append((w, f if f is not None else partial(_at, fn, ctx), is_fused))
            plan.append((tuple(bound), fused, tuple(partial(_at, tb, ctx) for tb in rest)))

        return _generated_key(plan)

    def order(self, jobs: Sequence[Job], ctx: PolicyContext) -> list[Job]:
        if type(self).key is not CombinedPolicy.key:  # a subclass's own key: sorted by it
            return super().order(jobs, ctx)
        return sorted(jobs, key=self.bound_key(ctx))

    def key(self, job: Job, ctx: PolicyContext) -> tuple:
        out: list = []
        for fns, fused, rest in self._tiers:
            if not fused:
                if len(fns) == 1:
                    out.append(-(0 + fns[0][0] * fns[0][1](job, ctx)))
                else:
                    out.append(
                        -sum([w * s(job, ctx) for w, s, _ in fns])
                    )  # a list: faster, same sum
                for tb in rest:
                    out.extend(tb(job, ctx))
                continue
            total, tbs = 0, []
            for w, fn, is_fused in fns:
                if is_fused:
                    sc, tb = fn(job, ctx)
                    tbs.append(tb)
                else:
                    sc = fn(job, ctx)
                total += w * sc
            out.append(-total)
            for tb in tbs:
                out.extend(tb)
        out.append(job.submit_time)
        out.append(job.job_id)
        return tuple(out)

    def next_key_change(self, job: Job, ctx: PolicyContext) -> float | None:
        times = [t for f in self._nexts if (t := f(job, ctx)) is not None]
        return min(times) if times else None
