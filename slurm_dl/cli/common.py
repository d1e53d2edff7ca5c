"""What every CLI shares: turning expected errors into one line and a non-zero exit."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import typer

from ..core.errors import SlurmDLError
from ..core.jobid import JobRef


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


def job_id_of(ref: JobRef) -> int:
    """The job id Slurm keeps ``ref`` under: a plain id as it is; an array task's own id (its
    array's, noted on stderr, while it waits) or a hetjob part's, as squeue lists them."""
    from ..slurm.job_lookup import find_job

    found = find_job(ref)
    if found.note:
        typer.echo(f"note: {found.note}", err=True)
    return found.job_id
