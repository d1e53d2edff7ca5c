"""A what-if set up from the options of ``simulate`` and ``tune``: the replay settings of each
site config and the cluster they run on (:mod:`.setup`, :mod:`.speeds` for the GPU types asked),
the runs planned and replayed here, in local processes or as a Slurm job array (:mod:`.plan`),
``simulate``'s whole what-if (:mod:`.run`), what it writes (:mod:`.results`) and the progress
bar of its replays (:mod:`.progress`)."""
