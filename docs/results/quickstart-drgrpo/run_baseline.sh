#!/bin/bash
# Paired baseline for the fresh seeds 3, 4, 5: the quickstart's RL phase from the same SFT checkpoints
# (runs/qs-drg-s$k/sft) with the group-std division kept (the tenth session's quickstart RL flags).
# No criterion: it says whether the Dr. GRPO change is what the lift depends on.
cd /work/main
for k in 3 4 5; do
  echo "seed $k baseline rl start $(date -u +%T) $(uptime)"
  .venv/bin/python -m vlajax.train rl --preset rl-grpo-tokens --rl.init-from runs/qs-drg-s$k/sft/checkpoints \
    --output-dir runs/qs-drg-base-s$k/rl --rl.num-iterations 20 --rl.eval-every 20 --rl.eval-episodes-per-task 20 \
    --logging.video-every 1 --logging.progress plain --seed $k \
    --pipeline.enabled --pipeline.staleness-threshold 1 --pipeline.no-use-rollout-log-probs > /tmp/s11/qs_base_rl_s$k.log 2>&1
  echo "seed $k end $(date -u +%T) rc=$? $(uptime)"
done
