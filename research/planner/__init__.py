"""The throughput planner: a discrete-event model of the async pipeline (`python -m research.planner`).

`costs` (what components cost), `sim` (the SimPy model), `profile` (measuring the costs of the
bench's RL workload on this machine), `presets` (costs from the seed papers for pods),
`validate` (predictions vs the bench's measured rows). See `experiments/planner`.
"""
