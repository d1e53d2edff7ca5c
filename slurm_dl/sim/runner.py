"""Where a what-if's replays run: here one after the other, or in a pool of local processes.

A what-if is a list of independent tasks (each a policy's :class:`~.simulate.Replay`); the
caller gives ``execute(task, on_finish)`` that runs one and returns its output. Workers are
forked from this process once the trace is read, so they find the jobs, the site configs and
the rankers' settings already in memory: only the task's index goes to a worker and only its
output comes back (no job list is pickled). The outputs are handed to ``on_done`` as they
arrive; the caller merges them in a fixed order, so what it prints does not depend on which
worker ran what. ``tick(tasks_done, jobs_done)`` reports progress (jobs counted as they finish
inside the replays, in every worker).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

# What a forked worker runs: set just before the pool forks, read in the workers.
_EXECUTE: Callable | None = None
_TASKS: Sequence = ()
_FINISHED = None  # a shared counter of jobs finished in every worker
_PACK: Callable | None = None
SMALL = 5000  # fewer replayed jobs than this: a pool costs more than it saves


class Task(NamedTuple):
    """A what-if's task: the ``run``-th planned policy's ``replay`` (a :class:`~.simulate.Replay`)."""

    run: int
    replay: object

    @property
    def jobs(self) -> int:
        return self.replay.jobs


@dataclass(frozen=True)
class RankerRecipe:
    """How to make one planned policy's ranker: plain data, so that a replay run in another
    process or a Slurm array task makes the very ranker this process would."""

    name: str
    thresholds: list | None = None
    starvation: float | None = None
    prior: list | None = None
    boost_s: float | None = None
    shares: dict | None = None
    config: object = None
    backfill: bool = (
        False  # --slurm-backfill: the policy orders the queue, Slurm's backfill starts jobs
    )

    def __call__(self):
        from .ranking.ranker import make_ranker

        r = make_ranker(
            self.name,
            las_thresholds=self.thresholds,
            starvation=self.starvation,
            prior=self.prior,
            boost_s=self.boost_s,
            shares=self.shares,
            config=self.config,
        )
        if self.backfill:
            r.discipline = "backfill"
        return r


class ReplayFailed(Exception):
    """A task raised ``error`` (a ValueError: a bad cluster for the trace)."""

    def __init__(self, index: int, error: BaseException):
        super().__init__(str(error))
        self.index, self.error = index, error


def cores() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def workers_for(
    asked: int | None, tasks: Sequence, jobs_of: Callable[[object], int], small: int | None = None
) -> int:
    """How many processes to use: ``asked`` (None: every core), no more than there are tasks,
    and one for a small what-if."""
    n = cores() if asked is None else asked
    if len(tasks) < 2 or sum(jobs_of(t) for t in tasks) < (SMALL if small is None else small):
        return 1
    return max(1, min(n, len(tasks)))


def run_tasks(
    tasks: Sequence,
    execute: Callable,
    on_done: Callable[[int, object], None],
    *,
    workers: int = 1,
    order: Sequence[int] | None = None,
    tick: Callable[[int, int], None] | None = None,
    poll_s: float = 0.25,
    pack: Callable[[object], object] | None = None,
    unpack: Callable[[int, object], object] | None = None,
) -> None:
    """Run every task; ``on_done(index, output)`` as each finishes. ``order``: the order to
    start them in (e.g. largest first within a policy); outputs may arrive in any order.
    Raises :class:`ReplayFailed` for a task that raised ValueError (the others stop).
    ``pack``/``unpack(index, packed)``: how an output crosses from a worker (not used here)."""
    order = list(order) if order is not None else list(range(len(tasks)))
    if workers <= 1:
        _serial(tasks, execute, on_done, order, tick)
        return
    global _EXECUTE, _TASKS, _FINISHED, _PACK
    ctx = mp.get_context("fork")
    _EXECUTE, _TASKS, _FINISHED, _PACK = execute, tasks, ctx.Value("q", 0, lock=True), pack
    done = 0
    pool = ctx.Pool(workers)
    try:
        results = pool.imap_unordered(_work, order, chunksize=1)
        while done < len(tasks):
            try:
                i, out, err = results.next(timeout=poll_s)
            except mp.TimeoutError:
                if tick is not None:
                    tick(done, _FINISHED.value)
                continue
            if err is not None:
                raise ReplayFailed(i, err)
            done += 1
            on_done(i, unpack(i, out) if unpack is not None else out)
            if tick is not None:
                tick(done, _FINISHED.value)
        pool.close()
    finally:
        pool.terminate()
        pool.join()
        _EXECUTE, _TASKS, _FINISHED, _PACK = None, (), None, None


def _serial(tasks, execute, on_done, order, tick) -> None:
    finished = 0
    for done, i in enumerate(order):

        def on_finish(_now: float, n: int, base=finished) -> None:
            if tick is not None:
                tick(done, base + n)

        try:
            out = execute(tasks[i], on_finish)
        except ValueError as e:
            raise ReplayFailed(i, e) from None
        finished += _jobs(tasks[i])
        on_done(i, out)
        if tick is not None:
            tick(done + 1, finished)


def _jobs(task) -> int:
    return int(getattr(task, "jobs", 0))


def _work(i: int):
    """In a worker: run task ``i``; (index, output, error)."""
    seen = 0

    def on_finish(_now: float, n: int) -> None:
        nonlocal seen
        if n - seen >= 200:  # a shared counter: touch it now and then, not at every event
            with _FINISHED.get_lock():
                _FINISHED.value += n - seen
            seen = n

    task = _TASKS[i]
    try:
        out = _EXECUTE(task, on_finish)
    except ValueError as e:
        return i, None, e
    with _FINISHED.get_lock():
        _FINISHED.value += _jobs(task) - seen
    return i, _PACK(out) if _PACK is not None else out, None
