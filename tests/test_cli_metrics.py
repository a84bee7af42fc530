"""nDCG@k of ``activeprp_cli.metrics`` (backed by ir-measures) against the trec_eval definition."""

import math

import pytest

from activeprp_cli.metrics import mean_ndcg_at_k, ndcg_at_k, ranking_to_run


def test_ndcg_matches_trec_eval_definition():
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')
    qrels = {"q1": {"a": 3, "b": 1, "c": 0}, "q2": {"x": 1}}
    run = {"q1": ranking_to_run(["b", "a", "c"]), "q2": ranking_to_run(["y", "x"]), "q3": {"z": 1.0}}
    per_query = ndcg_at_k(qrels, run, k=10)
    assert set(per_query) == {"q1", "q2"}  # unjudged queries are not scored
    ideal = 3 + 1 / math.log2(3)
    assert per_query["q1"] == pytest.approx((1 + 3 / math.log2(3)) / ideal)
    assert per_query["q2"] == pytest.approx(1 / math.log2(3))
    assert mean_ndcg_at_k(qrels, run) == pytest.approx(sum(per_query.values()) / 2)
    assert ndcg_at_k(qrels, {"q1": ranking_to_run(["a", "b", "c"])}) == {"q1": pytest.approx(1.0)}  # q2: no run
    with pytest.raises(ValueError):
        ndcg_at_k(qrels, run, k=0)
