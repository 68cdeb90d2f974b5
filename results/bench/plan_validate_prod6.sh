#!/bin/bash
# Issue 44.5, third try (pre-registered in docs/planner.md "Issue 44.5, third: the measured window's
# warm-up", 40baee8): a fresh grid, the prod4 protocol unchanged but the names -- profile before, the 18-row grid,
# profile after; nothing else running. The validations (both profiles, --warmup 2 and 0) run after it:
# results/bench/plan_44/validate_warmup.sh.
set -e
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
U=results/bench/plan_validate_prod6_uptimes.txt
: > $U
echo "HEAD $(git rev-parse --short HEAD)" >> $U
echo "profile-before start $(date -u +%T) $(uptime)" >> $U
$PY -m research.planner profile --from-bench results/bench/async_production.json --out results/bench/plan_profile_prod6
echo "bench start $(date -u +%T) $(uptime)" >> $U
$PY -m vlajax.bench async --preset rl-debug --envs 16 --slots 4 --horizon 8 --width 256 --updates 20 --repeats 3 --farm-scale 20 --json results/bench/async_production_planval6.json
echo "profile-after start $(date -u +%T) $(uptime)" >> $U
$PY -m research.planner profile --from-bench results/bench/async_production.json --out results/bench/plan_profile_prod6_after
echo "end $(date -u +%T) $(uptime)" >> $U
