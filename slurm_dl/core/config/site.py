"""``[site]``: the site's name and the prioritizer's database."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from ..database_url import DEFAULT_DATABASE_URL, relative_sqlite_problem
from .base import Strict


class SiteInfo(Strict):
    name: str = Field("site", description="a name for the site, shown by slurm-dl config check")
    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL of the prioritizer's store (its "
        "ledger, decisions and explanations): an absolute SQLite path, or PostgreSQL for a "
        "standby controller (keep the password out of it: the file is world-readable); "
        "every command's --db overrides it",
    )

    @field_validator("database_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(
            r"^[A-Za-z][A-Za-z0-9+_-]*://", v
        ):  # the rest is checked when the store opens it
            raise ValueError(
                f"not a database URL; allowed: dialect://..., e.g. {DEFAULT_DATABASE_URL}"
            )
        problem = relative_sqlite_problem(v)
        if problem:
            raise ValueError(problem)
        return v
