#!/bin/sh
# The small setting over the whole family (bundled-ql included): DL19 + DL20, BM25 top-20, K=3,
# B in {10, 20, ..., 100, none} (B/N 0.5 ... 5, the budget axis of the shipped table), caps {none, 1, 3, 6, 10, 20},
# 3 randomized oracle seeds, judge seed 0; 2 worker processes, rows cached in $CACHE (re-runs compute only missing
# cells). The issue's goal cell is B=50, max_rounds 6. `sh run_n20.sh adaptive` adds the adaptive oracle.
CACHE=${CACHE:-/tmp/regret2_cache/n20}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --depth 20 --top-k 3 \
  --seeds 3 --rankers mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort bubblesort \
  --oracles randomized bidirectional "$@" --budgets 10 20 30 40 50 60 70 80 90 100 none \
  --max-rounds none 1 3 6 10 20 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" \
  --out benchmarks/results/family/n20_k3
