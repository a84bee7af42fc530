#!/bin/sh
# The "more budget, more quality" goal of issue 31 on the held-out judges over ten noise realisations (judge seeds
# 0-9), as ../budget_depth/run_realisations.sh does for the family: `budget_depth` with `adaptive` and
# `randomized` (auto's rows at N=100), N=100, K=10, B in {50..500} x caps {none, 6, 10}, 1 randomized seed each.
# The nearest judges the repository has to the kinds issue 31 checks on, and the held-out ones:
# - `bm25/rR`: embedding-error, embedding-error-soft, weak and positional (position bias 2.0) over DL19 + DL20
#   BM25 top-100;
# - `minilm/rR`: three family judges over the MiniLM order of the same candidates (NAME@minilm);
# - `cranfield/rR`: calibrated and strong-bias over Cranfield's first 120 judged queries (NAME@cranfield), whose
#   relevant documents sit deep;
# - `minilm40/rR`: the advice for a strong first stage, `Depth(BudgetDepth(), 40)` (`budget_depth40`, `adaptive`),
#   over the MiniLM order.
# About 5 min per realisation on 2 cores; rows cached per unit in $CACHE. Then the commands in README.md ("Falls over
# ten noise realisations").
CACHE=${CACHE:-/tmp/heldout_realisations_cache}
BM25="dl19 dl20:--judge embedding-error --judge embedding-error-soft --judge weak --judge positional"
MINILM="dl19-minilm dl20-minilm:--judge calibrated --judge soft-calibrated --judge setwise-xl --judge-tag minilm"
CRANFIELD="cranfield --queries 120:--judge calibrated --judge strong-bias --judge-tag cranfield"
for r in 0 1 2 3 4 5 6 7 8 9; do
  for stage in bm25:"budget_depth:adaptive randomized:$BM25" minilm:"budget_depth:adaptive randomized:$MINILM" \
      cranfield:"budget_depth:adaptive randomized:$CRANFIELD" minilm40:"budget_depth40:adaptive:$MINILM"; do
    name=${stage%%:*} rest=${stage#*:}
    rankers=${rest%%:*} rest=${rest#*:}
    oracles=${rest%%:*} rest=${rest#*:}
    collections=${rest%%:*} judges=${rest#*:}
    # shellcheck disable=SC2086
    nice -n 10 python -m activeprp_cli bench grid --data /work/shared/data --collections $collections $judges \
      --seeds 1 --judge-seed "$r" --rankers $rankers --oracles $oracles \
      --budgets 50 100 150 200 250 300 350 400 450 500 --max-rounds none 6 10 --no-paper --no-progress --jobs 2 \
      --rows-cache "$CACHE/$name/r$r" "$@" --out "benchmarks/results/heldout/realisations/$name/r$r"
  done
done
