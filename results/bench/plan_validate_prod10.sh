#!/bin/bash
# Issue 44.5, seventh try (pre-registered in docs/planner.md "Issue 44.5, seventh: the calls' local
# variability"): the pooled protocol (three profiles, the 18-row grid (the prod4 command), three profiles; nothing
# else running), every profile with --concurrency-repeats 28 as in the sixth. Then: results/bench/plan_44/validate_prod10.sh
exec bash "$(dirname "$0")/plan_validate_pooled.sh" 10 --concurrency-repeats 28
