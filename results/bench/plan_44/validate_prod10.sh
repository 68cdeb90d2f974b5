#!/usr/bin/env bash
# Issue 44.5, seventh try (docs/planner.md "Issue 44.5, seventh: the calls' local variability"): the variant under
# test on prod10 (criteria 1-3), then the sixth try's variant (without --local-jitter) beside it, and each profile's
# step concurrency. -> results/bench/plan_44/validate_p10_{lj,no_lj}_*.json, p10_concurrency.txt
set -euo pipefail
here="$(dirname "$0")"
bash "$here/validate_grid.sh" 10 lj --group-cores --jitter --local-jitter --warmup 2
bash "$here/validate_grid.sh" 10 no_lj --group-cores --jitter --warmup 2
cd "$here/../../.."
${PY:-.venv/bin/python} results/bench/plan_44/step_concurrency.py results/bench/plan_profile_prod10 | tee results/bench/plan_44/p10_concurrency.txt
