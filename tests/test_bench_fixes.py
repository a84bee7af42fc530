"""``activeprp bench`` fixes of review s68e: broken qrels, the rows cache's key, the answer cache's judgments,
calibration's order, flags a mode or combination does not use, and the small ones."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import skip_without_bench

np = skip_without_bench()


ROOT = Path(__file__).resolve().parents[1]

_CONVERGED_KEYS = """
from activeprp_bench.calibration import converged_quality
from activeprp_bench.datasets import Collection
from activeprp_core.types import Candidate
cands = [Candidate(f"d{i}", f"passage {i}") for i in range(6)]
colls = [Collection(name, {"q": "query"}, {"q": cands}, {"q": {f"d{i}": i % 3 for i in range(6)}})
         for name in ("one", "two")]
print(list(converged_quality(colls, {"doc_noise": 0.5})))
"""


def test_calibration_keys_come_out_in_one_order_whatever_the_hash_seed():
    """``converged_quality`` iterated a set of string tuples, so ``bench calibrate`` wrote its ``converged`` keys
    (and summed its mean) in an order that changed with PYTHONHASHSEED (review s68e #4); now sorted."""
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        outs.add(subprocess.run([sys.executable, "-c", _CONVERGED_KEYS], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1
    keys = ast.literal_eval(outs.pop())
    assert keys[-1] == "mean" and len(keys) == 19  # 9 (ranker, oracle) rows x 2 collections
