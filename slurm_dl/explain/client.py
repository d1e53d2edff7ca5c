"""``slurm-dl explain`` for a user away from the store: ask the prioritizer's explain endpoint
(``prioritizer/explain_server.py``) with a MUNGE credential."""

from __future__ import annotations

import http.client
import json
from typing import Any

from slurm_dl.core.errors import SlurmDLError
from slurm_dl.slurm.munge import encode


class ExplainAskError(SlurmDLError, OSError):
    """The endpoint is not reachable or refused the question."""


class NotKnown(ExplainAskError):
    """The endpoint answered that the prioritizer has no record of the job."""


def ask(
    host: str,
    port: int,
    job_id: int,
    *,
    live: bool = True,
    munge_socket: str | None = None,
    timeout: float = 15.0,
) -> dict[str, Any]:
    """The endpoint's document for ``job_id`` (what ``explain --json`` prints)."""
    cred = encode(munge_socket)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(
            "GET", f"/explain/{job_id}?live={int(live)}", headers={"Authorization": f"MUNGE {cred}"}
        )
        resp = conn.getresponse()
        body = resp.read()
    except OSError as e:
        raise ExplainAskError(
            f"the prioritizer's explain endpoint {host}:{port} is not reachable: "
            f"{getattr(e, 'strerror', None) or e}"
        ) from None
    finally:
        conn.close()
    try:
        doc = json.loads(body)
    except ValueError:
        raise ExplainAskError(
            f"{host}:{port} did not answer like the prioritizer's explain endpoint "
            f"(HTTP {resp.status})"
        ) from None
    if resp.status == 404 and "no record" in str(doc.get("error")):
        raise NotKnown(str(doc.get("error")))
    if resp.status != 200:
        raise ExplainAskError(str(doc.get("error") or f"HTTP {resp.status}"))
    return doc
