"""Editing the TOML text of a site config in place (comments and layout kept): the testbed writes
its own site.toml from a template this way."""

from __future__ import annotations

import json
import re

_HEADER = re.compile(
    r"^[ \t]*\[\[?([^\[\]]+)\]\]?[ \t]*(#.*)?$", re.MULTILINE
)  # [table], [[array]]


def with_setting(config_text: str, section: str, key: str, value: str | int) -> str:
    """The TOML text of a site config with ``[section] key`` set to the string ``value``
    (or number; replaced where the section has it, else added at the section's top; a missing section
    is added at the end). Comments and everything else stay as they were."""
    line = f"{key} = {json.dumps(value)}"
    headers = list(_HEADER.finditer(config_text))
    for i, m in enumerate(headers):
        if m.group(1).strip() != section:
            continue
        end = headers[i + 1].start() if i + 1 < len(headers) else len(config_text)
        body = config_text[m.end() : end]
        body, n = re.subn(rf"(?m)^[ \t]*{re.escape(key)}[ \t]*=.*$", lambda _m: line, body, count=1)
        if not n:
            body = "\n" + line + body
        return config_text[: m.end()] + body + config_text[end:]
    sep = "" if not config_text or config_text.endswith("\n") else "\n"
    return f"{config_text}{sep}\n[{section}]\n{line}\n"


def with_database_url(config_text: str, url: str) -> str:
    """The TOML text of a site config with its ``[site] database_url`` set to ``url``."""
    return with_setting(config_text, "site", "database_url", url)
