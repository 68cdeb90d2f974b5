#!/bin/bash
# the planner on a workload it was not validated on -- the VLA rows of
# results/bench/async_production_vla.json (rl-ppo-flow, sft-small, 18 rows, 04:23-05:05 UTC, HEAD 0f9dff6).
# The profile is taken AFTER the rows (the rows ran first, for their own sake), on the same quiet machine,
# nothing else running -- the "profile after" variant of an earlier protocol.
# Criterion fixed before this runs (the one of acceptance 3): median |predicted / measured - 1| <= 15% over
# the 18 rows, default host (--host probed); per regime and --host affinity also reported. Published either way;
# it decides nothing about issue 20 (acceptance 3 was met on the state-MLP rows).
set -e
cd "$(dirname "$0")/../.."
U=results/bench/plan_validate_vla_uptimes.txt
: > $U
echo "HEAD $(git rev-parse --short HEAD)" >> $U
echo "profile start $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m research.planner profile --from-bench results/bench/async_production_vla.json --out results/bench/plan_profile_vla
echo "profile end $(date -u +%T) $(uptime)" >> $U
.venv/bin/python -m research.planner validate --profile-from results/bench/plan_profile_vla --runs results/bench/async_production_vla.json --json results/bench/plan_validate_vla.json --plot results/planner/planner_validation_vla.png
.venv/bin/python -m research.planner validate --profile-from results/bench/plan_profile_vla --runs results/bench/async_production_vla.json --host affinity --json results/bench/plan_validate_vla_affinity.json
echo "end $(date -u +%T) $(uptime)" >> $U
