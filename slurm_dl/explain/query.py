"""One job's explanation as ``slurm-dl explain`` prints it, built from the store and Slurm.

The same code answers a local ``explain`` (an admin on the controller, with the store at hand)
and the prioritizer's explain endpoint (a user on a login node, who sees only their own jobs).
:func:`explanation` picks between the two the same way for ``slurm-dl explain`` and
``dlsubmit status``: the store where it can be read, else the endpoint.
"""

from __future__ import annotations

import os
import textwrap
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from slurm_dl.core.errors import SlurmDLError, StoreError


class NoRecord(LookupError):
    """The prioritizer has never written anything about the job."""


class NoWayToAsk(SlurmDLError):
    """The store cannot be read here and the site has no explain endpoint (or it is not asked)."""


class NeitherAnswers(SlurmDLError):
    """The store cannot be read here and the explain endpoint did not answer either."""


def _wrapped(head: str, reason: str) -> list[str]:
    """``head reason`` as lines of at most 80 columns, indented under a message's first line."""
    return textwrap.wrap(
        f"{head} {reason}".strip(),
        78,
        initial_indent="  ",
        subsequent_indent="    ",
        break_on_hyphens=False,  # a path or URL breaks only where it must
    )


def source_of(cfg, db: str | None = None, via_prioritizer: bool = False) -> tuple[str, str]:
    """("store", URL) when the prioritizer's store is to be read here first (any database but a
    SQLite file this user cannot read; :func:`explanation` still falls back to the endpoint when
    it cannot be opened or read), ("endpoint", "HOST:PORT") when the site's explain endpoint is
    to be asked; NoWayToAsk when neither."""
    from slurm_dl.core.database_url import database_url, shown_url, sqlite_path

    pc = cfg.prioritizer
    url = database_url(cfg, db)
    path = sqlite_path(url)
    readable = path is None or os.access(path, os.R_OK)
    if readable and not via_prioritizer:
        return "store", url
    if db is None and pc.explain_port:
        return "endpoint", f"{pc.explain_host}:{pc.explain_port}"
    if via_prioritizer and readable:
        raise NoWayToAsk(
            "--via-prioritizer: the site config has no [prioritizer] explain_port,\n"
            "  so there is no prioritizer to ask"
        )
    raise NoWayToAsk(_no_endpoint(f"database {shown_url(url)}: this user cannot read it"))


def _no_endpoint(reason: str) -> str:
    return "\n".join(
        [
            "the prioritizer's database cannot be read here:",
            *_wrapped("", reason),
            "  and the site config has no [prioritizer] explain_port to ask the",
            "  prioritizer instead. Ask your admins to turn on its explain endpoint,",
            "  or run this where the database is readable (see --db).",
        ]
    )


