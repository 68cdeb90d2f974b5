#!/bin/bash
# The quickstart's RL phase at staleness 0 (the previous default) from the same per-seed SFT checkpoints
# as the train-async quickstart runs (runs/qs-async-s$k): a paired check of what asynchrony costs there.
bash "$(dirname "$0")/../quickstart-rl-phase.sh" qs-sync /tmp/s10/qs_sync \
  --pipeline.enabled --pipeline.staleness-threshold 0 --pipeline.use-rollout-log-probs
