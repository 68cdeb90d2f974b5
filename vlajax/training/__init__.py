"""The run plumbing shared by every trainer: the device mesh and sharding, multi-host start-up,
the train state, Orbax checkpoints, stop requests, metrics and progress, trainable masks."""
