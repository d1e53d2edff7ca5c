"""The prioritizer's tables (sqlmodel). One SQLite file by default; PostgreSQL for a standby.

A change here needs a migration in ``migrations/versions`` and a new ``schema.HEAD``
(tests/unit/test_store_schema.py checks that the migrations build exactly these tables).
"""

from __future__ import annotations

from typing import Optional

from sqlmodel import Field, SQLModel


class LedgerState(SQLModel, table=True):
    """The ledger but its job records and logs as one JSON document
    (``Ledger.to_dict(jobs=False, logs=False)``), saved once per cycle; a store saved before
    job records (or logs) had their own rows holds them here too (``jobs``, ``history``...)."""

    __tablename__ = "sdl_ledger"
    id: int = Field(default=1, primary_key=True)
    data: str
    saved_at: float
    cycle: int = 0
    epoch: int = 0  # the leader epoch of the daemon that saved it (see lease.py)


class LedgerJobRow(SQLModel, table=True):
    """One job record of the ledger (a JSON row of values in the order of the ledger
    document's ``job_fields``), written only when it changed (``Ledger.changed_rows``)."""

    __tablename__ = "sdl_ledger_job"
    job_id: int = Field(primary_key=True)
    data: str


class LedgerEntryRow(SQLModel, table=True):
    """One entry of one of the ledger's logs (``ledger.LOGS``: the history, the finished
    records, the runs) at its place in the whole log (``idx``), as JSON: written once, when it
    was added, and deleted when it leaves the log's front (or when the log was edited otherwise:
    then the log is rewritten)."""

    __tablename__ = "sdl_ledger_entry"
    log: str = Field(primary_key=True)
    idx: int = Field(primary_key=True)
    data: str


class SiteFactorRow(SQLModel, table=True):
    """The SiteFactor last pushed to a job (recorded after the push succeeded)."""

    __tablename__ = "sdl_site_factor"
    job_id: int = Field(primary_key=True)
    value: int
    pushed_at: float
    epoch: int = 0  # the leader epoch of the daemon that pushed it


class PreemptionRow(SQLModel, table=True):
    """One preemption of ``victim_job_id`` for ``need`` (the waiting job it makes room for).

    States: ``signalling`` (written before the signal is sent), ``signalled``, ``requeueing``
    (written before the requeue); closed, the real outcome: ``requeued`` (by slurm-dl),
    ``requeued-self`` (the job's own handler), ``died`` (it died of the signal; requeued by
    slurm-dl), ``finished`` (cancelled, timed out or gone), ``abandoned`` (still running after
    its lead time with nothing waiting for it), ``refused`` (Slurm refused the signal or the
    requeue), ``skipped`` (not signalled: the job was between states).
    """

    __tablename__ = "sdl_preemption"
    id: Optional[int] = Field(default=None, primary_key=True)
    victim_job_id: int = Field(index=True)
    need_job_id: int = Field(index=True)
    state: str = Field(index=True)
    signalled_at: float
    restarts_at_signal: int = 0
    updated_at: float
    reason: str = ""
    epoch: int = 0  # the leader epoch that wrote its last step (a take-over adopts open rows)


class DecisionRow(SQLModel, table=True):
    """Every priority change and preemption step, with its reason (for ``slurm-dl explain``)."""

    __tablename__ = "sdl_decision"
    id: Optional[int] = Field(default=None, primary_key=True)
    at: float = Field(index=True)
    job_id: int = Field(index=True)
    kind: str
    value: Optional[int] = None
    reason: str = ""


class ExplanationSnapshot(SQLModel, table=True):
    """The last cycle's explanations, one JSON object ``{job_id: {...}}`` (overwritten each cycle:
    one write instead of one row per job, and nothing left behind for jobs that ended)."""

    __tablename__ = "sdl_explanations"
    id: int = Field(default=1, primary_key=True)
    at: float
    data: str


