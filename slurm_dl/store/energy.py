"""The store's job energy (:class:`~slurm_dl.store.models.JobEnergyRow`): segments written
with the cycle, only ever raised (:func:`slurm_dl.core.energy.grew`), read back per job, user
or account."""

from __future__ import annotations

from typing import Iterable

from sqlalchemy import insert, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import select

from ..core.energy import EnergySegment, EnergyTotal, SegmentKey, grew, totals
from .models import JobEnergyRow

_CHUNK = 500


def write_energy(conn, segs: Iterable[EnergySegment]) -> int:
    """Raise (or add) each segment's row inside the caller's transaction; a row that already
    says as much or more is left as it is. Returns the rows written."""
    todo = {s.key: s for s in segs}
    ids = sorted({k[0] for k in todo})
    t = JobEnergyRow.__table__
    have: dict[SegmentKey, EnergySegment] = {}
    for i in range(0, len(ids), _CHUNK):
        for r in conn.execute(t.select().where(t.c.job_id.in_(ids[i : i + _CHUNK]))):
            have[(r.job_id, r.node, r.gpu, r.since)] = _segment(r)
    new, raised = [], 0
    for key, seg in todo.items():
        old = have.get(key)
        if old is None:
            new.append(_row(seg))
        elif grew(old, seg):
            c = t.c
            conn.execute(
                update(t)
                .where(c.job_id == key[0], c.node == key[1], c.gpu == key[2], c.since == key[3])
                .values(joules=seg.joules, gpu_seconds=seg.gpu_seconds, at=seg.at)
            )
            raised += 1
    if new:
        conn.execute(insert(t), new)
    return len(new) + raised


def energy_segments(store, job_ids: Iterable[int] | None = None) -> list[EnergySegment]:
    """Stored segments (all, or those of ``job_ids``)."""
    q = select(JobEnergyRow)
    try:
        with store._session() as s:
            if job_ids is None:
                return [_segment(r) for r in s.exec(q)]
            ids, out = sorted(set(job_ids)), []
            for i in range(0, len(ids), _CHUNK):
                rows = s.exec(q.where(JobEnergyRow.job_id.in_(ids[i : i + _CHUNK])))
                out += [_segment(r) for r in rows]
            return out
    except SQLAlchemyError as e:
        raise store._fail("reading job energy", e) from None


def job_energy(store, job_id: int) -> EnergyTotal | None:
    """The job's energy over all its runs; None when nothing was measured."""
    return totals(energy_segments(store, [job_id])).get(job_id)


def energy_by(store, by: str) -> dict:
    """Energy per ``"job"``, ``"user"`` or ``"account"`` over every stored job."""
    return totals(energy_segments(store), by)


def _segment(r) -> EnergySegment:
    return EnergySegment(
        r.job_id, r.node, r.gpu, r.since, r.joules, r.gpu_seconds, r.at, r.user, r.account
    )


def _row(s: EnergySegment) -> dict:
    return {
        "job_id": s.job_id,
        "node": s.node,
        "gpu": s.gpu,
        "since": s.since,
        "user": s.user,
        "account": s.account,
        "joules": s.joules,
        "gpu_seconds": s.gpu_seconds,
        "at": s.at,
    }
