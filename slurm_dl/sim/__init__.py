"""The trace-driven simulator: a replay of a trace through the prioritizer's own policies,
packing and preemption planning on a simulated cluster, and the what-ifs built on it.

Imports flow one way, from the bottom up (``tests/unit/test_layering.py`` checks it):

* :mod:`.workloads` and :mod:`.engine` — traces, histories and trace-made jobs; the
  event-driven replay of one cluster (jobs, placement, the disciplines, node groups);
* :mod:`.ranking` and :mod:`.reports` — the policies as the engine's rankers; the figures of a
  finished replay and the tables' HTML, plots and charts;
* the replays themselves: :mod:`.simulate` (a policy on a trace), :mod:`.idle_replay` (the
  idle-allocation policy), :mod:`.sharing` (the GPU-sharing experiment), :mod:`.runner`
  (where replays run) and :mod:`.tune` (the pure parts of ``slurm-dl tune``);
* :mod:`.whatif` — a what-if set up from a command's options: its replays planned, run here or
  as a Slurm job array, and merged.
"""
