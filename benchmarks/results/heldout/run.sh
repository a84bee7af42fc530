#!/bin/sh
# Held-out checks of `auto` on judges outside the family, which its table was not built or tuned on: the two whose
# errors come from a real embedding model (`embedding-error`, hard, and `embedding-error-soft`:
# activeprp_bench.judges.EmbeddingErrorJudge, all-MiniLM-L6-v2) and a weak one (`weak`: `calibrated` with the
# grade's weight cut to 0.75). DL19 + DL20 BM25 top-100, N=100, K=10, every ranker x oracle and `auto`, B in
# {50..500, none} x caps {none, 6, 10}, 1 randomized seed, judge seed 0; rows cached per unit in $CACHE. About
# 10 min per judge on 2 cores. Then: python benchmarks/heldout_goals.py (its docstring has the command).
CACHE=${CACHE:-/tmp/heldout_cache}
for judge in embedding-error embedding-error-soft weak; do
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judge "$judge" --seeds 1 \
    --rankers budget_depth mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort \
    bubblesort --oracles adaptive randomized bidirectional --budgets 50 100 150 200 250 300 350 400 450 500 none \
    --max-rounds none 6 10 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/$judge" "$@" \
    --out "benchmarks/results/heldout/$judge"
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judge "$judge" --seeds 1 \
    --rankers auto --oracles auto --budgets 50 100 150 200 250 300 350 400 450 500 none \
    --max-rounds none 6 10 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/$judge-auto" "$@" \
    --out "benchmarks/results/heldout/$judge-auto"
done
# The wrappers' default setting: N=20, K=3, B=50, 6 rounds (DL19 + DL20 BM25 top-20), the same judges. About 1 min.
for rankers in "budget_depth mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort bubblesort" auto; do
  oracles="adaptive randomized bidirectional" out=n20_k3
  [ "$rankers" = auto ] && oracles=auto out=n20_k3-auto
  # shellcheck disable=SC2086
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --judge embedding-error \
    --judge embedding-error-soft --judge weak --depth 20 --top-k 3 --seeds 1 --rankers $rankers --oracles $oracles \
    --budgets 50 --max-rounds 6 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/$out" "$@" \
    --out "benchmarks/results/heldout/$out"
done
# A first stage outside the family's: DL19 + DL20's BM25 top-100 re-ordered by all-MiniLM-L6-v2 (`dl19-minilm`,
# `dl20-minilm`: nDCG@10 64.2 / 60.8, a dense order of the same candidates), three family judges labelled
# NAME@minilm, N=100, K=10, the same grid. About 30 min.
for rankers in "budget_depth mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort bubblesort" auto; do
  oracles="adaptive randomized bidirectional" out=minilm
  [ "$rankers" = auto ] && oracles=auto out=minilm-auto
  # shellcheck disable=SC2086
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --collections dl19-minilm dl20-minilm \
    --judge calibrated --judge soft-calibrated --judge setwise-xl --judge-tag minilm --seeds 1 --rankers $rankers \
    --oracles $oracles --budgets 50 100 150 200 250 300 350 400 450 500 none --max-rounds none 6 10 --no-paper \
    --no-progress --jobs 2 --rows-cache "$CACHE/$out" "$@" --out "benchmarks/results/heldout/$out"
done
