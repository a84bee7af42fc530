#!/bin/sh
# adaptive's positional rule (activeprp_core.judging.JudgeTally.positional) on `positional`, the bench judge
# outside the family whose answers mostly follow the slot (calibrated with position bias 2.0: flip rate 0.64):
# DL19 + DL20 BM25 top-100, N=100, K=10, every ranker x oracle, B in {50..500, none} x caps {none, 6, 10}, and
# the wrappers' setting N=20, K=3; 3 randomized seeds, judge seed 0; rows cached per unit in $CACHE.
# Before the rule, `adaptive` under a round cap that the ranker plans in full was `randomized` exactly: the
# randomized rows of budget_depth and parallel_mohajer are that behaviour.
CACHE=${CACHE:-/tmp/positional_cache}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judge positional --seeds 3 \
  --rankers budget_depth mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort \
  bubblesort --oracles adaptive randomized bidirectional --budgets 50 100 150 200 250 300 350 400 450 500 none \
  --max-rounds none 6 10 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE/n100" "$@" \
  --out benchmarks/results/positional/n100_k10
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judge positional --seeds 3 --depth 20 \
  --top-k 3 --rankers budget_depth parallel_mohajer --oracles adaptive randomized bidirectional \
  --budgets 10 20 30 40 50 60 70 80 90 100 none --max-rounds none 6 10 --no-paper --no-progress --paired --jobs 2 \
  --rows-cache "$CACHE/n20" "$@" --out benchmarks/results/positional/n20_k3
