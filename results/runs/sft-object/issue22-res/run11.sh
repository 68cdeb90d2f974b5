#!/usr/bin/env bash
# Issue 22.4, eleventh attempt: the sixth attempt's recipe (results/runs/sft-object/issue22-bins/run.sh, 33.8% on
# seed 0) with 64 x 64 images cut into 16 x 16 patches instead of 32 x 32 images in 8 x 8 patches.
#
# WHY: at 32 x 32 a cube in the agentview camera is 1-2 pixels (rendered side by side: /tmp only, 16:06 UTC);
# at 64 x 64 it is 3-4. Every attempt since the sixth lands at 60-75% right cube (bounded by the grounding's
# own held-out choice, 60-79%) x 46-69% success given the right cube, and the median grasp error is 5-7 cm.
# Both are what a coarser view of small cubes would give. A 16 x 16 patch on a 64 x 64 image keeps the token
# count (16 per camera) and so the model's cost: only the patch embedding grows (768 -> 96 instead of 192 -> 96).
# Nothing else changes: demos (same generator, 300 per task, target swap), grounding (1000 scenes, 2000 steps,
# K = 25 bins), SFT (aux weight 1, start weight 5, target noise 0.1, 1800 steps) as in the sixth recipe.
# The only other difference: stages 1 (demos) and 2 (grounding) are independent and run at the same time (each
# used < 1 core in the sixth recipe: 645 s CPU in 20 min, 892 s in 19 min).
#
# CRITERION (written 2026-11-26 16:12 UTC, before any run of this attempt; not changed after): met <=> mean
#   success >= 0.60 on the standard evaluation (`eval`, seed 0, 20 episodes per task = 80) of the policy from
#   this ONE recipe, whose wall time (start of stage 1 to end of stage 3, as a user waits for it) is <= 60 min
#   on this 2-core machine. Seed 0 is evaluated once. The summed stage walls are reported too.
#   After the seed-0 evaluation, a seed-7 probe (object_suite_target_probe, 10 episodes per task) for the
#   diagnosis (right cube, success given it, grasp error); it decides nothing.
# Usage: bash run11.sh recipe
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22r
py=.venv/bin/python
mkdir -p $R
stamp() { date -u +%H:%M:%S; uptime; }
IMG="--env.image-size 64 --model.image-size 64 --model.patch-size 16"
GROUND="--scenes 1000 --heldout-scenes 100 --steps 2000 --state-token --target-conditioning --aux-grasp-bins 25
        --image-size 64 --patch-size 16"
SFT="--preset sft-small --env.suite object $IMG --model.aux-target grasp_place --model.target-conditioning
     --model.aux-grasp-bins 25 --sft.target-noise 0.1 --sft.aux-start-weight 5 --sft.num-steps 1800 --sft.eval-every -1"
case "${1:-}" in
  recipe)
    T0=$(date +%s); echo "recipe start $(date -u +%H:%M:%S)"; git log -1 --format='HEAD %h %cI'
    ( s=$(date +%s); stamp; /usr/bin/time -v $py -m vlajax.train demos --preset sft-small --suite object \
        --episodes-per-task 300 --data.demo-target-swap --env.num-envs 48 --env.image-size 64 --out $R/demos64 \
        > $R/recipe-demos.log 2>&1; echo "demos wall $(( $(date +%s) - s )) s"; stamp ) &
    ( s=$(date +%s); stamp; /usr/bin/time -v $py experiments/object_suite_binding.py $GROUND --save-init $R/ground64 \
        --json $R/ground64.json > $R/recipe-ground.log 2>&1; echo "grounding wall $(( $(date +%s) - s )) s"; stamp ) &
    wait
    left=$(( (3600 - ($(date +%s) - T0)) / 60 - 4 ))
    echo "stages 1-2 took $(( $(date +%s) - T0 )) s; SFT time limit $left min"
    s=$(date +%s); stamp; /usr/bin/time -v $py -m vlajax.train sft $SFT --data.dataset-dir $R/demos64 \
        --output-dir $R/final64 --sft.init-from $R/ground64 --sft.aux-target-weight 1 --sft.time-limit-minutes $left \
        > $R/recipe-sft.log 2>&1; echo "SFT wall $(( $(date +%s) - s )) s"; stamp
    echo "recipe wall (start of stage 1 to end of stage 3): $(( $(date +%s) - T0 )) s"
    # the standard evaluation (not part of the recipe's time): seed 0, 20 episodes per task
    stamp; $py -m vlajax.train eval --preset sft-small --checkpoint $R/final64/checkpoints --suite object \
        --env.image-size 64 --output-dir $R/final64 > $R/recipe-eval.log 2>&1; stamp
    grep -v absl $R/recipe-eval.log | tail -3
    # diagnosis only (decides nothing): seed 7, 10 episodes per task
    $py experiments/object_suite_target_probe.py --checkpoint $R/final64/checkpoints --eval-seed 7 \
        --episodes-per-task 10 --json $R/probe-final64-seed7.json > $R/probe-final64.log 2>&1; stamp ;;
  *) echo "usage: run11.sh recipe" >&2; exit 2 ;;
esac
