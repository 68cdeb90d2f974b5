#!/bin/bash
# Issue 21.3: the quickstart with Dr. GRPO advantages (--rl.no-group-std-normalize, in
# vlajax/quickstart/run.py). Criterion fixed before the runs: mean lift >= 15 points over the FRESH seeds 3, 4, 5
# (full `make quickstart` runs). Seeds 0, 1, 2 (where the mechanism was diagnosed) re-run the RL phase alone from
# their existing SFT checkpoints (runs/qs-async-s$k, bit-identical to what the quickstart builds for that seed),
# with exactly the quickstart's RL flags; reported beside the four earlier variants, not part of the criterion.
# The quickstart passed --rl.no-group-std-normalize from efc43e2 until 0717d1e (reverted: the criterion failed).
# To reproduce seeds 3-5, run this script in a checkout of efc43e2 (`git worktree add /tmp/drg efc43e2`, with a .venv).
here=$(cd "$(dirname "$0")" && pwd)
cd "${VLAJAX_CHECKOUT:-/work/main}"
for k in 3 4 5; do
  echo "seed $k quickstart start $(date -u +%T) $(uptime)"
  VLAJAX_QUICKSTART_SEED=$k VLAJAX_QUICKSTART_DIR=runs/qs-drg-s$k .venv/bin/python -m vlajax.quickstart > /tmp/s11/qs_drg_s$k.log 2>&1
  echo "seed $k end $(date -u +%T) rc=$? $(uptime)"
done
bash "$here/../quickstart-rl-phase.sh" qs-drg /tmp/s11/qs_drg_rl --logging.video-every 1 \
  --pipeline.enabled --pipeline.staleness-threshold 1 --pipeline.no-use-rollout-log-probs --rl.no-group-std-normalize
