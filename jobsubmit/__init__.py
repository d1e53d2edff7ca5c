"""The job_submit filter: ``job_submit.lua`` (the shim slurmctld loads), the Unix-socket filter
service that runs the pure rules in :mod:`slurm_dl.core.rules`, and the code that installs the shim."""