def explanation(
    cfg,
    job_id: int,
    *,
    db: str | None = None,
    via_prioritizer: bool = False,
    live: bool = True,
    stores: dict | None = None,
    backend: str | None = None,
) -> dict[str, Any]:
    """The :func:`payload` document for ``job_id``, from the store or the explain endpoint.
    The store first where :func:`source_of` says so; one that cannot be opened or read here
    (no login, no password, no grant, an unreadable file: any database) falls back to the
    endpoint, unless ``db`` names the store. NoRecord when the prioritizer knows nothing of
    the job; NoWayToAsk when the store fails and there is no endpoint; NeitherAnswers when
    both fail; the endpoint's ExplainAskError/MungeError when it alone was asked and failed
    (SlurmDLError all). ``stores``: opened stores (or why one failed) by URL, kept for the
    next call (a table of many jobs). ``backend``: the Slurm backend the live facts are read
    with (None: ``[slurm] backend``)."""
    from slurm_dl.core.errors import StoreError

    kind, where = source_of(cfg, db, via_prioritizer)
    store_failed: str | None = None
    if kind == "store":
        kept = stores if stores is not None else {}
        try:
            store = kept.get(where)
            if isinstance(store, StoreError):
                raise store
            if store is None:
                from slurm_dl.store import Store

                # a reader: a missing or empty store is named, not made
                store = kept[where] = Store(where, create=False)
            return payload(gather(store, job_id), live=live, backend=backend or cfg.slurm.backend)
        except StoreError as e:
            kept[where] = e  # the next job of a table goes straight to the endpoint
            if db is not None:
                raise  # the store named on the command line: nothing else to ask
            if not cfg.prioritizer.explain_port:
                raise NoWayToAsk(_no_endpoint(str(e).splitlines()[0])) from None
            store_failed = str(e).splitlines()[0]
    elif not via_prioritizer:
        from slurm_dl.core.database_url import database_url, shown_url

        store_failed = f"database {shown_url(database_url(cfg, db))}: this user cannot read it"
    from slurm_dl.explain.client import NotKnown, ask

    pc = cfg.prioritizer
    try:
        return ask(
            pc.explain_host, pc.explain_port, job_id, live=live, munge_socket=pc.munge_socket
        )
    except NotKnown:
        raise NoRecord(job_id) from None
    except SlurmDLError as e:
        if store_failed is None:
            raise
        raise NeitherAnswers(
            "\n".join(
                [
                    "the prioritizer could not be asked here:",
                    *_wrapped("", store_failed),
                    *_wrapped("and its explain endpoint:", str(e).splitlines()[0]),
                    "  Is the prioritizer running? Ask your admins, or run this where its",
                    "  database can be read (see --db).",
                ]
            )
        ) from None


@dataclass
class Gathered:
    job_id: int
    expl: dict | None
    queue: dict = field(default_factory=dict)
    decisions: list[dict] = field(default_factory=list)
    preemptions: list[dict] = field(default_factory=list)
    energy: dict | None = None  # the job's GPU energy (core.energy.EnergyTotal.to_dict)

    @property
    def owner(self) -> str | None:
        """The job's user as the prioritizer recorded it (None: no explanation left)."""
        return (self.expl or {}).get("user") or None


def gather(store, job_id: int, *, with_queue: bool = True) -> Gathered:
    """What the store holds about ``job_id``; NoRecord when it holds nothing."""
    expl = store.explanation(job_id)
    queue = store.explanations() if expl is not None and with_queue else {}
    decisions = [
        {"at": d.at, "kind": d.kind, "value": d.value, "reason": d.reason}
        for d in store.decisions(job_id)
    ]
    rows = store.preemptions(victim=job_id)
    notes = store.preemption_notes(job_id) if rows else {}
    preemptions = [
        {
            "victim": p.victim_job_id,
            "need": p.need_job_id,
            "state": p.state,
            "signalled_at": p.signalled_at,
            "updated_at": p.updated_at,
            "reason": p.reason,
            "note": notes.get((p.need_job_id, p.state, p.updated_at), ""),
        }
        for p in rows
    ]
    energy = _energy(store, job_id)
    if expl is None and not decisions and not preemptions and energy is None:
        raise NoRecord(job_id)
    return Gathered(job_id, expl, queue, decisions, preemptions, energy)


def _energy(store, job_id: int) -> dict | None:
    """The job's GPU energy over all its runs; None when none was measured (or a store from
    before energy was kept cannot say)."""
    from slurm_dl.store.energy import job_energy

    try:
        total = job_energy(store, job_id)
    except StoreError:
        return None
    return total.to_dict() if total is not None else None


def payload(g: Gathered, live: bool = True, backend: str = "cli") -> dict[str, Any]:
    """The document ``explain --json`` prints: the view plus decisions and preemptions, or
    ``state: GONE`` for a job that no longer waits or runs."""
    if g.expl is None or "factors" not in g.expl:
        return {
            "job_id": g.job_id,
            "state": "GONE",
            "decisions": g.decisions,
            "preemptions": g.preemptions,
            "energy": g.energy,
        }
    from slurm_dl.explain.view import explain_view

    estimate, free, releases, live_note = (
        live_facts(g.job_id, g.expl, backend)
        if live
        else (None, None, None, "not asked (--no-live)")
    )
    view = explain_view(
        g.expl,
        g.queue,
        estimate=estimate,
        preemptions=g.preemptions,
        free_gpus_per_node=free,
        now=time.time(),
        releases=releases,
    )
    view["live"] = live_note
    return {**view, "decisions": g.decisions, "preemptions": g.preemptions, "energy": g.energy}


