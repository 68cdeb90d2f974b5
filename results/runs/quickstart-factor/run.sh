#!/bin/bash
# The quickstart RL phase (train-async, staleness 1) with rl.ratio_level=factor (per-token importance ratios), from the same per-seed SFT checkpoints
# as the train-async quickstart runs (runs/qs-async-s$k). No criterion: evidence for the next session (not a default change).
bash "$(dirname "$0")/../quickstart-rl-phase.sh" qs-factor /tmp/s10/qs_factor \
  --pipeline.enabled --pipeline.staleness-threshold 1 --pipeline.no-use-rollout-log-probs --rl.ratio-level factor
