#!/bin/sh
# budget_depth on the N=20, K=3 family grid's judges and setting (../family/run_n20.sh): DL19 + DL20 BM25 top-20,
# all 14 judges (bundled-ql: real answers), the adaptive, randomized and bidirectional oracles, B in {10..100,
# none} x caps {none, 1, 3, 6, 10, 20}, 3 randomized seeds (bidirectional: 1); rows cached per unit in $CACHE.
CACHE=${CACHE:-/tmp/auto_cache/n20}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --depth 20 --top-k 3 \
  --seeds 3 --rankers budget_depth --oracles adaptive randomized bidirectional --budgets 10 20 30 40 50 60 70 80 90 100 none \
  --max-rounds none 1 3 6 10 20 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" "$@" \
  --out benchmarks/results/budget_depth/n20_k3
