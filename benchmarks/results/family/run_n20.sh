#!/bin/sh
# The small setting over the whole family (bundled-ql included): N=20, K=3, B=50, max_rounds 6.
nice -n 10 python -m activeprp_core bench grid --data /work/shared/data --judges family --depth 20 --top-k 3 \
  --seeds 3 --rankers mohajer mohajer_bubble parallel_mohajer heapsort allpairs quicksort bubblesort \
  --oracles randomized bidirectional --budgets 50 --max-rounds 6 --no-paper --no-progress --paired \
  --out benchmarks/results/family/n20_k3
