#!/bin/bash
# #20.3 re-validation on a quiet machine (lead, run 17:36-17:45 UTC at HEAD bafc720). Criterion fixed before: median |pred/meas-1| <= 15% over 18 rows (default --host probed headline; affinity also reported).
set -e
cd /work/main
U=results/bench/plan_validate_prod3_uptimes.txt
: > $U
echo "HEAD $(git rev-parse --short HEAD)" >> $U
echo "profile-before start $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m research.planner profile --from-bench results/bench/async_production.json --out results/bench/plan_profile_prod3
echo "bench start $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m vlajax.bench async --preset rl-debug --envs 16 --slots 4 --horizon 8 --width 256 --updates 20 --repeats 3 --farm-scale 20 --json results/bench/async_production_planval3.json
echo "profile-after start $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m research.planner profile --from-bench results/bench/async_production.json --out results/bench/plan_profile_prod3_after
echo "end $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m research.planner validate --profile-from results/bench/plan_profile_prod3 --runs results/bench/async_production_planval3.json --json results/bench/plan_validate_prod3.json --plot results/planner/planner_validation_prod3.png
.venv/bin/python -m research.planner validate --profile-from results/bench/plan_profile_prod3 --runs results/bench/async_production_planval3.json --host affinity --json results/bench/plan_validate_prod3_affinity.json
