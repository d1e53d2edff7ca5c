"""Victims for one move of the fair-share decision (pure; see :mod:`slurm_dl.core.fairness`).

Which running jobs of over-share accounts yield so that a waiting job of an under-share account
starts: :func:`allowed` (the two rules a victim's account must meet), :func:`gpu_victims` (by GPU
count alone) and :func:`node_victims` (so that the job fits on nodes, node by node, by
:func:`fit`, the simulator's consolidated placement rule).
"""

from __future__ import annotations

from typing import Hashable, Mapping, NamedTuple

from .model import Job

EPS = 1e-9
INF = float("inf")


class Standing(NamedTuple):
    """One account's standing at a decision (a named tuple: the decision builds one per account
    at every cycle, and a frozen dataclass takes several times longer to build)."""

    account: str
    share: float
    held: int
    demand: int
    fair: float
    rho: float

    def describe(self) -> str:
        return f"account {self.account} holds {self.held} of its fair {self.fair:.1f} GPUs (rho {self.rho:.1f})"


def fit(
    free: Mapping[Hashable, int],
    size: Mapping[Hashable, int],
    gpus: int,
    largest: int | None = None,
) -> tuple[tuple[Hashable, int], ...] | None:
    """Where ``gpus`` GPUs start on these free GPUs per node (``None``: nowhere): one node when
    some node is that large (the fullest node that still fits), else wholly free nodes (largest
    first) and the rest on the free-most other node; the simulator's consolidated rule.
    ``largest``: the largest node's size, when the caller knows it."""
    if largest is None:
        largest = max(size.values(), default=0)
    if gpus <= largest:
        best, best_free = None, None
        for n, f in free.items():
            if f >= gpus and (best_free is None or f < best_free):
                best, best_free = n, f
                if f == gpus:  # no node fits it more tightly
                    break
        return None if best is None else ((best, gpus),)
    out: list[tuple[Hashable, int]] = []
    left = gpus
    for n in sorted(
        (n for n, f in free.items() if f > 0 and f == size.get(n)), key=lambda n: -size[n]
    ):
        if size[n] <= left:
            out.append((n, size[n]))
            left -= size[n]
    if left:
        used = {n for n, _ in out}
        rest = [(f, n) for n, f in free.items() if n not in used and f >= left]
        if not rest:
            return None
        out.append((max(rest, key=lambda x: x[0])[1], left))
    return tuple(out)


def allowed(
    v: Job, trial: Mapping[str, float], st: Mapping[str, Standing], h: float, floor: float = INF
) -> bool:
    """Whether ``v`` may yield: its account stays above its fair share by more than the
    hysteresis and ends closer to it than it was, or (max-min) it ends holding more of its
    fair share than ``floor`` (see :func:`_floor`)."""
    return _allowed(v.num_gpus, trial[v.account], st[v.account].fair, h, floor)


def _allowed(g: int, held: float, fair_a: float, h: float, floor: float) -> bool:
    """:func:`allowed` for a job of ``g`` GPUs of an account that holds ``held`` GPUs of its
    fair ``fair_a`` (false for a larger job when false for a smaller one)."""
    surplus = held - fair_a
    after = held - g
    if surplus > fair_a * h + EPS and surplus > fair_a - after + EPS:
        return True
    return fair_a > EPS and after / fair_a > floor + EPS


def _floor(
    b: str, g: int, held: Mapping[str, float], st: Mapping[str, Standing], h: float
) -> float:
    """The max-min bar for a move of ``g`` GPUs to account ``b``: the part of its fair share
    ``b`` holds before the move plus the hysteresis. A victim account must end above it
    (:func:`allowed`); infinite (no such moves) when ``b`` itself would not end above it."""
    fair_b = st[b].fair
    if fair_b <= EPS:
        return INF
    before = held[b] / fair_b + h
    return before if (held[b] + g) / fair_b > before + EPS else INF


def gpu_victims(g, b, victim_order, by_acct, taken, held, free, st, h):
    """Victims by GPU count alone: (chosen, every allowed candidate, GPUs freed, held after)."""
    bar = _floor(b, g, held, st, h)
    chosen: list[Job] = []
    cands: list[Job] = []
    freed = 0
    trial = dict(held)
    for a in victim_order:
        if a == b:
            continue
        for v in by_acct[a]:
            if v.job_id in taken or not allowed(v, trial, st, h, bar):
                continue
            cands.append(v)
            if free + freed < g:
                chosen.append(v)
                freed += v.num_gpus
                trial[a] -= v.num_gpus
    return chosen, cands, freed, trial


