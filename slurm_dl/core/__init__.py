"""The pure policy core: plain data in, decisions out.

Nothing in this package does I/O, reads a clock or talks to Slurm, a database or NVML; the
daemon, the filter, ``dlsubmit --dry-run`` and the simulator all call the same functions here.

- ``model``, ``config``, ``tags``, ``units``, ``hostlist``, ``errors``: the job and cluster
  model, the site config and its validation, the filter's job tags, Slurm's units.
- ``policy/``: priority policies (FIFO, LAS, Gittins, QSSF, fair share, deadlines, combined).
- ``rules/``: the job_submit filter's rules (validate, classify, reshape, tag).
- ``packing``, ``preemption``: GRES-aware placement and the preemption plan.
- ``ledger``, ``sitefactor``, ``priority_weights``: attained service and how scores reach Slurm.
- ``idle``, ``explain``, ``doctor``: idle-GPU verdicts, explanations, config checks.

The edges live beside it: ``slurm_dl.slurm`` (Slurm), ``slurm_dl.store`` (the database),
``slurm_dl.telemetry`` (NVML); the front-ends are ``slurm_dl.cli``, ``slurm_dl.sim``,
``jobsubmit`` and ``prioritizer``.
"""
