#!/bin/sh
# oracle="adaptive" (issue 17 item 2, merged from branch judge) on the N=100, K=10 family grid, for the two Mohajer
# rankers only (compute budget); same setting and cache as run_n100.sh.
CACHE=${CACHE:-/tmp/regret2_cache/n100}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 1 \
  --rankers mohajer parallel_mohajer --oracles adaptive --budgets 50 100 150 200 250 300 350 400 450 500 none \
  --max-rounds none 6 10 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" \
  --out benchmarks/results/family/n100_k10_adaptive