def node_victims(
    need, b, victim_order, by_acct, taken, held, node_free, nodes, st, h, largest=None, gain=None
):
    """Victims that make ``need`` fit on nodes: node by node, the node that the fewest
    preempted GPUs (then victims) open for it first, victims in the usual order on each node.
    Returns (chosen, candidates, held after, free GPUs per node after), or ``None``.
    ``largest``: the largest node's size, when the caller knows it. ``gain``: on several GPU
    types, ``need``'s speed on each node's type (node -> speed); a node of a faster type for
    it then comes first, whatever it costs, and the fewest GPUs only among nodes as fast."""
    g = need.num_gpus
    bar = _floor(b, g, held, st, h)
    size = nodes.size
    alloc = nodes.alloc
    if largest is None:
        largest = max(size.values(), default=0)
    # a job that may not yield at its account's holding now never may in this search (the
    # holdings only go down, and :func:`allowed` only gets stricter as they do), so it is left
    # out of the pool; the ranks below keep the others' order, so no choice changes
    rank: dict[int, int] = {}  # the pool: job id -> its place in the usual order
    on_node: dict[Hashable, list[Job]] = {}  # node -> the pool's jobs on it, in that order
    for a in victim_order:
        if a == b:
            continue
        fair_a = st[a].fair
        if bar == INF and not held[a] - fair_a > fair_a * h + EPS:
            continue  # neither rule of allowed can hold for any job of this account
        t = held[a]
        ok: dict[int, bool] = {}  # GPUs -> whether a job that large may yield (one test per size)
        for v in by_acct[a]:
            if v.job_id not in taken:
                g_v = v.num_gpus
                r = ok.get(g_v)
                if r is None:
                    r = ok[g_v] = _allowed(g_v, t, fair_a, h, bar)
                if r:
                    rank[v.job_id] = len(rank)
                    for n, _ in alloc.get(v.job_id, ()):
                        on_node.setdefault(n, []).append(v)
    wide = g > largest
    tf = dict(node_free)
    trial = dict(held)
    chosen: list[Job] = []
    picked: set[int] = set()
    for _ in range(len(tf) + 1):
        if fit(tf, size, g, largest) is not None:
            break
        best = None
        for n, vs in on_node.items():
            sz = size.get(n, 0)
            want = sz if wide else g
            if want > sz or (wide and tf.get(n, 0) >= want):
                continue
            speed = 0.0 if gain is None else -gain.get(n, 0.0)
            if best is not None and speed > best[0][0] + EPS:
                continue  # slower for ``need`` than the best node so far
            # a node as fast that costs more GPUs than the best one so far cannot be chosen
            bound = INF if best is None or speed < best[0][0] - EPS else best[0][1]
            got, cost, mine, delta = tf.get(n, 0), 0, [], {}
            for v in vs:
                if got >= want:
                    break
                if v.job_id in picked:
                    continue
                a = v.account
                if not _allowed(v.num_gpus, trial[a] - delta.get(a, 0), st[a].fair, h, bar):
                    continue
                mine.append(v)
                delta[a] = delta.get(a, 0) + v.num_gpus
                cost += v.num_gpus
                if cost > bound:
                    break
                for m, k in alloc.get(v.job_id, ()):
                    if m == n:
                        got += k
            if got < want or cost > bound:
                continue
            score = (speed, cost, len(mine), max(rank[v.job_id] for v in mine) if mine else -1)
            if best is None or _better(score, best[0]):
                best = (score, mine)
        if best is None or not best[1]:
            return None
        for v in best[1]:
            chosen.append(v)
            picked.add(v.job_id)
            trial[v.account] -= v.num_gpus
            for n, k in alloc.get(v.job_id, ()):
                tf[n] = tf.get(n, 0) + k
    else:
        return None
    if fit(tf, size, g, largest) is None:
        return None
    ns = {n for v in chosen for n, _ in alloc.get(v.job_id, ())}
    base = dict(held)
    cands = list(chosen) + [
        v
        for n in ns
        for v in on_node.get(n, ())
        if v.job_id not in picked and allowed(v, base, st, h, bar)
    ]
    seen: set[int] = set()
    cands = [v for v in cands if not (v.job_id in seen or seen.add(v.job_id))]
    return chosen, cands, trial, tf


def _better(score: tuple, than: tuple) -> bool:
    """Whether node ``score`` (speed for the job, negated; GPUs; victims; rank) beats ``than``:
    faster by more than rounding, else as fast and the rest smaller."""
    if score[0] < than[0] - EPS:
        return True
    return score[0] <= than[0] + EPS and score[1:] < than[1:]
