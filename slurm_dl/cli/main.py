"""``slurm-dl``: the admin CLI. Each command group lives in its own module.

The core's own groups are imported here. The groups of the edge packages (``jobsubmit``: the
filter; ``prioritizer``: the daemon and ``explain``) import ``slurm_dl``, never the reverse, so
they are found through the ``slurm_dl.commands`` entry-point group declared in pyproject.toml;
each entry point is a function that adds its commands to the app.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from . import config_cmd, gpu_agent_cmd, simulate_cmd, testbed_cmd

app = typer.Typer(
    name="slurm-dl",
    help="Deep-learning GPU scheduling on Slurm: site config, simulator, testbed, filter, prioritizer.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(config_cmd.app, name="config")
app.add_typer(testbed_cmd.app, name="testbed")
app.command("simulate", help=simulate_cmd.HELP, no_args_is_help=True)(simulate_cmd.simulate)
app.command("gpu-agent", help=gpu_agent_cmd.HELP)(gpu_agent_cmd.gpu_agent)


def _load_plugins() -> None:
    for ep in sorted(entry_points(group="slurm_dl.commands"), key=lambda e: e.name):
        ep.load()(app)


_load_plugins()


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
