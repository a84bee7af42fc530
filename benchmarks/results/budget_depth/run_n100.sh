#!/bin/sh
# budget_depth (the rerank depth planned from the budget) on the N=100, K=10 family grid's judges and setting
# (../family/run_n100.sh): DL19 + DL20 BM25 top-100, every family judge covering depth 100, the adaptive,
# randomized and bidirectional oracles, B in {50..500, none} x caps {none, 1, 3, 6, 10, 20}, 3 randomized seeds
# (bidirectional: 1); 2 worker processes, rows cached per unit in $CACHE (a re-run computes only missing cells).
CACHE=${CACHE:-/tmp/auto_cache/n100}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 3 \
  --rankers budget_depth --oracles adaptive randomized bidirectional --budgets 50 100 150 200 250 300 350 400 450 500 none \
  --max-rounds none 1 3 6 10 20 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" "$@" \
  --out benchmarks/results/budget_depth/n100_k10
