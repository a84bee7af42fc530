#!/bin/sh
# The first stage's own order (grid label first_stage: asks nothing) per family judge and setting, the baseline a
# judge must beat to count in auto's choice (activeprp_bench.autotable.Family.beats_first_stage): N=100/K=10,
# N=50/K=5, N=20/K=3 on DL19 + DL20, and N=100/K=10 on Cranfield's first 120 queries (../deep/). Seconds.
CACHE=${CACHE:-/tmp/auto_cache/first_stage}
common="--data /work/shared/data --rankers first_stage --oracles randomized --budgets none --max-rounds none \
  --seeds 1 --no-paper --no-progress --paired --jobs 1 --rows-cache $CACHE"
nice -n 10 python -m activeprp_cli bench grid --judges family $common --out benchmarks/results/family/first_stage/n100_k10
nice -n 10 python -m activeprp_cli bench grid --judges family --depth 50 --top-k 5 $common \
  --out benchmarks/results/family/first_stage/n50_k5
nice -n 10 python -m activeprp_cli bench grid --judges family --depth 20 --top-k 3 $common \
  --out benchmarks/results/family/first_stage/n20_k3
nice -n 10 python -m activeprp_cli bench grid --collections cranfield --queries 120 --judge calibrated \
  --judge strong-bias --judge-tag cranfield $common --out benchmarks/results/deep/first_stage
# the per-judge reports of a first-stage grid say nothing: keep its rows.csv.xz and config.json only
for d in benchmarks/results/family/first_stage/* benchmarks/results/deep/first_stage; do
  find "$d" -mindepth 1 -maxdepth 1 ! -name rows.csv.xz ! -name config.json -exec rm -r {} +
done
