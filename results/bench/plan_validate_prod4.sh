#!/bin/bash
# #20.3 validation prod4 (helper): the model with the slot steps' measured concurrency.
# Criterion fixed before: median |pred/meas-1| <= 15% over the 18 rows (default --host probed headline; affinity also reported).
set -e
cd /work/main
trap "touch /tmp/s12/grid_done" EXIT  # the lead waits for this whatever happens
U=results/bench/plan_validate_prod4_uptimes.txt
: > $U
echo "HEAD $(git rev-parse --short HEAD)" >> $U
echo "profile-before start $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m research.planner profile --from-bench results/bench/async_production.json --out results/bench/plan_profile_prod4
echo "bench start $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m vlajax.bench async --preset rl-debug --envs 16 --slots 4 --horizon 8 --width 256 --updates 20 --repeats 3 --farm-scale 20 --json results/bench/async_production_planval4.json
echo "profile-after start $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m research.planner profile --from-bench results/bench/async_production.json --out results/bench/plan_profile_prod4_after
echo "end $(date -u +%T) $(uptime)" >> $U
touch /tmp/s12/grid_done
.venv/bin/python -m research.planner validate --profile-from results/bench/plan_profile_prod4 --runs results/bench/async_production_planval4.json --json results/bench/plan_validate_prod4.json --plot results/planner/planner_validation_prod4.png
.venv/bin/python -m research.planner validate --profile-from results/bench/plan_profile_prod4 --runs results/bench/async_production_planval4.json --host affinity --json results/bench/plan_validate_prod4_affinity.json
