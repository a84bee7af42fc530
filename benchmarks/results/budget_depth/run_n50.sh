#!/bin/sh
# budget_depth on the N=50, K=5 family grid's judges and setting (../family/run_n50.sh): DL19 + DL20 BM25 top-50,
# the 13 judges covering depth 50, the adaptive, randomized and bidirectional oracles, B in {25..250, none} x caps
# {none, 1, 3, 6, 10, 20}, 3 randomized seeds (bidirectional: 1); rows cached per unit in $CACHE.
CACHE=${CACHE:-/tmp/auto_cache/n50}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --depth 50 --top-k 5 \
  --seeds 3 --rankers budget_depth --oracles adaptive randomized bidirectional --budgets 25 50 75 100 125 150 175 200 225 250 none \
  --max-rounds none 1 3 6 10 20 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" "$@" \
  --out benchmarks/results/budget_depth/n50_k5
