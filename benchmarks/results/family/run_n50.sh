#!/bin/sh
# The middle setting over the family: DL19 + DL20, BM25 top-50, K=5, B in {25, 50, ..., 250, none} (B/N 0.5 ... 5,
# the budget axis of the shipped table), caps {none, 1, 3, 6, 10, 20}, 8 rankers x randomized, bidirectional,
# adaptive, 3 randomized oracle seeds, judge seed 0; every family judge covering depth 50 (bundled-ql covers only
# the top-20); 2 worker processes, rows cached in $CACHE (re-runs compute only missing cells).
CACHE=${CACHE:-/tmp/regret2_cache/n50}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --depth 50 --top-k 5 \
  --seeds 3 --rankers mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort bubblesort \
  --oracles randomized bidirectional adaptive "$@" --budgets 25 50 75 100 125 150 175 200 225 250 none \
  --max-rounds none 1 3 6 10 20 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" \
  --out benchmarks/results/family/n50_k5
