#!/usr/bin/env bash
# How much of the sixth attempt's 33.8% is the SFT run itself? Its SFT (same demos, same grounding
# runs/i22b/ground-final, same flags) again with training seeds 1 and 2 (`--seed k --data.shuffle-seed k`:
# the flow/target noise and the batch order), each evaluated once on the standard seed 0 (80 episodes).
# Written 2026-11-26 11:42 UTC before the runs; a measurement of spread, not a new attempt: every figure is
# reported, none is chosen.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22b
py=.venv/bin/python
k=${1:?training seed}
date -u +%H:%M:%S
/usr/bin/time -v $py -m vlajax.train sft --preset sft-small --env.suite object --model.aux-target grasp_place \
    --model.target-conditioning --model.aux-grasp-bins 25 --sft.target-noise 0.1 --sft.aux-start-weight 5 \
    --sft.num-steps 1800 --sft.eval-every -1 --data.dataset-dir $R/demos-swap300 --output-dir $R/final-s$k \
    --sft.init-from $R/ground-final --sft.aux-target-weight 1 --seed $k --data.shuffle-seed $k > $R/sft-s$k.log 2>&1
date -u +%H:%M:%S
$py -m vlajax.train eval --preset sft-small --checkpoint $R/final-s$k/checkpoints --suite object \
    --output-dir $R/final-s$k > $R/eval-s$k.log 2>&1
date -u +%H:%M:%S
