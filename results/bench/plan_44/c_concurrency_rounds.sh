#!/usr/bin/env bash
# Issue 44.5 after the fifth try, descriptive (no criterion): is the C MuJoCo slot steps' measured concurrency
# steadier with more rounds? Three C-only profiles of prod8's workload, 28 timed rounds each, back to back,
# nothing else running -> results/bench/plan_44/c_concurrency_rounds/r{1,2,3}/profile.json; summary by
# c_concurrency_rounds.py beside it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44/c_concurrency_rounds
for i in 1 2 3; do
  echo "r$i start $(date -u +%T) $(cat /proc/loadavg)"
  $PY -m research.planner profile --from-bench results/bench/async_production.json --physics c --repeats 28 --out $out/r$i > /dev/null
done
echo "end $(date -u +%T) $(cat /proc/loadavg)"
