"""Why a job waits, for users: the explanation the prioritizer stores for each pending job,
gathered (:mod:`.query`, from the database or the daemon's endpoint through :mod:`.client`)
and put in words (:mod:`.view`). ``slurm-dl explain`` and ``dlsubmit status`` show it."""
