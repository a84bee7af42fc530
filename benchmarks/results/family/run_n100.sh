#!/bin/sh
# One N=100, K=10 family grid per judge (argument list), run one after another: DL19 + DL20, BM25 top-100,
# 7 rankers x 2 oracles x B in {50..500, none} x caps {none, 6, 10}, 1 randomized oracle seed, judge seed 0.
for judge in "$@"; do
  nice -n 10 python -m activeprp_core bench grid --data /work/shared/data --judge "$judge" --seeds 1 \
    --rankers mohajer mohajer_bubble parallel_mohajer heapsort allpairs quicksort bubblesort \
    --oracles randomized bidirectional --budgets 50 100 150 200 250 300 350 400 450 500 none \
    --max-rounds none 6 10 --no-paper --no-progress --paired \
    --out benchmarks/results/family/n100_k10/"$judge" > /tmp/regret/"$judge".log 2>&1
done
