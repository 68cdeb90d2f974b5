#!/bin/bash
# The quickstart RL phase (train-async, staleness 1) with rl.lr_warmup_steps=20, from the same per-seed SFT checkpoints
# as the train-async quickstart runs (runs/qs-async-s$k): does a warmup of the first 5 updates (20 Adam steps) stop the first-update jump?
bash "$(dirname "$0")/../quickstart-rl-phase.sh" qs-warm /tmp/s10/qs_warm \
  --pipeline.enabled --pipeline.staleness-threshold 1 --pipeline.no-use-rollout-log-probs --rl.lr-warmup-steps 20
