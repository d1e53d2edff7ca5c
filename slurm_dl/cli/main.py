"""``slurm-dl``: the admin CLI. Each command group lives in its own module.

The core's own groups are imported here. The groups of the edge packages (``jobsubmit``: the
filter; ``prioritizer``: the daemon and ``explain``) import ``slurm_dl``, never the reverse, so
they are found through the ``slurm_dl.commands`` entry-point group declared in pyproject.toml;
each entry point is a function that adds its commands to the app.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from . import (
    config_cmd,
    db_cmd,
    doctor_cmd,
    gpu_agent_cmd,
    power_cmd,
    simulate_cmd,
    testbed_cmd,
    tune_cmd,
)
from .version import VersionOpt, version_option

app = typer.Typer(
    name="slurm-dl",
    help="""Deep-learning GPU scheduling on Slurm: the admin's commands.

    Users submit with dlsubmit; slurm-dl checks the site config, runs the
    prioritizer and the submit filter, explains a job's priority, replays
    traces in the simulator and starts a local test cluster.

    \b
    Examples:
      slurm-dl config check site.toml
      slurm-dl explain 1234
      slurm-dl testbed up --dir /tmp/tb
    """,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(version: VersionOpt = version_option("slurm-dl")) -> None:
    pass


app.add_typer(config_cmd.app, name="config")
app.add_typer(testbed_cmd.app, name="testbed")
app.add_typer(db_cmd.app, name="db")
app.add_typer(power_cmd.app, name="power")
app.command("doctor", help=doctor_cmd.HELP)(doctor_cmd.doctor)
app.command("simulate", help=simulate_cmd.HELP, no_args_is_help=True)(simulate_cmd.simulate)
app.command("tune", help=tune_cmd.HELP, no_args_is_help=True)(tune_cmd.tune)
app.command("gpu-agent", help=gpu_agent_cmd.HELP)(gpu_agent_cmd.gpu_agent)


def _load_plugins() -> None:
    for ep in sorted(entry_points(group="slurm_dl.commands"), key=lambda e: e.name):
        ep.load()(app)


_load_plugins()


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
