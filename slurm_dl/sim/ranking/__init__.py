"""How the engine orders jobs: the policy core's policies as rankers, with the simulator's
ledgers, the lease decision's ranker side and service charged per GPU type."""
