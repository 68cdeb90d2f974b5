#!/bin/bash
# The quickstart's RL phase at staleness 0 (the previous default) from the same per-seed SFT checkpoints
# as the train-async quickstart runs (runs/qs-async-s$k): a paired check of what asynchrony costs there.
cd /work/main
for k in 0 1 2; do
  echo "seed $k start $(date -u +%T) $(uptime)"
  .venv/bin/python -m vlajax.train rl --preset rl-grpo-tokens --rl.init-from runs/qs-async-s$k/sft/checkpoints \
    --output-dir runs/qs-sync-s$k/rl --rl.num-iterations 20 --rl.eval-every 20 --rl.eval-episodes-per-task 20 \
    --logging.progress plain --seed $k \
    --pipeline.enabled --pipeline.staleness-threshold 0 --pipeline.use-rollout-log-probs > /tmp/s10/qs_sync_s$k.log 2>&1
  echo "seed $k end $(date -u +%T) rc=$? $(uptime)"
done
