#!/bin/sh
# Judges on a weak first stage: Cranfield (first 120 judged queries, BM25 top-100
# from bm25s, nDCG@10 31.2), N=100, K=10, judges calibrated and strong-bias labelled NAME@cranfield; the rows of
# the N=100 family grid (8 rankers and budget_depth x randomized, bidirectional, adaptive) at B in {50..500, none}
# x caps {none, 6, 10}, 3 randomized seeds (bidirectional: 1); 2 worker processes, rows cached per unit in $CACHE.
CACHE=${CACHE:-/tmp/auto_cache/deep}
nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --collections cranfield --queries 120 \
  --judge calibrated --judge strong-bias --judge-tag cranfield --seeds 3 \
  --rankers mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth budget_depth heapsort allpairs quicksort \
  bubblesort \
  --oracles randomized bidirectional adaptive --budgets 50 100 150 200 250 300 350 400 450 500 none \
  --max-rounds none 6 10 --no-paper --no-progress --paired --jobs 2 --rows-cache "$CACHE" "$@" \
  --out benchmarks/results/deep/cranfield
