#!/bin/sh
# A held-out check of `auto` on judges outside the family whose errors come from a real embedding model
# (`embedding-error`, hard, and `embedding-error-soft`: activeprp_bench.judges.EmbeddingErrorJudge, all-MiniLM-L6-v2):
# DL19 + DL20 BM25 top-100, N=100, K=10, every ranker x oracle and `auto`, B in {50..500, none} x caps
# {none, 6, 10}, 1 randomized seed, judge seed 0; rows cached per unit in $CACHE. About 19 min on 2 cores.
# Then: python benchmarks/heldout_goals.py (its docstring has the command).
CACHE=${CACHE:-/tmp/embedding_error_cache}
for judge in embedding-error embedding-error-soft; do
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judge "$judge" --seeds 1 \
    --rankers budget_depth mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort \
    bubblesort --oracles adaptive randomized bidirectional --budgets 50 100 150 200 250 300 350 400 450 500 none \
    --max-rounds none 6 10 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/$judge" "$@" \
    --out "benchmarks/results/embedding_error/$judge"
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judge "$judge" --seeds 1 \
    --rankers auto --oracles auto --budgets 50 100 150 200 250 300 350 400 450 500 none \
    --max-rounds none 6 10 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/$judge-auto" "$@" \
    --out "benchmarks/results/embedding_error/$judge-auto"
done
