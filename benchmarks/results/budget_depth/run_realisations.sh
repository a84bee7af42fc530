#!/bin/sh
# budget_depth with adaptive and randomized (auto's rows at N=100) on nine more noise realisations of the DL
# family's judges (--judge-seed 1-9: which documents each judge mis-reads, and by how much), N=100, K=10, B in
# {50..500} x caps {none, 6, 10}, 1 randomized seed each; rows cached per unit in $CACHE. About 7 min per
# realisation on 2 cores. Then: python benchmarks/auto_falls.py (its docstring has the command).
CACHE=${CACHE:-/tmp/realisations_cache}
for r in 1 2 3 4 5 6 7 8 9; do
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judges family --seeds 1 --judge-seed "$r" \
    --rankers budget_depth --oracles adaptive randomized --budgets 50 100 150 200 250 300 350 400 450 500 \
    --max-rounds none 6 10 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/r$r" "$@" \
    --out "benchmarks/results/budget_depth/realisations/r$r"
done