class ExplanationPart(SQLModel, table=True):
    """The slow-changing part of one job's explanation (factors, order key, tags …), rewritten
    only when the daemon rebuilds it; the per-cycle numbers (rank, score, SiteFactor, what it
    waits for …) of every job live in :class:`ExplanationSnapshot`, merged in on reading."""

    __tablename__ = "sdl_explanation_part"
    job_id: int = Field(primary_key=True)
    at: float
    data: str


class JobUtilisationRow(SQLModel, table=True):
    """One job's GPU utilisation summary (``slurm_dl.telemetry.summary.JobUtilisationSummary``),
    upserted each cycle the job has samples; read back when the daemon restarts."""

    __tablename__ = "sdl_job_utilisation"
    job_id: int = Field(primary_key=True)
    samples: int = 0
    util_sum: float = 0.0
    peak_util_percent: float = 0.0
    peak_gpu_mem_bytes: int = 0
    first_sample_at: Optional[float] = None
    last_sample_at: Optional[float] = None
    last_busy_at: Optional[float] = None
    idle_since: Optional[float] = None
    verdict: str = "ok"
    warned_at: Optional[float] = None
    action: Optional[str] = None
    action_at: Optional[float] = None
    updated_at: float = Field(default=0.0, index=True)
    gpu_seen: str = "{}"


class ResizeRow(SQLModel, table=True):
    """One resize of an elastic job, an intent written before each Slurm call it announces.

    Open states: ``signalling``/``signalled`` (a running job saves its checkpoint), ``holding``
    (before ``requeuehold``), ``resizing`` (before the size update), ``releasing`` (before the
    release). Closed: ``done``, ``refused`` (Slurm refused the new size: released at its old
    size, tried again after ``next_try_at``), ``finished`` (the job left the queue).
    """

    __tablename__ = "sdl_resize"
    id: Optional[int] = Field(default=None, primary_key=True)
    job_id: int = Field(index=True)
    state: str = Field(index=True)
    from_gpus: int
    to_gpus: int
    to_nodes: int = 0  # 0: a per-job size (TresPerJob)
    restarts_at_start: int = 0
    started_at: float
    updated_at: float
    next_try_at: float = 0.0
    tries: int = 1
    reason: str = ""
    epoch: int = 0  # the leader epoch that wrote its last step (see lease.py)


class LeaderLease(SQLModel, table=True):
    """The prioritizer's leader lease (one row): who acts on Slurm, at which epoch (one more at
    each take-over), until when (``expires_at``, wall clock). See ``lease.py``."""

    __tablename__ = "sdl_leader"
    id: int = Field(default=1, primary_key=True)
    holder: str
    epoch: int
    host: str = ""
    pid: int = 0
    renewed_at: float
    expires_at: float
    taken_at: float = 0.0  # when this epoch began (the take-over)


class JobEnergyRow(SQLModel, table=True):
    """One job's GPU energy on one GPU over one unbroken sum of its gpu-agent (a segment, see
    ``slurm_dl.core.energy``): the largest sum seen, so re-reading a file counts nothing twice.
    A job's energy is the sum of its rows; a user's or an account's, of theirs."""

    __tablename__ = "sdl_job_energy"
    job_id: int = Field(primary_key=True)
    node: str = Field(primary_key=True)
    gpu: int = Field(primary_key=True)
    since: float = Field(primary_key=True)
    user: str = Field(default="", index=True)
    account: str = Field(default="", index=True)
    joules: float = 0.0
    gpu_seconds: float = 0.0
    at: float = 0.0


TABLES = (
    LedgerState,
    SiteFactorRow,
    PreemptionRow,
    DecisionRow,
    ExplanationSnapshot,
    JobUtilisationRow,
    ExplanationPart,
    LedgerJobRow,
    LedgerEntryRow,
    ResizeRow,
    LeaderLease,
    JobEnergyRow,
)
metadata = SQLModel.metadata
