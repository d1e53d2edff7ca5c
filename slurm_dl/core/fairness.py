"""Finish-time fair share with GPU leases: which running jobs yield their GPUs to which
account (pure; the simulator and the prioritizer call the same :func:`plan_fair_preemptions`).

The idea is Themis's (finish-time fairness, NSDI 2020), with one simplification that needs no
knowledge of a job's future: an account that always holds at least its **max-min fair share**
of the GPUs while it has work (``min(its demand, its share of the cluster)``, water-filled over
the accounts that have work) progresses at least as fast as it would alone on ``1/N`` of the
cluster, so its finish-time fairness ``ρ = JCT shared / JCT alone on its share`` stays near 1.
Leases bound the churn this costs.

At each decision, from what is known now (GPUs held, GPUs asked, submit times and attained
service; never a job's duration):

* **standing** of each account with work: ``held`` GPUs, ``demand`` (held + asked by its
  waiting jobs), ``fair`` (water-filled shares) and ``rho``, the estimate of its finish-time
  fairness so far: Σ time in the system / Σ time run, over its unfinished jobs (a job that
  has run less than ``rho_floor_s`` counts as having run that long). 1 = every job has run
  since it arrived; large = its jobs mostly wait;
* **beneficiaries** are accounts below their fair share by more than the hysteresis
  (``held < fair × (1 − hysteresis)``) with a waiting job, the highest ``rho`` first. An
  account's waiting jobs are tried in its own order (the policy's within-account key); a job
  qualifies when it does not push the account past ``fair × (1 + hysteresis)`` (or when the
  account holds nothing: its first job always qualifies);
* **victims** come from other accounts, lowest ``rho`` first, and only while the victim
  account stays above its fair share by more than the hysteresis and its surplus before the
  move exceeds its deficit after it (each move brings both accounts closer
  to their fair share, so moves do not ping-pong), **or** while the move raises the worse-off
  of the two accounts by more than the hysteresis (max-min: after the move both hold more of
  their fair share than the beneficiary held before, so the reverse move never qualifies).
  The second rule matters when jobs are wide next to the fair shares: an account that holds
  nothing and asks for one node gets it from an account a few GPUs over its share, which the
  first rule alone refused (the victim would end a few GPUs under, or was over by less than
  the hysteresis, or no account was over at all: free GPUs in pieces leave accounts under
  their share with nobody over it). Within an account, its least urgent job first (the reverse of its own
  order). A victim must be able to resume (:func:`slurm_dl.core.preemption.resume_kind`:
  jobs that did not opt in are never victims), must have held its GPUs for a whole **lease**
  (``lease_s`` of useful run, plus ``restart_s`` when its run began with a restart: the restart
  cost is not part of the lease) and must have been restarted fewer than ``max_restarts``
  times;
* a move happens only when the victims found free enough GPUs (with the free ones) for the
  whole waiting job; otherwise nothing is preempted for it. ``wake_at`` says when the first
  lease that blocked a move ends (the simulator schedules a decision then).

Where the GPUs are matters: free GPUs spread over many nodes do not start a job that needs
them on one node. Given a :class:`NodeView` (free GPUs per node, each running job's GPUs per
node), a waiting job counts as starting on free GPUs only where :func:`fit` places it (one node
when it fits in one, else wholly free nodes plus the rest on one more), and its victims are
sought node by node: the node that the fewest preempted GPUs make fit first. Without one, the
decision counts GPUs only.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Hashable, Mapping, Sequence

from .model import Job
from .preemption import RESUME_NEVER, resume_kind
from .fair_victims import Standing, _floor, fit, gpu_victims, node_victims
from .waiting import WaitingJobs

if TYPE_CHECKING:
    from .config import SiteConfig

EPS = 1e-9
INF = float("inf")
FAIR_PREFIX = "fair share: "
"""How a preemption reason for fairness begins (``explain`` shows these as fair-share yields)."""
_YIELDS_TO = re.compile(r"to job (\d+) of account (\S+?);")


def yielded_to(reason: str) -> tuple[int, str] | None:
    """(job, account) a fair-share preemption reason says the victim yielded to, else ``None``."""
    if not reason.startswith(FAIR_PREFIX):
        return None
    m = _YIELDS_TO.search(reason)
    return (int(m.group(1)), m.group(2)) if m else None


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """What the decision needs from the site config (see ``[policy.fairshare]``)."""

    lease_s: float = 3600.0
    restart_s: float = 0.0
    hysteresis: float = 0.1
    shares: Mapping[str, float] = field(default_factory=dict)
    default_share: float = 1.0
    max_restarts: int | None = None
    rho_floor_s: float = 600.0
    max_moves: int = 64
    victims_by_type: bool = False

    @classmethod
    def from_config(cls, config: "SiteConfig | None", **overrides) -> "LeaseSettings":
        if config is not None:
            fs, pc = config.policy.fairshare, config.preemption
        else:  # the default config's
            from .config import FairShareConfig, PreemptionConfig

            fs, pc = FairShareConfig(), PreemptionConfig()
        base = dict(
            lease_s=fs.lease_seconds,
            restart_s=pc.restart_delay_seconds,
            hysteresis=fs.lease_hysteresis,
            shares=dict(fs.shares),
            default_share=fs.default_share,
            max_restarts=pc.max_restarts,
            victims_by_type=fs.lease_victims_by_type,
        )
        base.update(overrides)
        # a lease is never shorter than the minimum run before any preemption
        base["lease_s"] = max(float(base["lease_s"]), pc.min_runtime_seconds)
        return cls(**base)

    def share(self, account: str) -> float:
        return self.shares.get(account, self.default_share)


@dataclass(frozen=True, slots=True)
class FairMove:
    """Preempt ``victims`` (all of them from over-share accounts) so that job ``need`` of the
    under-share account ``account`` can start; ``candidates``: every victim the rules allowed
    for it (a node-level planner may pick among them); ``reasons``: per victim, in words."""

    need: int
    account: str
    gpus: int
    victims: tuple[int, ...]
    candidates: tuple[int, ...]
    reasons: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class FairPlan:
    standings: Mapping[str, Standing]
    moves: tuple[FairMove, ...]
    wake_at: float | None


@dataclass(frozen=True, slots=True)
class NodeView:
    """Where the GPUs are: ``size`` (GPUs per node), ``free`` (GPUs free per node now),
    ``alloc`` (per running job id, its (node, GPUs) pairs; a job missing here frees nothing
    that a node-bound job could use) and ``kind`` (per node, its GPU type, on several types;
    empty: one type)."""

    size: Mapping[Hashable, int]
    free: Mapping[Hashable, int]
    alloc: Mapping[int, Sequence[tuple[Hashable, int]]]
    kind: Mapping[Hashable, Hashable] = field(default_factory=dict)

    def gain(self, speeds: Mapping[Hashable, float] | None) -> dict[Hashable, float] | None:
        """Per node, a job's speed on its type (``speeds``: type -> speed), or ``None`` on
        one type or without speeds (the victims' choice then ignores types)."""
        if not speeds or len(set(self.kind.values())) < 2:
            return None
        return {n: speeds.get(t, 0.0) for n, t in self.kind.items()}


def water_fill(
    demand: Mapping[str, float], weights: Mapping[str, float], total: float
) -> dict[str, float]:
    """Max-min fair shares: each account gets ``total × weight / Σ weights`` but never more than
    its demand; what an account does not need is shared among the others by weight."""
    fair = {a: 0.0 for a in demand}
    left = {a for a, d in demand.items() if d > 0}
    cap = float(total)
    while left and cap > EPS:
        w = sum(weights[a] for a in left)
        unit = cap / w
        sated = {a for a in left if demand[a] - fair[a] <= unit * weights[a] + EPS}
        if not sated:
            for a in left:
                fair[a] += unit * weights[a]
            break
        for a in sated:
            cap -= demand[a] - fair[a]
            fair[a] = float(demand[a])
        left -= sated
    return fair


def entitled(s: Standing) -> bool:
    """On several GPU types, may the account's running jobs move to a faster type ahead of
    other accounts' waiting jobs? When it holds less than its fair share, or asks no more than
    its fair share (all it asks is its own: it may have it at full speed)."""
    return s.held < s.fair or s.demand <= s.fair + EPS


def standings(
    pending: Sequence[Job],
    running: Sequence[Job],
    total_gpus: int,
    now: float,
    settings: LeaseSettings,
) -> dict[str, Standing]:
    held: dict[str, int] = {}
    acc: dict[str, list] = {}  # account -> [demand, Σ time in system, Σ time run (floored)]
    floor = settings.rho_floor_s
    for j in running:
        held[j.account] = held.get(j.account, 0) + j.num_gpus
    for group in (running, pending):
        for j in group:
            row = acc.get(j.account)
            if row is None:
                row = acc[j.account] = [0, 0.0, 0.0]
            row[0] += j.num_gpus
            w = now - j.submit_time
            if w > 0:
                row[1] += w
            e = j.executed_s
            row[2] += e if e > floor else floor
    demand = {a: r[0] for a, r in acc.items()}
    waited = {a: r[1] for a, r in acc.items()}
    ran = {a: r[2] for a, r in acc.items()}
    weights = {a: settings.share(a) for a in demand}
    fair = water_fill(demand, weights, total_gpus)
    return {
        a: Standing(a, weights[a], held.get(a, 0), demand[a], fair[a], max(1.0, waited[a] / ran[a]))
        for a in sorted(demand)
    }


def lease_end(job: Job, settings: LeaseSettings) -> float | None:
    """When ``job``'s current lease ends (``None``: not running)."""
    if job.start_time is None:
        return None
    return job.start_time + settings.lease_s + (settings.restart_s if job.restarts > 0 else 0.0)


def yield_from(job: Job, settings: LeaseSettings, config: "SiteConfig | None") -> float:
    """From when running ``job`` may yield its GPUs: its lease end, or ``INF`` when it never may
    in this run (it cannot resume, or reached the restart cap). Constant while it runs:
    :func:`victim_block` is ``None`` exactly from ``yield_from(...) - EPS`` on."""
    kind, _ = resume_kind(job, config)
    if kind == RESUME_NEVER or (
        settings.max_restarts is not None and job.restarts >= settings.max_restarts
    ):
        return INF
    end = lease_end(job, settings)
    return -INF if end is None else end


def _yield_end(job: Job, now: float, settings: LeaseSettings, config: "SiteConfig | None") -> float:
    """What the loop over running jobs in :func:`plan_fair_preemptions` reads of ``job``'s
    rules at ``now``: ``-INF`` it may yield, ``INF`` it may not (nor when its lease ends), else
    when its lease ends."""
    block = victim_block(job, now, settings, config)
    if block is None:
        return -INF
    end = lease_end(job, settings)
    if (
        end is not None
        and end > now + EPS
        and block.startswith("its lease")
        and victim_block(job, end, settings, config) is None
    ):
        return end
    return INF


def victim_block(
    job: Job, now: float, settings: LeaseSettings, config: "SiteConfig | None"
) -> str | None:
    """Why ``job`` cannot yield its GPUs now (``None``: it can)."""
    end = lease_end(job, settings)
    if end is not None and now < end - EPS:
        return f"its lease runs until {end - now:.0f} s from now"
    kind, why = resume_kind(job, config)
    if kind == RESUME_NEVER:
        return why
    if settings.max_restarts is not None and job.restarts >= settings.max_restarts:
        return f"restarted {job.restarts} times (cap {settings.max_restarts})"
    return None


def plan_fair_preemptions(
    pending: Sequence[Job],
    running: Sequence[Job],
    total_gpus: int,
    now: float,
    settings: LeaseSettings,
    config: "SiteConfig | None" = None,
    *,
    order: Callable[[Job], tuple] | None = None,
    level: Callable[[Job], int] | None = None,
    free_gpus: int | None = None,
    standing: Mapping[str, Standing] | None = None,
    nodes: NodeView | None = None,
    waiting: Mapping[str, WaitingJobs] | None = None,
    yields: Mapping[int, float] | None = None,
    ranked: Mapping[str, Sequence[Job]] | None = None,
    may_yield: Callable[[str, Sequence[Job], Mapping[int, float], float], tuple] | None = None,
    speeds: Callable[[Job], Mapping[Hashable, float]] | None = None,
) -> FairPlan:
    """The moves that bring under-share accounts their GPUs back (see the module docstring).

    ``order``: the within-account order (smaller first; default submit time, then id).
    ``level``: when given, also moves within an account: a waiting job may take the GPUs of a
    running job of its own account whose level is higher (e.g. LAS queues), leases and opt-in
    as above. ``free_gpus``: GPUs free now (default: total minus what ``running`` holds).
    ``standing``: :func:`standings` of these jobs, when the caller has it already.
    ``nodes``: where the GPUs are (see the module docstring); ``None``: count GPUs only.
    ``waiting``: the waiting jobs with GPUs per account in ``order`` (whose first item is the
    ``level`` when both are given), when the caller keeps them so; ``pending`` is then not read
    when ``standing`` is given too. The walks over them pass over the jobs that would do
    nothing (too large for what is free and for what a move could free) without looking at
    each (:mod:`slurm_dl.core.waiting`), so a decision does not cost the length of the queue.
    ``yields``: per running job id, its :func:`yield_from` (constant while it runs), when the
    caller keeps it so; otherwise each running job's rules are read at every decision.
    ``ranked``: the running jobs of each account in ``order`` (by ``(order(j), job id)``), when
    the caller keeps them so (then ``running`` is not read when ``standing`` is given too).
    ``may_yield(account, its ranked jobs, yields, now)``: what ``_may_yield`` gives, when the
    caller keeps it (it changes only with the account's ranked jobs and when ``now`` reaches
    the lease end it returns). ``speeds(job)``: on several GPU types (``nodes.kind``), the
    waiting job's speed on each type (type -> speed, as the type choice knows it); with the
    site's ``lease_victims_by_type`` its victims are then sought on the type it runs fastest
    on first (:func:`slurm_dl.core.fair_victims.node_victims`)."""
    key = order or (lambda j: (j.submit_time, j.job_id))
    st = (
        standing if standing is not None else standings(pending, running, total_gpus, now, settings)
    )
    held = {a: s.held for a, s in st.items()}
    free = total_gpus - sum(held.values()) if free_gpus is None else free_gpus
    h = settings.hysteresis
    if waiting is None:
        lists: dict[str, list[Job]] = {}
        for j in pending:
            if j.num_gpus > 0:
                lists.setdefault(j.account, []).append(j)
        waiting = {a: WaitingJobs.of(js, key) for a, js in lists.items()}
    beneficiaries = sorted(
        (a for a in waiting if held[a] < st[a].fair * (1 - h) - EPS),
        key=lambda a: (-st[a].rho, held[a] / max(st[a].fair, EPS), a),
    )
    if not beneficiaries and level is None:
        return FairPlan(st, (), None)
    # accounts that may give: the first rule of :func:`slurm_dl.core.fair_victims.allowed` asks them to be above their
    # fair share by more than the hysteresis; the max-min rule only that they end above the
    # beneficiary (with free GPUs in pieces, every account may be at or under its share while
    # a job that needs a node waits)
    over = {a for a in st if held[a] > 0}

    def gives(a: str) -> bool:
        return a in over or (level is not None and a in waiting)

    if ranked is None:  # each account's running jobs in order, most urgent first
        ranked = {}
        for j in sorted((j for j in running if gives(j.account)), key=lambda j: (key(j), j.job_id)):
            ranked.setdefault(j.account, []).append(j)
    if yields is None:  # the rules read at ``now`` order the jobs as their yield_from would
        yields = {
            j.job_id: _yield_end(j, now, settings, config) for js in ranked.values() for j in js
        }
    # per account that may give, the jobs that may yield now, least urgent first; ``wake``: the
    # first lease end among the jobs only their lease protects (the within-account moves
    # read theirs in :func:`_within`, only as far as they need)
    by_acct: dict[str, list[Job]] = {}
    freeable = 0  # their GPUs: an upper bound on what moves can free
    avail: dict[str, int] = {}  # per account, those of its jobs no move has taken yet
    wake: float | None = None
    if beneficiaries:
        for a, js in ranked.items():
            if a in over:
                out, gpus, end = (
                    may_yield(a, js, yields, now)
                    if may_yield is not None
                    else _may_yield(js, yields, now)
                )
                if out:
                    by_acct[a] = out
                    freeable += gpus
                    avail[a] = gpus
                if end is not None and (wake is None or end < wake):
                    wake = end
    victim_order = sorted(by_acct, key=lambda a: (st[a].rho, -(held[a] - st[a].fair), a))
    taken: set[int] = set()
    placed: set[int] = set()
    moves: list[FairMove] = []
    node_free = None if nodes is None else dict(nodes.free)  # what is left per node as moves go
    largest = None if nodes is None else max(nodes.size.values(), default=0)
    for b in beneficiaries:
        failed = None  # the smallest job of b no move could free GPUs for: larger ones fail too

        def acts(need: Job, b=b) -> bool:  # false: the loop below would pass over ``need``
            g = need.num_gpus
            if held[b] > 0 and held[b] + g > st[b].fair * (1 + h) + EPS:
                return False
            return g <= free or not (g > free + freeable or (failed is not None and g >= failed))

        for need in waiting[b].walk(acts):
            if len(moves) >= settings.max_moves:
                break
            fair_b = st[b].fair
            if not held[b] < fair_b * (1 - h) - EPS:
                break
            g = need.num_gpus
            if held[b] > 0 and held[b] + g > fair_b * (1 + h) + EPS:
                continue
            if g <= free:
                where = None if node_free is None else fit(node_free, nodes.size, g, largest)
                if node_free is None or where is not None:
                    free -= g
                    held[b] += g
                    placed.add(need.job_id)
                    for n, k in where or ():
                        node_free[n] -= k
                    continue
            if g > free + freeable or (failed is not None and g >= failed):
                continue
            if node_free is not None:
                # the GPUs the node search could free at most: the jobs left of the accounts
                # that may give to b at all (its first test; a job frees its GPUs where
                # ``nodes.alloc`` puts them); when they and the free GPUs are fewer than g, no
                # node opens for it and the search finds nothing
                bar = _floor(b, g, held, st, h)
                reach = sum(node_free.values())
                for a in victim_order:
                    if a != b and (bar != INF or held[a] - st[a].fair > st[a].fair * h + EPS):
                        reach += avail[a]
                if reach < g:
                    failed = g if failed is None else min(failed, g)
                    continue
                gain = (
                    nodes.gain(speeds(need))
                    if speeds is not None and settings.victims_by_type
                    else None
                )
                found = node_victims(
                    need,
                    b,
                    victim_order,
                    by_acct,
                    taken,
                    held,
                    node_free,
                    nodes,
                    st,
                    h,
                    largest,
                    gain,
                )
                if found is None:
                    failed = g if failed is None else min(failed, g)
                    continue
                chosen, cands, trial, after = found
                freed = sum(v.num_gpus for v in chosen)
                node_free.clear()
                node_free.update(after)
                for n, k in fit(node_free, nodes.size, g, largest) or ():
                    node_free[n] -= k
            else:
                chosen, cands, freed, trial = gpu_victims(
                    g, b, victim_order, by_acct, taken, held, free, st, h
                )
                if free + freed < g:
                    failed = g if failed is None else min(failed, g)
                    continue
            reasons = {v.job_id: _reason(v, need, st, now, settings) for v in cands}
            moves.append(
                FairMove(
                    need.job_id,
                    b,
                    g,
                    tuple(v.job_id for v in chosen),
                    tuple(v.job_id for v in cands),
                    reasons,
                )
            )
            taken.update(v.job_id for v in chosen)
            for v in chosen:
                avail[v.account] -= v.num_gpus
            placed.add(need.job_id)
            held.update(trial)
            held[b] += g
            free = free + freed - g
            freeable -= freed
    if level is not None:
        free, wake = _within(
            waiting,
            ranked,
            yields,
            taken,
            placed,
            moves,
            free,
            wake,
            key,
            level,
            order is not None,
            now,
            settings,
        )
    return FairPlan(st, tuple(moves), wake)


def _may_yield(
    js: Sequence[Job], yields: Mapping[int, float], now: float
) -> tuple[list[Job], int, float | None]:
    """The jobs of ``js`` (most urgent first) that may yield now, least urgent first, their
    GPUs, and the first lease end among those only their lease protects (``None``: none).
    The same answer at a later ``now`` while ``now < end - EPS`` for that first end (every
    other test flips only as ``now`` passes a later end), as long as ``js`` is the same."""
    out = []
    gpus = 0
    wake = None
    for j in reversed(js):
        end = yields[j.job_id]
        if not now < end - EPS:
            out.append(j)
            gpus += j.num_gpus
        elif end != INF and (wake is None or end < wake):
            wake = end
    return out, gpus, wake


def _within(
    waiting, ranked, yields, taken, placed, moves, free, wake, key, level, by_level, now, settings
):
    """Moves inside one account: a waiting job in a lower level takes a higher-level job's GPUs.

    ``ranked``: each account's running jobs, most urgent first; ``by_level``: the key's first
    item is the level, so the reverse of that order is highest level first. Only the jobs
    above the account's lowest waiting level can matter, so the walk over an account's
    running jobs stops at that level."""
    for a in sorted(a for a in ranked if a in waiting):
        asc = (
            ranked[a] if by_level else sorted(ranked[a], key=lambda v: (level(v), key(v), v.job_id))
        )
        # the highest level among the jobs that may yield now or when their lease ends
        top = next(
            (level(v) for v in reversed(asc) if yields[v.job_id] != INF and v.job_id not in taken),
            0,
        )
        if top <= 0:
            continue
        low = waiting[a].lowest(level, placed)
        low = top if low is None else low
        if low >= top:
            continue
        mine: list[Job] = []  # the jobs above ``low`` that may yield now, highest level first
        rest = 0  # asc[:rest]: the jobs at or below ``low``
        for i in range(len(asc) - 1, -1, -1):
            v = asc[i]
            if level(v) <= low:
                rest = i + 1
                break
            end = yields[v.job_id]
            if now < end - EPS:
                if end != INF:
                    wake = end if wake is None else min(wake, end)
            elif v.job_id not in taken:
                mine.append(v)
        if not mine:
            continue
        # whether a job at or below ``low`` may yield: no move takes it, but while one is left
        # the walk below goes on (and counts the jobs that start on free GPUs)
        lower = None

        def more() -> bool:
            nonlocal lower
            if mine:
                return True
            if lower is None:
                lower = any(
                    not now < yields[v.job_id] - EPS and v.job_id not in taken for v in asc[:rest]
                )
            return lower

        failed: dict[int, int] = {}  # level -> smallest job of that level no move could serve
        levels, upto = _prefix(mine, level)  # upto[i]: the GPUs of mine[:i]

        def acts(need: Job) -> bool:  # false: the loop below would pass over ``need`` (or fail
            g, lv = need.num_gpus, level(need)  # a move for it, which changes nothing after)
            if g <= free:
                return True
            if not mine or lv >= levels[0] or g >= failed.get(lv, g + 1):
                return False
            # the GPUs of the jobs above ``lv`` (``levels`` descends)
            return free + upto[bisect.bisect_left(levels, -lv, key=_neg)] >= g

        for need in waiting[a].walk(acts, placed):
            if len(moves) >= settings.max_moves or not more():
                break
            g, lv = need.num_gpus, level(need)
            if g <= free:
                free -= g
                continue
            if not mine or lv >= levels[0] or g >= failed.get(lv, g + 1):
                continue
            chosen, freed = [], 0
            for v in mine:
                if level(v) <= lv:
                    break
                chosen.append(v)
                freed += v.num_gpus
                if free + freed >= g:
                    break
            if free + freed < g:
                failed[lv] = min(failed.get(lv, g), g)
                continue
            reasons = {v.job_id: _within_reason(v, need, level, now, settings) for v in chosen}
            moves.append(
                FairMove(
                    need.job_id,
                    a,
                    g,
                    tuple(v.job_id for v in chosen),
                    tuple(v.job_id for v in chosen),
                    reasons,
                )
            )
            taken.update(v.job_id for v in chosen)
            free = free + freed - g
            mine = [v for v in mine if v.job_id not in taken]
            levels, upto = _prefix(mine, level)
    return free, wake


def _neg(x: int) -> int:
    return -x


def _prefix(jobs: Sequence[Job], level) -> tuple[list[int], list[int]]:
    """The levels of ``jobs`` (highest first) and the GPUs of the first i jobs, for each i."""
    levels = [level(v) for v in jobs]
    gpus = [0]
    for v in jobs:
        gpus.append(gpus[-1] + v.num_gpus)
    return levels, gpus


def _reason(
    victim: Job, need: Job, st: Mapping[str, Standing], now: float, settings: LeaseSettings
) -> str:
    ran = now - victim.start_time if victim.start_time is not None else victim.executed_s
    return (
        f"{FAIR_PREFIX}job {victim.job_id} of account {victim.account} yields {victim.num_gpus} GPU(s) "
        f"to job {need.job_id} of account {need.account}; {st[need.account].describe()}; "
        f"{st[victim.account].describe()}; its lease of {settings.lease_s:.0f} s is over (ran {ran:.0f} s)"
    )


def _within_reason(victim: Job, need: Job, level, now: float, settings: LeaseSettings) -> str:
    ran = now - victim.start_time if victim.start_time is not None else victim.executed_s
    return (
        f"job {victim.job_id} of account {victim.account} (queue {level(victim)}) yields "
        f"{victim.num_gpus} GPU(s) to job {need.job_id} of the same account (queue {level(need)}); "
        f"its lease of {settings.lease_s:.0f} s is over (ran {ran:.0f} s)"
    )
