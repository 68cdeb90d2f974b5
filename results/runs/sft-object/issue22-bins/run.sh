#!/usr/bin/env bash
# Issue 22.4, sixth attempt: the grasp point as a CLASSIFICATION (model.aux_grasp_bins = 25: a 25 x 25 grid
# over the normalized plane, cross-entropy against a Gaussian of half a bin, decoded as the local 3 x 3
# expectation around the most likely bin) instead of a regression.
#
# WHY (from the fifth attempt, results/runs/sft-object/issue22-ground): the target-conditioned action head
# succeeds 75-85% on eval seed 7 given the TRUE target, and the grounding picks the named cube for 88% of
# held-out first frames, but the policy's own predicted grasp point has a median error of 5-10 cm. An MSE
# head that is unsure between two cubes predicts their middle, where there is no cube; a classification
# head read at its mode picks one cube and lands on it (to a bin: 2.4 cm in x, 0.8 cm in y here).
# Nothing else changes: same demos (deterministic generator), same grounding data and steps, the fifth
# attempt's best SFT settings (dev4: W 5, noise 0.1, aux weight 5).
#
# CRITERION (written 2026-11-26 10:05 UTC, before any run of this attempt; not changed after): the same as
#   the fifth attempt's: met <=> mean success >= 0.60 on the standard evaluation (`eval`, seed 0, 20
#   episodes per task = 80) of the policy from ONE recipe (demos + grounding + SFT) whose summed stage wall
#   time is <= 60 minutes on this shared 2-core machine. Seed 0 is evaluated once, on the recipe's checkpoint.
# DEVELOPMENT RULE (fixed now): two dev SFTs on eval seed 7 (10 episodes per task,
#   experiments/object_suite_target_probe.py), from one dev grounding, on the fifth attempt's demos
#   (runs/i22g/demos-swap300 = the recipe's stage 1 output: the generator is deterministic):
#     devA: --sft.aux-target-weight 5 (dev4's; the cross-entropy is ~5x the MSE's scale, so the aux term weighs more)
#     devB: --sft.aux-target-weight 1
#   recipe-2 runs with the better of devA / devB by seed-7 success with the predicted target, if that is
#   >= 40% (the fifth attempt's best: 20%); otherwise no seed-0 evaluation and the dev numbers are published.
#   recipe-1 (fresh demos + grounding; independent of the SFT settings) runs beside the dev runs.
#   Usage: bash run.sh dev-ground; bash run.sh dev A|B; bash run.sh recipe-1; W_AUX=.. bash run.sh recipe-2
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22b
py=.venv/bin/python
stamp() { date -u +%H:%M:%S; uptime; }
GROUND="--scenes 1000 --heldout-scenes 100 --steps 2000 --state-token --target-conditioning --aux-grasp-bins 25"
SFT="--preset sft-small --env.suite object --model.aux-target grasp_place --model.target-conditioning
     --model.aux-grasp-bins 25 --sft.target-noise 0.1 --sft.aux-start-weight 5 --sft.num-steps 1800 --sft.eval-every -1"
case "${1:-}" in
  dev-ground)
    stamp; /usr/bin/time -v $py experiments/object_suite_binding.py $GROUND --save-init $R/ground --json $R/ground.json \
        > $R/ground.log 2>&1; stamp ;;
  dev)
    v=${2:?A or B}; w=$([ "$v" = A ] && echo 5 || echo 1)
    stamp; /usr/bin/time -v $py -m vlajax.train sft $SFT --data.dataset-dir runs/i22g/demos-swap300 \
        --output-dir $R/dev$v --sft.init-from $R/ground --sft.aux-target-weight $w > $R/dev$v.log 2>&1; stamp
    $py experiments/object_suite_target_probe.py --checkpoint $R/dev$v/checkpoints --eval-seed 7 \
        --episodes-per-task 10 --json $R/probe-dev$v-pred.json > $R/probe-dev$v.log 2>&1; stamp ;;
  recipe-1)
    T0=$(date +%s)
    stamp; /usr/bin/time -v $py -m vlajax.train demos --preset sft-small --suite object --episodes-per-task 300 \
        --data.demo-target-swap --env.num-envs 48 --out $R/demos-swap300 > $R/recipe-demos.log 2>&1; stamp
    stamp; /usr/bin/time -v $py experiments/object_suite_binding.py $GROUND --save-init $R/ground-final \
        --json $R/ground-final.json > $R/recipe-ground.log 2>&1; stamp
    echo $(( $(date +%s) - T0 )) > $R/recipe-1.seconds
    echo "stages 1-2 took $(cat $R/recipe-1.seconds) s" ;;
  recipe-2)
    left=$(( (3600 - $(cat $R/recipe-1.seconds)) / 60 - 4 ))
    echo "SFT: aux weight ${W_AUX:?}, time limit $left min"
    T2=$(date +%s)
    stamp; /usr/bin/time -v $py -m vlajax.train sft $SFT --data.dataset-dir $R/demos-swap300 --output-dir $R/final \
        --sft.init-from $R/ground-final --sft.aux-target-weight $W_AUX --sft.time-limit-minutes $left \
        > $R/recipe-sft.log 2>&1; stamp
    echo "recipe wall (stages 1-2 + 3): $(( $(cat $R/recipe-1.seconds) + $(date +%s) - T2 )) s"
    # the standard evaluation (not part of the recipe's time): seed 0, 20 episodes per task
    stamp; $py -m vlajax.train eval --preset sft-small --checkpoint $R/final/checkpoints --suite object \
        --output-dir $R/final > $R/recipe-eval.log 2>&1; stamp ;;
  *) echo "usage: run.sh dev-ground | dev A|B | recipe-1 | recipe-2" >&2; exit 2 ;;
esac
