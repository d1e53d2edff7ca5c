"""The store's resize intents (:class:`~slurm_dl.store.models.ResizeRow`): each write also
records a decision row, so ``slurm-dl explain`` shows every resize step with its reason."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import select

from .models import DecisionRow, ResizeRow

RESIZE_OPEN_STATES = ("signalling", "signalled", "holding", "resizing", "releasing", "updating")


def begin_resize(store, row: ResizeRow) -> int:
    """Commit a new intent (its first state) BEFORE its first Slurm call; returns its id. Like
    every resize write, only while this process holds the leader lease (``Store.fence``)."""
    try:
        with store._session() as s, s.begin():
            store._fenced(s.connection())
            row.epoch = store.epoch
            s.add(row)
            s.flush()
            s.add(_decision(row, row.started_at, row.reason))
            return int(row.id)
    except SQLAlchemyError as e:
        raise store._fail("recording a resize", e) from None


def set_resize_state(store, row_id: int, state: str, now: float, note: str = "", **fields) -> None:
    try:
        with store._session() as s, s.begin():
            store._fenced(s.connection())
            row = s.get(ResizeRow, row_id)
            if row is None:
                raise LookupError(f"resize {row_id} does not exist")
            row.state, row.updated_at, row.epoch = state, now, store.epoch
            for key, value in fields.items():
                setattr(row, key, value)
            s.add(_decision(row, now, note or row.reason))
    except SQLAlchemyError as e:
        raise store._fail("updating a resize", e) from None


def resizes(store, *, open_only: bool = False, job_id: int | None = None) -> list[ResizeRow]:
    """Resize rows, oldest first."""
    q = select(ResizeRow).order_by(ResizeRow.id)
    if open_only:
        q = q.where(ResizeRow.state.in_(RESIZE_OPEN_STATES))
    if job_id is not None:
        q = q.where(ResizeRow.job_id == job_id)
    try:
        with store._session() as s:
            rows = list(s.exec(q))
            s.expunge_all()
            return rows
    except SQLAlchemyError as e:
        raise store._fail("reading resizes", e) from None


def _decision(row: ResizeRow, now: float, reason: str) -> DecisionRow:
    return DecisionRow(
        at=now, job_id=row.job_id, kind=f"resize-{row.state}", value=row.to_gpus, reason=reason
    )
