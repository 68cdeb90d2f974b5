#!/bin/bash
# issue 21.3 diagnostic (no criterion, no default change): does the entropy rise under per-token ratios come
# from the asymmetric clip (0.2 / 0.28, DAPO's clip-higher)? The development seeds' factor-40 recipe
# (results/runs/quickstart-factor40: train-async staleness 1, --rl.ratio-level factor, 40 updates) run from the same SFT
# starts with a symmetric clip (--rl.clip-high 0.2), then both policies evaluated on 128 episodes (diag_sampled_eval.py).
# Hypothesis stated before the runs: with the symmetric clip the per-decision entropy does not rise (last quarter <= first
# quarter) in all three seeds, and the sampled policy gains more than factor-40 did (+0.8 / +4.0 / +3.1).
set -u
cd "${VLAJAX_CHECKOUT:-/work/main}"
out=results/runs/quickstart-symclip
for k in 0 1 2; do
  echo "seed $k rl start $(date -u +%T) $(uptime)"
  rm -rf runs/qs-sym-s$k
  .venv/bin/python -m vlajax.train rl --preset rl-grpo-tokens --rl.init-from runs/qs-async-s$k/sft/checkpoints \
    --output-dir runs/qs-sym-s$k/rl --rl.num-iterations 40 --rl.eval-every 40 --rl.eval-episodes-per-task 20 \
    --logging.progress plain --seed $k \
    --pipeline.enabled --pipeline.staleness-threshold 1 --pipeline.no-use-rollout-log-probs --rl.ratio-level factor \
    --rl.clip-high 0.2 > /tmp/s12/sym_s$k.log 2>&1
  echo "seed $k rl end $(date -u +%T) rc=$? $(uptime)"
  mkdir -p $out/seed$k
  cp runs/qs-sym-s$k/rl/eval/iteration-0/eval.json $out/seed$k/eval-before-rl.json
  cp runs/qs-sym-s$k/rl/eval/iteration-40/eval.json $out/seed$k/eval-after-rl.json
  cp runs/qs-sym-s$k/rl/async_metrics.jsonl $out/seed$k/
  .venv/bin/python results/runs/quickstart-drgrpo/diag_sampled_eval.py $k runs/qs-async-s$k/sft/checkpoints \
    runs/qs-sym-s$k/rl/checkpoints > $out/seed$k/greedy_vs_sampled.txt 2>/tmp/s12/symdiag_s$k.err
  echo "seed $k diag end $(date -u +%T) rc=$? $(uptime)"
done
