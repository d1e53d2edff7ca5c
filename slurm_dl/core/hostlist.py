"""Slurm hostlist expressions (``gpu[01-04,07]``, ``a1,b[1-2]``): expand and compress, through
python-hostlist, with a malformed list refused as a ValueError that quotes it."""

from __future__ import annotations

import hostlist as _hostlist

# python-hostlist's reasons, as a site config's reader needs them
_WORDS = {"start > stop": "descending range", "range too large": "range of more than 100,000 names"}


def expand_hostlist(expr: str) -> list[str]:
    """``gpu[01-03]`` → ``['gpu01', 'gpu02', 'gpu03']`` (in order, each name once). Raises
    ValueError on a malformed or empty list, or one of more than 100,000 names."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValueError("empty hostlist")
    try:
        names = _hostlist.expand_hostlist(expr.strip())
    except _hostlist.BadHostlist as e:
        raise ValueError(f"{_WORDS.get(str(e), str(e))} in hostlist {expr!r}") from None
    if not names:
        raise ValueError(f"no names in hostlist {expr!r}")
    return names


def compress_hostlist(names: list[str]) -> str:
    """The inverse of :func:`expand_hostlist`: ``['gpu01', 'gpu02', 'gpu07']`` → ``gpu[01-02,07]``."""
    return _hostlist.collect_hostlist(list(names))
