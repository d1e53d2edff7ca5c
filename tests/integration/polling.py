"""Waiting on a live cluster: poll until something is true, fail with what was awaited."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(
    what: str,
    check: Callable[[], object],
    timeout: float = 90.0,
    poll: float = 0.5,
    between: Callable[[], object] | None = None,
):
    """Poll ``check`` until it returns something truthy (returned); raise AssertionError naming
    ``what`` past ``timeout`` seconds. ``between`` runs after each miss (e.g. a prioritizer cycle)."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        if between is not None:
            between()
        time.sleep(poll)