def render_text(doc: dict[str, Any], detail: bool = False) -> str:
    """The text ``explain`` prints for a :func:`payload` document: for people, or with
    ``detail`` the tiers, scores, SiteFactor and recent decisions."""
    if doc.get("state") == "GONE":
        lines = [f"job {doc['job_id']}: no longer waiting or running"]
        if doc.get("energy"):
            lines.append(energy_line(doc))
        if detail:
            lines += [f"  {d['kind']}: {d['reason']}" for d in doc.get("decisions", [])]
        return "\n".join(lines)
    from slurm_dl.explain.view import explain_text, people_text

    text = explain_text(doc, doc.get("decisions", [])) if detail else people_text(doc)
    if doc.get("energy") or doc.get("state") == "RUNNING":
        text += "\n" + energy_line(doc)
    if doc.get("live", "ok") != "ok":
        text += "\n" + "\n".join(
            textwrap.wrap(f"(Slurm: {doc['live']})", 80, subsequent_indent="  ")
        )
    return text


def energy_line(doc: dict[str, Any]) -> str:
    """'energy: 1.500 kWh over 4.0 GPU-hours (0.38 kWh per GPU-hour)', or 'no energy data'."""
    from slurm_dl.core.energy import energy_words

    return f"energy: {energy_words(doc.get('energy'))}"


LIVE_VIEW_SECONDS = (
    15.0  # how long the explain endpoint reuses one read of the nodes and running jobs
)
_view_lock = threading.Lock()
_view: dict[tuple[str | None, bool], tuple[float, list, list]] = {}


def _cluster_view(backend, with_running: bool) -> tuple[list, list]:
    """The nodes and (``with_running``) the running jobs, read at most once per
    :data:`LIVE_VIEW_SECONDS` per cluster: the explain endpoint answers many users, and each
    running-job read makes slurmctld pack the whole queue. One at a time: a burst of questions
    waits for the read in progress instead of sending its own."""
    key = (os.environ.get("SLURM_CONF"), with_running)
    with _view_lock:
        hit = _view.get(key)
        if hit is not None and time.monotonic() - hit[0] < LIVE_VIEW_SECONDS:
            return hit[1], hit[2]
        nodes = backend.nodes()
        running = [j for j in backend.jobs() if j.running] if with_running else []
        _view[key] = (time.monotonic(), nodes, running)
        return nodes, running


def live_facts(
    job_id: int, expl: dict, backend_name: str = "cli"
) -> tuple[dict | None, list[int] | None, list | None, str]:
    """Slurm's start estimate for a waiting job, the free GPUs per node and when each node's
    running jobs end at their time limits, read through the ``backend_name`` backend; never
    fails (a pyslurm that cannot load is named in the note)."""
    from slurm_dl.core.errors import SlurmDLError
    from slurm_dl.slurm import get_backend
    from slurm_dl.slurm.estimates import expected_starts

    try:  # a short timeout: explain answers from the store even when Slurm is slow or away
        backend = get_backend(backend_name, timeout=5.0)
        pending = expl.get("state") == "PENDING"
        nodes, running = _cluster_view(backend, with_running=pending)
        starts = expected_starts([job_id]) if pending else {}
    except SlurmDLError as e:
        return None, None, None, f"not reachable ({str(e).splitlines()[0][:60]})"
    ends: dict[str, list[tuple[float, int]]] = {n.name: [] for n in nodes}
    for j in running:
        if j.start_time and j.time_limit and j.nodes:
            per_node = max(1, j.num_gpus // len(j.nodes))
            for name in j.nodes:
                ends.setdefault(name, []).append((j.start_time + j.time_limit, per_node))
    releases = [(n.gpus_free, ends.get(n.name, [])) for n in nodes if n.available]
    est = {"at": starts[job_id], "source": "slurm"} if job_id in starts else None
    return est, [n.gpus_free for n in nodes], releases, "ok"
