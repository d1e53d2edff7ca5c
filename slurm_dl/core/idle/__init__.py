"""The idle-allocation policy's pure parts: which running jobs hold GPUs they do not use and
what becomes of them (:mod:`.decide`), and the short notes slurm-dl leaves in a job's comment
(:mod:`.notice`). The daemon acts on them (``prioritizer/idle_watch.py``); the simulator
replays them (``slurm_dl.sim.idle_replay``)."""
