#!/usr/bin/env bash
# The demo's wall time by torch thread count, on idle cores and beside busy loops (docs/benchmarks.md, "The demo";
# output committed in benchmarks/results/demo/threads.txt). Usage: bash scripts/demo_threads.sh [BUSY_LOOPS...]
# (default: 0 2). Each load runs the demo with its own thread choice, --threads 1 and --threads 2, after one
# warm-up run whose time is not kept (the first run after a while reads the model from disk). The busy loops are
# killed when the script ends, however it ends; each demo run is cut at 10 min.
set -euo pipefail
if [ $# -gt 0 ]; then loads=("$@"); else loads=(0 2); fi
busy=()
stop() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null || true; busy=(); }
trap stop EXIT
echo "$(date -u +%F) $(nproc) cores, $(python -c 'import torch; print("torch", torch.__version__)')"
timeout 600 activeprp demo --no-progress >/dev/null 2>&1
for n in "${loads[@]}"; do
    for _ in $(seq 1 "$n"); do python -c "while True: pass" & busy+=($!); done
    sleep 20  # let the 1-minute load average see the loops
    for threads in "" 1 2; do
        start=$(date +%s%N)
        out=$(timeout 600 activeprp demo --no-progress ${threads:+--threads "$threads"} 2>/dev/null)
        tenths=$(( ($(date +%s%N) - start) / 100000000 ))
        echo "busy loops $n | $(grep '^torch threads' <<<"$out") | $(grep -o 'total time [0-9.]* s' <<<"$out")" \
            "| wall $((tenths / 10)).$((tenths % 10)) s"
    done
    stop
done
