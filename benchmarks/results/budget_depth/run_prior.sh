#!/bin/sh
# budget_depth_prior (budget_depth with the first stage weighed in its final order at PRIOR_WEIGHT, 0.05) with
# adaptive beside the committed budget_depth rows: the N=100, K=10 family grid (../budget_depth/n100_k10's judges,
# B in {50..500, none} x caps {none, 6, 10}, 3 randomized seeds) and judge seeds 1-4 (as run_realisations.sh, 1
# seed each). About 16 min on 2 cores. Then: python benchmarks/auto_falls.py --row budget_depth_prior/adaptive
# (the command in prior/README.md).
CACHE=${CACHE:-/tmp/prior_cache}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 3 \
  --rankers budget_depth_prior --oracles adaptive --budgets 50 100 150 200 250 300 350 400 450 500 none \
  --max-rounds none 6 10 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/n100" "$@" \
  --out benchmarks/results/budget_depth/prior/n100_k10
for r in 1 2 3 4; do
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 1 --judge-seed "$r" \
    --rankers budget_depth_prior --oracles adaptive --budgets 50 100 150 200 250 300 350 400 450 500 \
    --max-rounds none 6 10 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/r$r" "$@" \
    --out "benchmarks/results/budget_depth/prior/r$r"
done
