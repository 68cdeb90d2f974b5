#!/bin/bash
# The validation protocol adopted in issue 44.5's eighth try (docs/planner.md "Issue 44.5, eighth: profiles
# interleaved with the grid's repeats"): the 18-row grid (the prod4 command, 3 repeats) with a profile
# (--concurrency-repeats 28) before its first repeat, between its repeats and after its last (bench async
# --between-repeats: p0 p1 p2 p3); nothing else running. Usage: plan_validate_interleaved.sh N [REPEATS [EVERY]]
# (defaults 3 1; EVERY 2: a profile before repeats 0, 2, 4, ... and after the last) ->
# results/bench/async_production_planvalN.json, results/bench/plan_profile_prodN/pK (K = the repeat it precedes),
# results/bench/plan_validate_prodN_uptimes.txt. Then: results/bench/plan_44/validate_interleaved.sh N
# Another grid: GRID='--preset rl-ppo-flow' FROM_BENCH=results/bench/async_production_vla.json (the VLA from pixels,
# docs/planner.md "Twenty-first session"); N is then best a label such as vla2.
set -e
N=${1:?usage: plan_validate_interleaved.sh N [REPEATS [EVERY]]}
REPEATS=${2:-3}
EVERY=${3:-1}
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
P=results/bench/plan_profile_prod$N
U=results/bench/plan_validate_prod${N}_uptimes.txt
: > $U
echo "HEAD $(git rev-parse --short HEAD)" >> $U
echo "profile flags --concurrency-repeats 28; repeats $REPEATS, a profile every $EVERY" >> $U
GRID=${GRID:---preset rl-debug --envs 16 --slots 4 --horizon 8 --width 256 --farm-scale 20}  # the prod4 grid
FROM_BENCH=${FROM_BENCH:-results/bench/async_production.json}  # the workload the profiles measure
echo "grid $GRID; profiles of $FROM_BENCH's workload" >> $U
echo "bench start $(date -u +%T) $(uptime)" >> $U
$PY -m vlajax.bench async $GRID --updates 20 --repeats $REPEATS --json results/bench/async_production_planval$N.json \
  --between-repeats "[ \$((VLAJAX_BENCH_REPEAT % $EVERY)) -ne 0 ] && [ \$VLAJAX_BENCH_REPEAT -ne $REPEATS ] && exit 0; echo \"profile p\$VLAJAX_BENCH_REPEAT start \$(date -u +%T) \$(uptime)\" >> $U && $PY -m research.planner profile --from-bench $FROM_BENCH --out $P/p\$VLAJAX_BENCH_REPEAT --concurrency-repeats 28"
echo "end $(date -u +%T) $(uptime)" >> $U
