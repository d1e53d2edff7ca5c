"""The prioritizer's explain endpoint: ``slurm-dl explain`` for users on login nodes.

Users on a login node have neither the prioritizer's store nor its database password. The
daemon answers ``GET /explain/JOBID`` on ``[prioritizer] explain_port``; each request carries a
MUNGE credential (``Authorization: MUNGE <credential>``) made by the caller, which munged on the
controller decodes to a uid, as slurmctld does for every Slurm command. A user sees only their
own jobs; root and the daemon's own user see every job. Read-only: nothing here changes the
store or Slurm.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from slurm_dl.daemon.bounded_http import BoundedHTTPServer, Request, Response
from slurm_dl.core.errors import SlurmDLError
from slurm_dl.slurm.munge import MungeError, MungeIdentity, decode

from slurm_dl.explain.query import NoRecord, gather, payload

log = logging.getLogger("slurm_dl.prioritizer.explain")
PATH = re.compile(
    r"^/explain/(\d{1,10})(\?live=(0|1))?$", re.ASCII
)  # ASCII digits only: int() reads ٢٧ too


class ExplainServerError(SlurmDLError, OSError):
    """The explain endpoint cannot listen."""


def user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


@dataclass
class Answer:
    status: int
    doc: dict[str, Any]


def answer(
    job_id: int,
    who: MungeIdentity,
    store,
    live: bool,
    admin_uids: frozenset[int],
    backend: str = "cli",
) -> Answer:
    """What the endpoint replies to ``who`` asking about ``job_id``."""
    try:
        g = gather(store, job_id, with_queue=False)
    except NoRecord:
        return Answer(
            404,
            {
                "error": f"job {job_id}: the prioritizer has no record of it (not seen by a "
                "cycle yet?)"
            },
        )
    if who.uid not in admin_uids:
        name = user_name(who.uid)
        if g.owner is None:  # only decisions are left (the job finished and was forgotten)
            return Answer(
                404,
                {
                    "error": f"job {job_id}: the prioritizer no longer knows whose job it "
                    "was (finished a while ago?); an admin can still explain it"
                },
            )
        if name is None or g.owner != name:
            return Answer(
                403,
                {
                    "error": f"job {job_id} is not yours (you are {name or f'uid {who.uid}'}); "
                    "you can explain your own jobs"
                },
            )
    g.queue = store.explanations() if g.expl is not None else {}
    return Answer(200, payload(g, live=live, backend=backend))


class ExplainServer:
    """A :class:`~slurm_dl.bounded_http.BoundedHTTPServer` (a cap on open connections, a deadline
    for the request head, no bodies) in daemon threads; ``close()`` stops it."""

    def __init__(
        self,
        store_factory: Callable[[], Any],
        address: str,
        port: int,
        munge_socket: str | None = None,
        admin_uids: frozenset[int] | None = None,
        backend: str = "cli",
    ) -> None:
        """``backend``: the Slurm backend the live facts are read with (the daemon's)."""
        self._store = store_factory()
        self.backend = backend
        self._lock = threading.Lock()  # one store session at a time
        self.munge_socket = munge_socket
        self.admin_uids = admin_uids if admin_uids is not None else frozenset({0, os.getuid()})
        try:
            self._http = BoundedHTTPServer(address, port, self._serve, name="explain")
        except OSError as e:
            raise ExplainServerError(
                f"explain endpoint {address}:{port}: cannot listen: {e.strerror or e}"
            ) from None
        self.address, self.port = address, self._http.port

    def _serve(self, request: Request) -> Response:
        a = self.handle(request.target, request.headers.get("authorization", ""))
        return Response(a.status, json.dumps(a.doc, sort_keys=True).encode(), "application/json")

    def handle(self, path: str, authorization: str) -> Answer:
        m = PATH.match(path)
        if not m:
            return Answer(404, {"error": "unknown path; ask GET /explain/JOBID"})
        scheme, _, cred = authorization.partition(" ")
        if scheme != "MUNGE" or not cred:
            return Answer(401, {"error": "no MUNGE credential (Authorization: MUNGE <credential>)"})
        try:
            who = decode(cred.strip(), self.munge_socket)
        except MungeError as e:
            return Answer(401, {"error": str(e)})
        try:
            with self._lock:
                a = answer(
                    int(m.group(1)),
                    who,
                    self._store,
                    m.group(3) != "0",
                    self.admin_uids,
                    self.backend,
                )
        except SlurmDLError as e:
            return Answer(
                503, {"error": f"the prioritizer's store cannot answer: {str(e).splitlines()[0]}"}
            )
        log.info("explain %s for uid %d: %d", m.group(1), who.uid, a.status)
        return a

    def close(self) -> None:
        self._http.close()
