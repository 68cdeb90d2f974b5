#!/bin/bash
# issue 21.3 development check (seeds 0-2, the starts the earlier variants were tried on):
# the earlier per-token-ratio runs (results/runs/quickstart-factor: train-async staleness 1,
# --rl.ratio-level factor, 20 updates) continued to 40 updates from their update-20 checkpoints
# (runs/qs-factor-s$k/rl/checkpoints/20, copied; rl resumes from the newest checkpoint), evaluated at update 40 on
# the same 80 greedy episodes as their updates 0 and 20.
# Rule fixed before the runs: the held-out quickstart runs (fresh seeds 6, 7, 8) use factor + 40 updates only if the
# mean lift at update 40 over seeds 0-2 is >= 15 points; otherwise no new recipe goes to the held-out seeds.
set -u
cd "${VLAJAX_CHECKOUT:-/work/main}"
out=results/runs/quickstart-factor40
for k in 0 1 2; do
  src=runs/qs-factor-s$k/rl dst=runs/qs-f40-s$k/rl
  rm -rf "$dst" && mkdir -p "$dst/checkpoints"
  cp -r "$src/checkpoints/20" "$src/checkpoints/config.json" "$src/checkpoints/policy.json" "$dst/checkpoints/"
  cp "$src/async_metrics.jsonl" "$dst/"
  echo "seed $k rl start $(date -u +%T) $(uptime)"
  .venv/bin/python -m vlajax.train rl --preset rl-grpo-tokens --rl.init-from runs/qs-async-s$k/sft/checkpoints \
    --output-dir "$dst" --rl.num-iterations 40 --rl.eval-every 20 --rl.eval-episodes-per-task 20 \
    --logging.progress plain --seed $k \
    --pipeline.enabled --pipeline.staleness-threshold 1 --pipeline.no-use-rollout-log-probs --rl.ratio-level factor \
    > "/tmp/s12/f40_s$k.log" 2>&1
  echo "seed $k end $(date -u +%T) rc=$? $(uptime)"
  mkdir -p "$out/seed$k"
  cp "$dst/eval/iteration-40/eval.json" "$out/seed$k/eval-update-40.json" 2>/dev/null
  cp "$dst/async_metrics.jsonl" "/tmp/s12/f40_s$k.log" "$out/seed$k/" 2>/dev/null
done
