#!/bin/bash
# The quickstart RL phase (train-async, staleness 1) with rl.ratio_level=factor (per-token importance ratios), from the same per-seed SFT checkpoints
# as the train-async quickstart runs (runs/qs-async-s$k). No criterion: evidence for the next session (not a default change).
cd /work/main
for k in 0 1 2; do
  echo "seed $k start $(date -u +%T) $(uptime)"
  .venv/bin/python -m vlajax.train rl --preset rl-grpo-tokens --rl.init-from runs/qs-async-s$k/sft/checkpoints \
    --output-dir runs/qs-factor-s$k/rl --rl.num-iterations 20 --rl.eval-every 20 --rl.eval-episodes-per-task 20 \
    --logging.progress plain --seed $k \
    --pipeline.enabled --pipeline.staleness-threshold 1 --pipeline.no-use-rollout-log-probs --rl.ratio-level factor > /tmp/s10/qs_factor_s$k.log 2>&1
  echo "seed $k end $(date -u +%T) rc=$? $(uptime)"
done
