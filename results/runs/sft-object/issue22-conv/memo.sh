#!/usr/bin/env bash
# Issue 22.4 diagnostic (decides nothing; written 2026-11-26 after the twelfth attempt's results, before this ran):
# does the SFT memorize the choice of cube per demo scene? The aux head's error on the first frames of episodes
# (fingertips within 2 cm of the start: nothing but the scene and the instruction gives the target), on the SFT's
# own 1200 training demos against 200 new demos from the same generator with another seed (--seed 1). Each
# dataset normalizes its targets by its own statistics (vlajax.data.source.grasp_place_targets); 1.0 = predicting
# the mean. Checkpoints: the sixth attempt's recipe (runs/i22b/final, patch stem, 33.8% on seed 0) and the
# twelfth (b)'s (runs/i22d/final, conv stem, 25.0%). Reading fixed now: train << held-out = memorization.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
py=.venv/bin/python
stamp() { date -u +%H:%M:%S; uptime; }
H=runs/i22d/demos-heldout
stamp
[ -d $H ] || /usr/bin/time -f "%e s wall" $py -m vlajax.train demos --preset sft-small --suite object \
    --episodes-per-task 50 --data.demo-target-swap --env.num-envs 48 --seed 1 --out $H > runs/i22d/demos-heldout.log 2>&1
stamp
for ck in i22b i22d; do
  for ds in train heldout; do
    d=$([ $ds = train ] && echo runs/i22b/demos-swap300 || echo $H)
    $py experiments/object_suite_probes.py --probes inputs --checkpoint runs/$ck/final/checkpoints --dataset $d \
        --aux-frames start --batches 100 --json runs/i22d/memo-$ck-$ds.json > runs/i22d/memo-$ck-$ds.log 2>&1
    stamp
  done
done
