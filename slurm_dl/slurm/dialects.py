"""Which Slurm release printed a ``--json`` document, and its records in one shape (pure).

Slurm's JSON changes between releases (the ``data_parser`` version):

- 22.05 (openapi v0.0.38): ``job_state`` is a string (``"PENDING"``), numbers are plain, node
  records come from ``sinfo --json`` with ``state`` (lower case) and ``state_flags``.
- 24.11 (data_parser v0.0.42) and 26.05 (v0.0.45): ``job_state`` is a list (base state, then
  flags such as ``COMPLETING`` or ``REQUEUED``), numbers are ``{set, infinite, number}`` objects,
  and ``sinfo --json`` groups nodes, so per-node records come from ``scontrol show nodes --json``
  (``state`` is a list). TRES strings say ``gres/gpu:3`` where 22.05 says ``gres:gpu:3``.

``dialect_of`` reads a document's ``meta`` and refuses releases it does not know with a message
naming the supported ones; ``job_record``/``node_record`` turn a record of any known dialect
into the 22.05 shape the parsers read (objects stay objects: ``parse._num`` reads both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..core.errors import SlurmError


@dataclass(frozen=True)
class Dialect:
    release: str  # "24.11"
    data_parser: str  # "v0.0.42"

    @property
    def lists_states(self) -> bool:
        return self.data_parser != "v0.0.38"

    @property
    def node_command(self) -> tuple[str, ...]:
        """The command that lists one record per node in this dialect."""
        return (
            ("sinfo", "--json")
            if self.data_parser == "v0.0.38"
            else ("scontrol", "show", "nodes", "--json")
        )


# Release -> data_parser version of its squeue/sinfo/scontrol --json (checked on each release).
SUPPORTED: dict[str, str] = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}
DIALECTS = {r: Dialect(r, v) for r, v in SUPPORTED.items()}


def supported_text() -> str:
    return ", ".join(f"{r} (data_parser {v})" for r, v in SUPPORTED.items())


def unsupported(release: str | None, parser: str | None, what: str) -> SlurmError:
    seen = f"Slurm {release or 'of an unknown release'}" + (
        f" with data_parser {parser}" if parser else ""
    )
    return SlurmError(f"{what}: {seen} is not supported; supported: {supported_text()}")


def release_of_version(text: str) -> str | None:
    """``slurm 24.11.5`` / ``slurm-wlm 22.05.8`` / ``24.11.5`` -> ``24.11``."""
    m = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", text or "")
    return f"{int(m.group(1)):02d}.{int(m.group(2)):02d}" if m else None


def dialect_for_release(release: str | None, what: str = "Slurm") -> Dialect:
    if release not in DIALECTS:
        raise unsupported(release, None, what)
    return DIALECTS[release]


def _meta_release(meta: Mapping[str, Any]) -> str | None:
    for key in ("slurm", "Slurm"):
        info = meta.get(key)
        if isinstance(info, Mapping):
            if info.get("release"):
                return release_of_version(str(info["release"]))
            version = info.get("version")
            if isinstance(version, Mapping) and version.get("major") is not None:
                return f"{int(version['major']):02d}.{int(version['minor']):02d}"
    return None


def _meta_parser(meta: Mapping[str, Any]) -> str | None:
    plugin = meta.get("plugin")
    if not isinstance(plugin, Mapping):
        return None
    for key in ("data_parser", "type"):  # 23.02+: "data_parser/v0.0.42"; 22.05: "openapi/v0.0.38"
        m = re.search(r"v\d+\.\d+\.\d+", str(plugin.get(key) or ""))
        if m:
            return m.group(0)
    return None


def dialect_of(doc: Mapping[str, Any], what: str = "Slurm's JSON") -> Dialect:
    """The dialect named by a document's ``meta``; SlurmError naming the supported ones otherwise."""
    meta = doc.get("meta")
    if not isinstance(meta, Mapping):
        raise SlurmError(
            f"{what}: no 'meta' in the document, cannot tell the Slurm release; "
            f"supported: {supported_text()}"
        )
    release, parser = _meta_release(meta), _meta_parser(meta)
    if parser is not None and release in DIALECTS and DIALECTS[release].data_parser == parser:
        return DIALECTS[release]
    known = {v: r for r, v in SUPPORTED.items()}
    if release is None and parser in known:
        return DIALECTS[known[parser]]
    raise unsupported(release, parser, what)


# What 22.05's job_state_string() printed for a state with these flags (first match wins).
_FLAG_STATES = (
    "COMPLETING",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
    "STAGE_OUT",
)


def state_text(value: Any) -> str:
    """``"RUNNING"`` or ``["RUNNING", "COMPLETING"]`` -> the one word 22.05 printed."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        words = [str(v).upper() for v in value]
        for flag in _FLAG_STATES:
            if flag in words[1:]:
                return flag
        return words[0] if words else ""
    return "" if value is None else str(value)


def job_record(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """A job record of any known dialect in the 22.05 shape."""
    if isinstance(raw.get("job_state"), (list, tuple)):
        return {**raw, "job_state": state_text(raw["job_state"])}
    return raw


def node_record(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """A node record (22.05 ``sinfo --json`` or 23.02+ ``scontrol show nodes --json``) in the 22.05 shape."""
    state = raw.get("state")
    if isinstance(state, (list, tuple)):
        words = [str(s) for s in state]
        return {
            **raw,
            "state": (words[0] if words else "unknown").lower(),
            "state_flags": [*words[1:], *(raw.get("state_flags") or [])],
        }
    return raw
