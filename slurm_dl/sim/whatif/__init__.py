"""A what-if set up from the options of ``simulate`` and ``tune``: the GPU types and node groups
asked for, and the progress bar of its replays."""
