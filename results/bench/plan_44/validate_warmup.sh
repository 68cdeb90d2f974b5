#!/usr/bin/env bash
# Issue 44.5, third try (docs/planner.md "Issue 44.5, third: the measured window's warm-up"): the five stored
# profile x grid pairs with --warmup 2 (criterion 2), and the fresh grid prod6 with its before- and after-profile,
# --warmup 2 (criterion 1) and 0 (reported) -> results/bench/plan_44/validate_warmup2_<grid>.json, validate_warmup0_prod6*.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44
bash $out/validate_comm.sh warmup2 --warmup 2
for k in 2 0; do
  for name in prod6 prod6_after; do
    echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) start $name --warmup $k"
    JAX_PLATFORMS=cpu $PY -m research.planner validate --warmup $k --profile-from results/bench/plan_profile_$name \
        --runs results/bench/async_production_planval6.json --json $out/validate_warmup${k}_$name.json | tail -1
  done
done
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
