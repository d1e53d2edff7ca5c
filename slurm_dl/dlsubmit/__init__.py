"""dlsubmit, the users' command: a job described with flags and a command becomes a
checkpoint-friendly sbatch script, shown with ``--dry-run`` or submitted, then followed.

``cli`` is the Typer app (the ``dlsubmit`` entry point) and ``options`` its per-kind options;
``render`` turns a job description and the site config into the script (pure, the templates are
package data in ``slurm_dl/templates``); ``defaults`` finds the site's and the user's defaults;
``checks`` compares a request with the live cluster; ``status`` and ``gpu`` show what Slurm, the
checkpoints and the gpu-agents know about a job.
"""
