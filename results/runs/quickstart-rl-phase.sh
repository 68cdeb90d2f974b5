#!/bin/bash
# The quickstart's RL phase alone (rl-grpo-tokens, 20 updates, evaluated before and after on 20 episodes per task)
# for seeds 0, 1, 2, each from its train-async quickstart's SFT checkpoint (runs/qs-async-s$k/sft/checkpoints),
# with the given flags. Shared by the quickstart variants' run.sh scripts.
#   usage: quickstart-rl-phase.sh RUN_PREFIX LOG_PREFIX [flags ...]
#   writes runs/RUN_PREFIX-s$k/rl and LOG_PREFIX_s$k.log for k = 0, 1, 2
set -u
run=$1 log=$2
shift 2
mkdir -p "$(dirname "$log")"
cd "${VLAJAX_CHECKOUT:-/work/main}"
for k in 0 1 2; do
  echo "seed $k rl start $(date -u +%T) $(uptime)"
  .venv/bin/python -m vlajax.train rl --preset rl-grpo-tokens --rl.init-from runs/qs-async-s$k/sft/checkpoints \
    --output-dir runs/$run-s$k/rl --rl.num-iterations 20 --rl.eval-every 20 --rl.eval-episodes-per-task 20 \
    --logging.progress plain --seed $k "$@" > "${log}_s$k.log" 2>&1
  echo "seed $k end $(date -u +%T) rc=$? $(uptime)"
done
