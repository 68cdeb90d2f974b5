#!/usr/bin/env bash
# Issue 22.4, twelfth attempt: a CONVOLUTIONAL STEM for the ViT (model.vision_stem='conv': three 3x3 stride-2
# convolutions with GELU, 24 -> 48 -> 96 channels, then the linear patch map; Xiao et al. 2021) instead of
# the linear embedding of 8x8 patches. Everything else is the sixth attempt's recipe (33.8% on seed 0).
#
# WHY: across eleven attempts the grounding (a purely supervised "where is the <colour> cube" task on first
# frames) chose the named cube on only 60-79% of held-out frames, and the policy after SFT on 33-65%. At 32x32
# a cube is 1-2 pixels of the agent view; a linear patch embedding must encode colour AND sub-patch position
# of several such blobs per 8x8 patch in one linear map, and "red, not yellow" (R high and G low) is not a
# linear feature. A non-linear filter per pixel neighbourhood before the patch is mixed is the standard fix
# for ViTs on small data. The cost is small (~1.5 M MACs per image against ~3.5 M for the ViT blocks).
# Untested before this script was written except a 4-step wiring check (`--debug`).
#
# CRITERION (written 2026-11-26 22:24 UTC, before any run of this attempt; not changed after): met <=> mean
#   success >= 0.60 on the standard evaluation (`eval`, seed 0, 20 episodes per task = 80) of the policy from
#   ONE recipe (demos + grounding + SFT) whose summed stage wall time is <= 60 minutes. Seed 0 is evaluated
#   once, on the recipe's checkpoint. No development runs, no choice among settings: this runs once.
# Stage 1 (demos) is NOT re-run: the generator is deterministic and its output is the sixth attempt's
#   (runs/i22b/demos-swap300, sha256-checked against runs/i22g in the seventh attempt); its measured wall,
#   20 min 05 s (1205 s), counts toward the total. The SFT's time limit is what is left of 60 min, minus 1 min.
# Also recorded (decides nothing): the grounding's held-out choice per 250 steps against the sixth attempt's
#   (results/runs/sft-object/issue22-bins/ground-final.json: 71.0% at 2000 steps), and the seed-7 probe.
#   Usage: bash run12.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22c
mkdir -p $R
py=.venv/bin/python
stamp() { date -u +%H:%M:%S; uptime; }
DEMOS_S=1205
GROUND="--scenes 1000 --heldout-scenes 100 --steps 2000 --state-token --target-conditioning --aux-grasp-bins 25
        --vision-stem conv"
SFT="--preset sft-small --env.suite object --model.aux-target grasp_place --model.target-conditioning
     --model.aux-grasp-bins 25 --model.vision-stem conv --sft.target-noise 0.1 --sft.aux-start-weight 5
     --sft.aux-target-weight 1 --sft.num-steps 1800 --sft.eval-every -1"
git rev-parse HEAD
T1=$(date +%s)
stamp; /usr/bin/time -v $py experiments/object_suite_binding.py $GROUND --save-init $R/ground --json $R/ground.json \
    > $R/ground.log 2>&1; stamp
G=$(( $(date +%s) - T1 ))
left=$(( (3600 - DEMOS_S - G) / 60 - 1 ))
echo "grounding $G s; SFT time limit $left min"
T2=$(date +%s)
stamp; /usr/bin/time -v $py -m vlajax.train sft $SFT --data.dataset-dir runs/i22b/demos-swap300 --output-dir $R/final \
    --sft.init-from $R/ground --sft.time-limit-minutes $left > $R/sft.log 2>&1; stamp
S=$(( $(date +%s) - T2 ))
echo "recipe total: demos $DEMOS_S + grounding $G + SFT $S = $(( DEMOS_S + G + S )) s"
# the standard evaluation (not part of the recipe's time): seed 0, 20 episodes per task
stamp; $py -m vlajax.train eval --preset sft-small --checkpoint $R/final/checkpoints --suite object \
    --output-dir $R/final > $R/eval.log 2>&1; stamp
$py experiments/object_suite_target_probe.py --checkpoint $R/final/checkpoints --eval-seed 7 \
    --episodes-per-task 10 --json $R/probe-final12-pred.json > $R/probe.log 2>&1; stamp
