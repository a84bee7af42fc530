#!/bin/sh
# oracle="adaptive" (issue 17 item 2) on the N=100, K=10 family grid, for the 8 rankers; same setting and cache
# as run_n100.sh. After a change of the adaptive rule, pass --refresh adaptive.
CACHE=${CACHE:-/tmp/regret2_cache/n100}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 3 \
  --rankers mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort bubblesort --oracles adaptive \
  --budgets 50 100 150 200 250 300 350 400 450 500 none \
  --max-rounds none 1 3 6 10 20 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" "$@" \
  --out benchmarks/results/family/n100_k10_adaptive
