#!/usr/bin/env bash
# Issue 22.4, thirteenth attempt: GROUNDING FRAMES MIXED INTO THE SFT (data.grounding_fraction = 0.25 of the
# records are rendered first frames of 2000 new object-suite scenes x 3 target swaps, no actions, aux loss only,
# weight sft.aux_start_weight), on top of the sixth attempt's recipe (33.8% on seed 0; SFT-seed spread 31-41%).
#
# WHY (an earlier diagnostic, results/runs/sft-object/issue22-conv/memo.sh): the sixth recipe's choice of
# cube is underfitted, not memorized (its aux error on episodes' first frames is the same on new demos as on
# its own: grasp x/y 0.19/0.34 vs 0.19/0.42), while every attempt that added capacity to the vision front end
# (conv stem, 64x64) memorized the ~400 scenes the SFT demos hold. During SFT the aux head sees only those
# scenes' start frames; the grounding stage's 1000 scenes are not seen again. This keeps the binding of the
# colour word to a place training on many distinct scenes (2000 more, rendered in ~2 min, no expert needed:
# the expert grasps exactly at the named cube's xy and releases at the square's, to < 1 mm, tested in
# tests/sft/test_grounding_frames.py) for the whole SFT.
# THE CHANGES (fixed before any run, chosen by reasoning, not by trying): --data.grounding-fraction 0.25
#   --data.grounding-scenes 2000, and --sft.num-steps 2400 instead of 1800, so the SFT sees as many action
#   samples as the sixth's (2400 x 32 x 0.75 = 57,600 = 1800 x 32). Everything else is the sixth recipe's.
#   Nothing was run with these settings before this script (only the unit tests' tiny configs).
# CRITERION (the sixth attempt's; written 2026-11-27 ~01:05 UTC before this run, not changed after):
#   met <=> mean success >= 0.60 on the standard evaluation (`eval`, seed 0, 20 episodes per task = 80) of the
#   policy from ONE recipe (demos + grounding + SFT) whose summed stage wall time is <= 60 minutes. Seed 0 is
#   evaluated once, on the recipe's checkpoint. No development runs, no choice among settings: this runs once.
# Stage 1 (demos) is NOT re-run: the generator is deterministic and its output is the sixth attempt's
#   (runs/i22b/demos-swap300, sha256-checked against runs/i22g in the seventh attempt); its measured wall,
#   20 min 05 s (1205 s), counts toward the total. The grounding IS re-run (timed). The SFT's time limit is what
#   is left of 60 min, minus 1 min (the frames' rendering is inside the SFT stage and its wall time).
# Also recorded (decides nothing): the grounding's held-out choice against the sixth's (71.0% at 2000 steps),
#   the seed-7 probe (the sixth: 45%, right cube 65%).
#   Usage: bash run13.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22e
mkdir -p $R
py=.venv/bin/python
stamp() { date -u +%H:%M:%S; uptime; }
DEMOS_S=1205
GROUND="--scenes 1000 --heldout-scenes 100 --steps 2000 --state-token --target-conditioning --aux-grasp-bins 25"
SFT="--preset sft-small --env.suite object --model.aux-target grasp_place --model.target-conditioning
     --model.aux-grasp-bins 25 --sft.target-noise 0.1 --sft.aux-start-weight 5 --sft.aux-target-weight 1
     --sft.eval-every -1 --data.grounding-fraction 0.25 --data.grounding-scenes 2000 --sft.num-steps 2400"
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
    --episodes-per-task 10 --json $R/probe-final13-pred.json > $R/probe.log 2>&1; stamp
