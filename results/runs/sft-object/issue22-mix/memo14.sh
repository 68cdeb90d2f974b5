#!/usr/bin/env bash
# Issue 22.4 diagnostic (decides nothing; written 2026-11-27 03:26 UTC before it ran): an earlier memo.sh for the
# fourteenth attempt's checkpoint. The aux head's error on episodes' first frames, on the SFT's own demos against
# 200 new demos (runs/i22d/demos-heldout, --seed 1): did the grounding frames remove the underfitting (sixth recipe:
# grasp x/y 0.19/0.42 own, 0.19/0.34 new)?
set -euo pipefail
cd "$(dirname "$0")/../../../.."
py=.venv/bin/python
for ds in train heldout; do
  d=$([ $ds = train ] && echo runs/i22b/demos-swap300 || echo runs/i22d/demos-heldout)
  $py experiments/object_suite_probes.py --probes inputs --checkpoint runs/i22f/final/checkpoints --dataset $d \
      --aux-frames start --batches 100 --json results/runs/sft-object/issue22-mix/memo-i22f-$ds.json \
      > runs/i22f/memo-$ds.log 2>&1
  date -u +%H:%M:%S
done
