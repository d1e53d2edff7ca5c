"""``slurm-dl``: the admin CLI. Each command group lives in its own module."""

from __future__ import annotations

import typer

from . import config_cmd

app = typer.Typer(
    name="slurm-dl",
    help="Deep-learning GPU scheduling on Slurm: site config, simulator, testbed, filter, prioritizer.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(config_cmd.app, name="config")
# Command groups register below, one line each.
from . import testbed_cmd  # noqa: E402
app.add_typer(testbed_cmd.app, name="testbed")
from . import filter_cmd  # noqa: E402
app.add_typer(filter_cmd.app, name="filter")
from . import prioritizer_cmd  # noqa: E402
app.add_typer(prioritizer_cmd.app, name="prioritizer")
app.command("explain")(prioritizer_cmd.explain)
from . import simulate_cmd  # noqa: E402
app.command("simulate", help=simulate_cmd.HELP, no_args_is_help=True)(simulate_cmd.simulate)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
