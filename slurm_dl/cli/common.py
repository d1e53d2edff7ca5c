"""What every CLI shares: turning expected errors into one line and a non-zero exit."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import typer

from ..core.errors import SlurmDLError


def fail(message: str, code: int = 1) -> "typer.Exit":
    """Print ``error: message`` to stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextlib.contextmanager
def expected_errors() -> Iterator[None]:
    """Expected failures (bad config, Slurm down, bad trace…) end as a message, not a traceback."""
    try:
        yield
    except SlurmDLError as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(130) from None
    except BrokenPipeError:
        sys.stderr.close()
        raise typer.Exit(0) from None
