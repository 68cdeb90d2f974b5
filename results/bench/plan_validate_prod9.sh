#!/bin/bash
# Issue 44.5, sixth try (pre-registered in docs/planner.md "Issue 44.5, sixth: the slot steps'
# concurrency from 28 rounds"): the pooled protocol of prod7/prod8 (three profiles, the 18-row grid (the prod4
# command), three profiles; nothing else running) with every profile taken with --concurrency-repeats 28.
# Then the validations: results/bench/plan_44/validate_prod9.sh.
exec bash "$(dirname "$0")/plan_validate_pooled.sh" 9 --concurrency-repeats 28
