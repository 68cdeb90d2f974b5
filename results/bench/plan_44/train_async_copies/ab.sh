#!/bin/bash
# ABAB: bench async sync vs train_async, cpu-sim and mjx, old (0d72436, env-state copies) vs new (no copies)
set -e
OLD=${OLD:?a worktree of 0d72436: git worktree add /tmp/wt_old 0d72436; OLD=/tmp/wt_old}
NEW=$(cd "$(dirname "$0")/../../../.." && pwd)
OUT=$NEW/results/bench/plan_44/train_async_copies
mkdir -p $OUT
for round in 1 2; do
  for side in old new; do
    if [ $side = old ]; then dir=$OLD; else dir=$NEW; fi
    echo "$(date -u +%T) $(cat /proc/loadavg) round $round $side"
    (cd $dir && JAX_PLATFORMS=cpu PYTHONPATH=$dir $NEW/.venv/bin/python -m vlajax.bench async --preset rl-debug --envs 16 --slots 4 --horizon 8 --width 256 --updates 20 --repeats 3 --regimes mjx cpu-sim --modes sync train_async --json $OUT/${side}_r$round.json > /dev/null 2>&1)
  done
done
echo "$(date -u +%T) end"
