#!/bin/sh
# parallel_mohajer over the prior top 20, 30, 50 and 70 (grid VARIANTS around parallel_mohajer_depth's default,
# 40) with the adaptive oracle, on the N=100, K=10 family grid's judges and setting (run_n100.sh): B in {100, 150,
# 200, 250, 300, 400, 500, none} x caps {none, 6, 10}, 3 seeds; same rows cache as the family grid.
CACHE=${CACHE:-/tmp/regret2_cache/n100}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 3 \
  --rankers parallel_mohajer_depth20 parallel_mohajer_depth30 parallel_mohajer_depth50 parallel_mohajer_depth70 \
  --oracles adaptive --budgets 100 150 200 250 300 400 500 none --max-rounds none 6 10 \
  --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" "$@" --out benchmarks/results/depth/n100_k10
