"""``--version`` for both commands: the package, the store's schema and the filter protocol.

An admin compares these between a login node's dlsubmit, the controller's filter service and
the prioritizer before an upgrade or in a bug report.
"""

from __future__ import annotations

import importlib
from typing import Optional

import typer

from .. import __version__


def version_lines(command: str) -> list[str]:
    lines = [f"{command} (slurm-dl) {__version__}"]
    schema = _attr("slurm_dl.store", ("SCHEMA_VERSION", "schema_version"))
    lines.append(f"store schema: {schema if schema is not None else 'unversioned'}")
    proto = _attr("jobsubmit.protocol", ("PROTOCOL_VERSION",))
    lines.append(f"filter protocol: {proto if proto is not None else 'not installed'}")
    return lines


def _attr(module: str, names: tuple[str, ...]) -> object | None:
    try:  # optional parts: the store needs SQLAlchemy, the filter is a separate package
        mod = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - a missing or broken optional part only hides its line's value
        return None
    for name in names:
        value = getattr(mod, name, None)
        if value is not None:
            return value() if callable(value) else value
    return None


def version_option(command: str):
    """A ``--version`` option for a Typer callback."""

    def show(value: bool) -> None:
        if value:
            for line in version_lines(command):
                typer.echo(line)
            raise typer.Exit()

    return typer.Option(
        None,
        "--version",
        callback=show,
        is_eager=True,
        help="print the versions of slurm-dl, its store schema and filter protocol",
    )


VersionOpt = Optional[bool]
