#!/bin/sh
# Held-out checks of `auto`, which its table was not built or tuned on. Judges outside the family: the two whose
# errors come from a real embedding model (`embedding-error`, hard, and `embedding-error-soft`:
# activeprp_bench.judges.EmbeddingErrorJudge, all-MiniLM-L6-v2) and a weak one (`weak`: `calibrated` with the
# grade's weight cut to 0.75), on DL19 + DL20 BM25 top-100 (N=100, K=10, B in {50..500, none} x caps {none, 6, 10};
# about 10 min per judge) and at the wrappers' default (N=20, K=3, B=50, 6 rounds; 1 min). A first stage outside the
# family's: DL19 + DL20's BM25 top-100 re-ordered by all-MiniLM-L6-v2 (`dl19-minilm`, `dl20-minilm`: nDCG@10 64.2 /
# 60.8), three family judges labelled NAME@minilm, the N=100 grid (15 min). Every ranker x oracle into OUT and
# `auto` into OUT-auto, 1 randomized seed, judge seed 0; rows cached per unit in $CACHE; arguments given to this
# script are passed on to every grid. Then: python benchmarks/heldout_goals.py (its docstring has the command).
CACHE=${CACHE:-/tmp/heldout_cache}
EXTRA="$*"
RANKERS="budget_depth mohajer mohajer_bubble parallel_mohajer parallel_mohajer_depth heapsort allpairs quicksort bubblesort"
N100="--budgets 50 100 150 200 250 300 350 400 450 500 none --max-rounds none 6 10"

grid() {  # grid OUT ARGS...: the grid of ARGS, every ranker x oracle into OUT, auto into OUT-auto
  out=$1
  shift
  for rows in "$RANKERS:adaptive randomized bidirectional:$out" "auto:auto:$out-auto"; do
    rankers=${rows%%:*} rest=${rows#*:}
    oracles=${rest%%:*} dir=${rest#*:}
    # shellcheck disable=SC2086
    nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --seeds 1 "$@" --rankers $rankers \
      --oracles $oracles --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/$dir" $EXTRA \
      --out "benchmarks/results/heldout/$dir"
  done
}

for judge in embedding-error embedding-error-soft weak; do
  # shellcheck disable=SC2086
  grid "$judge" --judge "$judge" $N100
done
grid n20_k3 --judge embedding-error --judge embedding-error-soft --judge weak --depth 20 --top-k 3 --budgets 50 \
  --max-rounds 6
# shellcheck disable=SC2086
grid minilm --collections dl19-minilm dl20-minilm --judge calibrated --judge soft-calibrated --judge setwise-xl \
  --judge-tag minilm $N100
# The advice for a strong first stage, `Depth(BudgetDepth(), 40)` (`budget_depth40`: auto's plan over at most the
# top 40), beside `budget_depth` on both first stages, the same three judges, `adaptive`, N=100. About 3 min.
for stage in dl:"dl19 dl20" minilm:"dl19-minilm dl20-minilm"; do
  name=${stage%%:*} collections=${stage#*:}
  # shellcheck disable=SC2086
  nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --collections $collections --judge calibrated \
    --judge soft-calibrated --judge setwise-xl --seeds 1 --rankers budget_depth budget_depth40 --oracles adaptive \
    $N100 --no-paper --no-progress --jobs 2 --rows-cache "$CACHE/depth40-$name" $EXTRA \
    --out "benchmarks/results/heldout/depth40-$name"
done
