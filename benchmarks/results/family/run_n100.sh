#!/bin/sh
# The N=100, K=10 family grid: DL19 + DL20 (97 queries), BM25 top-100, every family judge covering depth 100
# (bundled-ql covers only the top-20), 8 rankers x {randomized, bidirectional} x B in {50..500, none} x
# caps {none, 1, 3, 6, 10, 20}, 3 randomized oracle seeds (bidirectional: 1), judge seed 0; 2 worker processes; rows cached per
# judge x ranker x oracle in $CACHE (re-runs compute only missing cells; --refresh NAME recomputes a judge/oracle).
CACHE=${CACHE:-/tmp/regret2_cache/n100}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 3 \
  --rankers mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort bubblesort \
  --oracles randomized bidirectional --budgets 50 100 150 200 250 300 350 400 450 500 none \
  --max-rounds none 1 3 6 10 20 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" "$@" \
  --out benchmarks/results/family/n100_k10
