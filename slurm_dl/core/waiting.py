"""One account's waiting jobs as the fair-share decision walks them (pure).

The decision (:func:`slurm_dl.core.fairness.plan_fair_preemptions`) goes through an account's
waiting jobs in its within-account order, and most of them it passes over: a job too large for
what is free and for what a move could free does nothing. With a long queue that walk was the
whole cost of a decision. :class:`WaitingJobs` keeps the jobs per GPU count, each list in the
within-account order, and :meth:`WaitingJobs.walk` merges the lists while leaving out, without
looking at its jobs one by one, a list whose next job the caller says it would pass over; the
caller's test is asked again at every step, so a list comes back when what is free grows.

The order is the caller's key, ties (equal keys) in the order the jobs were given. With levels
(LAS queues), the key's first item is the job's level, so the first job of each list holds the
lowest level of that list (:meth:`WaitingJobs.lowest`).
"""

from __future__ import annotations

import bisect
import heapq
from typing import Callable, Container, Iterable, Iterator, Mapping, Sequence

from .model import Job


def _first(entry: tuple) -> object:
    return entry[0]


class WaitingJobs:
    """Waiting jobs per GPU count: ``lists[gpus]`` is a list of ``(key, job)`` sorted by key."""

    __slots__ = ("lists",)

    def __init__(self, lists: Mapping[int, Sequence[tuple]]) -> None:
        self.lists = lists

    @classmethod
    def of(cls, jobs: Iterable[Job], key: Callable[[Job], tuple]) -> "WaitingJobs":
        by: dict[int, list] = {}
        for i, j in enumerate(jobs):
            by.setdefault(j.num_gpus, []).append(((key(j), i), j))
        for lst in by.values():
            lst.sort(key=_first)
        return cls(by)

    def lowest(self, level: Callable[[Job], int], skip: Container[int]) -> int | None:
        """The lowest level among the jobs not in ``skip`` (ids); the key must begin with it."""
        out = None
        for lst in self.lists.values():
            for _, j in lst:
                if j.job_id not in skip:
                    lv = level(j)
                    out = lv if out is None or lv < out else out
                    break
        return out

    def walk(self, keep: Callable[[Job], bool], skip: Container[int] = ()) -> Iterator[Job]:
        """The jobs in order, less those in ``skip`` (ids) and those for which ``keep`` is false
        when their turn comes. ``keep`` reads the caller's state as it is at each step; along
        one list it must not turn true again while that state stays the same (it may depend on
        the job's size and on its level, which grows along a list)."""
        streams = [lst for lst in self.lists.values() if lst]
        pos = [0] * len(streams)
        heap = [(lst[0][0], i) for i, lst in enumerate(streams)]
        heapq.heapify(heap)
        parked: list[int] = []
        last = None  # key of the last job passed
        while heap or parked:
            if parked:  # lists left out come back when their next job would be kept now
                back = []
                for i in parked:
                    lst = streams[i]
                    p = (
                        pos[i]
                        if last is None
                        else bisect.bisect_right(lst, last, pos[i], key=_first)
                    )
                    pos[i] = p
                    if p < len(lst) and keep(lst[p][1]):
                        heapq.heappush(heap, (lst[p][0], i))
                    elif p < len(lst):
                        back.append(i)
                parked = back
                if not heap:
                    return
            k, i = heap[0]
            lst = streams[i]
            job = lst[pos[i]][1]
            last = k
            if job.job_id not in skip:
                if not keep(job):
                    heapq.heappop(heap)
                    parked.append(i)
                    continue
                yield job
            pos[i] += 1
            if pos[i] < len(lst):
                heapq.heapreplace(heap, (lst[pos[i]][0], i))
            else:
                heapq.heappop(heap)
