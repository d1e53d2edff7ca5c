"""What slurmctld runs with: ``scontrol show config`` as a dict (for ``slurm-dl doctor``)."""

from __future__ import annotations

import re
from typing import Mapping

from .runner import run_slurm

_LINE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*)\s*=\s*(?P<value>.*?)\s*$")


def parse_show_config(text: str) -> dict[str, str]:
    """``Key = Value`` lines of ``scontrol show config``; the header and blank lines are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group("key") not in out:
            out[m.group("key")] = m.group("value")
    return out


def controller_config(
    env: Mapping[str, str] | None = None, timeout: float = 10.0
) -> dict[str, str]:
    """The running controller's configuration (raises SlurmError / SlurmUnavailableError)."""
    return parse_show_config(
        run_slurm(["scontrol", "show", "config"], env=env, timeout=timeout).stdout
    )
