#!/bin/sh
# The small setting over the whole family (bundled-ql included): DL19 + DL20, BM25 top-20, K=3,
# B in {20, 50, 100, none} (B/N 1, 2.5, 5; cut for compute), caps {none, 6, 10}, 3 randomized oracle seeds, judge seed 0;
# 2 worker processes, rows cached in $CACHE. The goal cell is B=50, max_rounds 6.
CACHE=${CACHE:-/tmp/regret2_cache/n20}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --depth 20 --top-k 3 \
  --seeds 3 --rankers mohajer mohajer_bubble parallel_mohajer heapsort allpairs quicksort bubblesort \
  --oracles randomized bidirectional "$@" --budgets 20 50 100 none --max-rounds none 6 10 \
  --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" --out benchmarks/results/family/n20_k3
