#!/usr/bin/env bash
# Issue 44.5, after the third try: how far apart are profiles taken back to back on the quiet machine?
# Three profiles of the prod6 workload one after another (nothing else running), no criterion: descriptive.
# -> results/bench/plan_44/spread/p{1,2,3}/profile.json; then each validates prod6's rows (--warmup 2 and 0).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44/spread
mkdir -p $out
for i in 1 2 3; do
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) profile p$i"
  $PY -m research.planner profile --from-bench results/bench/async_production.json --out $out/p$i > $out/p$i.log 2>&1
done
for i in 1 2 3; do
  for k in 2 0; do
    echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) validate p$i --warmup $k"
    JAX_PLATFORMS=cpu $PY -m research.planner validate --warmup $k --profile-from $out/p$i \
        --runs results/bench/async_production_planval6.json --json $out/validate_warmup${k}_p$i.json | tail -2 | head -1
  done
done
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
