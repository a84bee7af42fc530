#!/bin/sh
# The parallel plan under a round cap of 10 over all 100 candidates (parallel_mohajer) and over the top 80
# (parallel_mohajer_depth80), both with adaptive, N=100, K=10, B in {300..500}: the DL family (judge seeds 0-4,
# 3 randomized seeds at judge seed 0, 1 otherwise) and the two Cranfield judges (same seeds); about 8 min on 2
# cores, rows cached per unit in $CACHE. Then: python benchmarks/depth_step.py (its docstring has the command).
CACHE=${CACHE:-/tmp/depth_step_cache}
OUT=benchmarks/results/budget_depth/depth_step
C="--rankers parallel_mohajer parallel_mohajer_depth80 --oracles adaptive --budgets 300 350 400 450 500
  --max-rounds 10 --no-paper --no-progress --jobs 2"
for r in 0 1 2 3 4; do
  if [ "$r" = 0 ]; then S="--seeds 3 --paired"; else S="--seeds 1"; fi
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family $S --judge-seed "$r" $C \
    --rows-cache "$CACHE/dl$r" "$@" --out "$OUT/dl/r$r"
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --collections cranfield --queries 120 \
    --judge calibrated --judge strong-bias --judge-tag cranfield $S --judge-seed "$r" $C \
    --rows-cache "$CACHE/cranfield$r" "$@" --out "$OUT/cranfield/r$r"
done
