"""The bench's judge family (activeprp_bench/judges.py): determinism, answer kinds, flip-rate targets, the cache."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest

from activeprp_bench import judges as J
from activeprp_core import Candidate, Comparator, rerank

ROOT = Path(__file__).resolve().parents[1]

SIMULATED = [n for n in J.JUDGES if n != "bundled-ql" and not n.startswith("embedding-")]
"""The judges simulated from grades alone (the ``embedding-error`` ones also read a cache of DL passages)."""
#: Per query of DL19 + DL20 (97 judged queries), how many of its BM25 top-100 passages have grade 0, 1, 2, 3
#: (unjudged = 0): the judges' flip targets are fitted on this population, so the synthetic queries copy it.
DL_GRADE_COUNTS = (
    (49,21,20,10), (55,6,39,0), (74,14,6,6), (21,25,44,10), (87,5,7,1), (82,7,3,8), (55,36,9,0), (96,4,0,0), (91,7,2,0),
    (78,6,0,16), (84,9,7,0), (72,9,9,10), (98,0,0,2), (83,9,7,1), (68,21,10,1), (88,5,5,2), (87,6,5,2), (61,21,13,5),
    (72,13,10,5), (51,40,8,1), (71,20,6,3), (30,3,66,1), (59,4,28,9), (88,5,3,4), (63,21,9,7), (46,14,0,40),
    (43,37,20,0), (6,26,65,3), (96,1,3,0), (87,10,1,2), (2,15,80,3), (92,1,0,7), (84,3,4,9), (68,26,2,4), (89,8,3,0),
    (70,3,4,23), (61,20,19,0), (0,3,26,71), (80,7,5,8), (93,3,4,0), (74,19,7,0), (83,12,2,3), (91,1,5,3), (91,6,0,3),
    (91,2,6,1), (90,0,1,9), (73,21,4,2), (95,4,0,1), (79,10,7,4), (77,12,3,8), (91,4,0,5), (59,23,7,11), (81,15,4,0),
    (80,2,10,8), (44,25,9,22), (73,14,7,6), (99,1,0,0), (57,14,10,19), (60,37,3,0), (65,18,11,6), (57,35,1,7),
    (57,25,16,2), (76,12,5,7), (87,7,5,1), (58,26,12,4), (70,21,9,0), (88,6,5,1), (71,8,17,4), (93,6,1,0), (70,7,16,7),
    (15,60,25,0), (97,2,0,1), (83,2,1,14), (81,12,3,4), (65,14,16,5), (97,0,0,3), (85,6,4,5), (89,5,6,0), (95,1,1,3),
    (89,8,2,1), (49,42,7,2), (95,5,0,0), (84,7,9,0), (97,0,0,3), (29,27,9,35), (79,4,0,17), (85,2,0,13), (44,42,12,2),
    (48,17,6,29), (91,4,4,1), (72,27,1,0), (56,6,28,10), (91,4,1,4), (96,1,0,3), (94,0,2,4), (86,5,4,5), (99,0,0,1),
)


def synthetic(n_queries: int, n_docs: int = 100, seed: int = 7) -> list[tuple[str, dict[str, int], list[Candidate]]]:
    """Synthetic queries (no text): the first ``n_queries`` grade counts of ``DL_GRADE_COUNTS``, cut to ``n_docs``
    candidates in shuffled order."""
    rng = random.Random(seed)
    out = []
    for q, counts in enumerate(DL_GRADE_COUNTS[:n_queries]):
        grades = [g for g, n in enumerate(counts) for _ in range(n)]
        rng.shuffle(grades)
        docs = [Candidate(f"q{q}d{i}", "") for i in range(n_docs)]
        out.append((f"query {q}", {d.id: g for d, g in zip(docs, grades)}, docs))
    return out


def both_orders(judge: Comparator, query: str, docs: list[Candidate], n_pairs: int, rng: random.Random):
    for a, b in (rng.sample(docs, 2) for _ in range(n_pairs)):
        yield judge.compare(query, [(a, b), (b, a)])


def test_registry_names_and_errors():
    assert set(J.FAMILY) <= set(J.JUDGES) and set(J.JUDGES) == set(J.INFO)
    assert {"calibrated", "soft-calibrated", "strong-bias", "no-bias-noisy", "doc-error", "overconfident",
            "underconfident", "ql-like", "bundled-ql"} <= set(J.FAMILY)
    assert "bundled-ql" not in J.family_for_depth(100, "dl19") and "bundled-ql" in J.family_for_depth(20, "dl20")
    assert "bundled-ql" not in J.family_for_depth(20, "scifact") and "calibrated" in J.family_for_depth(100)
    for name in ("positional", "embedding-error", "embedding-error-soft", "weak"):  # checks outside the family
        assert name in J.JUDGES and name not in J.FAMILY
    for name in J.JUDGES:  # each docstring says whether the judge is calibrated, as INFO declares
        assert ("Not calibrated" in J.JUDGES[name].__doc__) == (J.INFO[name].calibrated_against is None), name
    with pytest.raises(ValueError, match="unknown judge"):
        J.build_judge("nope", {}, 0)
    with pytest.raises(ValueError, match="queries="):
        J.build_judge("calibrated", {"q1": {"d1": 1}}, 0)
    with pytest.raises(ValueError, match="temperature"):
        J.GradedJudge({}, J.Knobs(temperature=0.0))


@pytest.mark.parametrize("name", SIMULATED)
def test_a_query_or_id_with_a_lone_surrogate_is_judged_as_the_core_judge_does(name):
    from activeprp_core.comparators.simulated import SimulatedComparator, keyed_gauss, keyed_uniform

    query, docs = "lone \ud800 surrogate", [Candidate("d\udfff", "x"), Candidate("d2", "y")]
    answers = J.build_judge(name, {"d\udfff": 2, "d2": 0}, seed=1).compare(query, [tuple(docs), tuple(docs[::-1])])
    assert all(0.0 <= p <= 1.0 for p in answers)
    assert SimulatedComparator({"d\udfff": 2}, doc_noise=1.0).compare(query, [tuple(docs)])[0] in (0.0, 1.0)
    assert (J._uniform, J._gauss) == (keyed_uniform, keyed_gauss)  # one keyed draw for both judges


@pytest.mark.parametrize("name", SIMULATED)
def test_deterministic_per_seed_and_independent_of_asking_order(name):
    (query, grades, docs), = synthetic(1, 30)
    rng = random.Random(1)
    pairs = [tuple(rng.sample(docs, 2)) for _ in range(200)]
    first = J.build_judge(name, grades, seed=3).compare(query, pairs)
    again = J.build_judge(name, grades, seed=3)
    assert again.compare(query, pairs[::-1])[::-1] == first  # other asking order, same answers
    assert again.compare(query, pairs) == first  # asked twice
    assert [again.compare(query, [p])[0] for p in pairs[:20]] == first[:20]  # one at a time
    other = J.build_judge(name, grades, seed=4).compare(query, pairs)
    assert other != first  # another noise realisation
    assert all(0.0 <= p <= 1.0 for p in first)


@pytest.mark.parametrize("name", SIMULATED)
def test_answer_kind_as_declared(name):
    (query, grades, docs), = synthetic(1, 40)
    answers = [p for pair in both_orders(J.build_judge(name, grades, 0), query, docs, 150, random.Random(2))
               for p in pair]
    if J.INFO[name].kind == "hard":
        assert set(answers) <= {0.0, 1.0} and len(set(answers)) == 2
    else:
        assert all(0.0 < p < 1.0 for p in answers)


@pytest.mark.parametrize("name", [n for n in SIMULATED if J.INFO[n].flip_target is not None])
def test_flip_rate_near_target_on_synthetic_pairs(name):
    flips = total = 0
    rng = random.Random(5)
    for query, grades, docs in synthetic(len(DL_GRADE_COUNTS)):
        judge = J.build_judge(name, grades, seed=0)
        for p1, p2 in both_orders(judge, query, docs, 100, rng):
            flips += (p1 > 0.5) == (p2 > 0.5)
            total += 1
    assert abs(flips / total - J.INFO[name].flip_target) < 0.03, (name, flips / total)


def test_confidence_family_shares_decisions_and_orders_confidence():
    (query, grades, docs), = synthetic(1, 40)
    rng = random.Random(3)
    pairs = [tuple(rng.sample(docs, 2)) for _ in range(300)]
    answers = {n: J.build_judge(n, grades, 0).compare(query, pairs)
               for n in ("calibrated", "soft-calibrated", "overconfident", "underconfident")}
    hard = answers.pop("calibrated")
    conf = {}
    for name, ps in answers.items():
        assert [float(p > 0.5) for p in ps] == hard
        conf[name] = sum(abs(p - 0.5) for p in ps) / len(ps)
    assert conf["underconfident"] < conf["soft-calibrated"] < conf["overconfident"]


def test_order_consistent_judges_answer_complements():
    (query, grades, docs), = synthetic(1, 30)
    for name in ("ql-like", "consistent"):
        for p1, p2 in both_orders(J.build_judge(name, grades, 0), query, docs, 100, random.Random(4)):
            assert p1 + p2 == pytest.approx(1.0)


def test_nested_qrels_resolve_the_query_text():
    qrels = {"q1": {"a": 3, "b": 0}, "q2": {"a": 0, "b": 3}}
    judge = J.build_judge("consistent", qrels, 0, queries={"q1": "first query", "q2": "second query"})
    a, b = Candidate("a", ""), Candidate("b", "")
    perfect = J.GradedJudge(qrels, J.Knobs(), queries={"q1": "first query", "q2": "second query"})
    assert perfect.compare("first query", [(a, b)]) == [1.0]
    assert perfect.compare("second query", [(a, b)]) == [0.0]
    with pytest.raises(ValueError, match="not among"):
        judge.compare("third query", [(a, b)])


def test_doc_error_misjudges_a_document_persistently():
    (query, grades, docs), = synthetic(1, 100)
    knobs = J.Knobs(doc_error_rate=0.2)
    judge = J.GradedJudge(grades, knobs, seed=1)
    flipped = [d.id for d in docs if judge.score(query, d.id) == 3 - grades[d.id] != grades[d.id]]
    assert 5 <= len(flipped) <= 40  # ~20% of 100, those whose grade is not 1.5
    assert J.GradedJudge(grades, knobs, seed=1).score(query, flipped[0]) == 3 - grades[flipped[0]]


def test_cached_judge_reads_its_cache(tmp_path):
    path = tmp_path / "scores.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"queries": {"7": "q text"}, "scores": {"7": {"x": -1.0, "y": -2.5}}, "depth": 2}, f)
    judge = J.CachedScoreJudge(path, temperature=0.5)
    x, y, z = Candidate("x", ""), Candidate("y", ""), Candidate("z", "")
    p_xy, p_yx = judge.compare("q text", [(x, y), (y, x)])
    assert p_xy == pytest.approx(1 / (1 + math.exp(-3.0))) and p_xy + p_yx == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no cached score"):
        judge.compare("q text", [(x, z)])


def test_bundled_ql_answers_from_the_real_cache():
    with gzip.open(J.BUNDLED_QL_CACHE, "rt") as f:
        data = json.load(f)
    assert data["mode"] == "query_likelihood" and data["depth"] == 20 and len(data["scores"]) == 97
    judge = J.build_judge("bundled-ql", None)
    qid, scores = next(iter(data["scores"].items()))
    ids = list(scores)
    assert len(ids) == 20 and all(s <= 0 for s in scores.values())  # mean log-probabilities
    cands = [Candidate(i, "") for i in ids]
    p = judge.compare(data["queries"][qid], [(cands[0], cands[1])])[0]
    assert p == pytest.approx(1 / (1 + math.exp(-(scores[ids[0]] - scores[ids[1]]))))
    res = rerank(data["queries"][qid], cands, ranker="mohajer", oracle="randomized", comparator=judge, budget=None,
                 top_k=5)
    best = max(ids, key=scores.get)
    assert res.order[0] == ids.index(best)  # an order-consistent judge's top passage wins every match


def test_residuals_are_standardised_and_carry_nothing_of_x():
    rng = random.Random(3)
    points = {i: (g, 0.4 * g + rng.gauss(0, 1)) for i, g in enumerate(rng.choice((0, 1, 2, 3)) for _ in range(200))}
    res = J._residuals(points)
    xs, rs = [points[i][0] for i in points], [res[i] for i in points]
    mx = sum(xs) / len(xs)
    assert sum(rs) == pytest.approx(0, abs=1e-9) and sum(r * r for r in rs) / len(rs) == pytest.approx(1)
    assert sum((x - mx) * r for x, r in zip(xs, rs)) == pytest.approx(0, abs=1e-9)  # no linear trace of x
    assert J._residuals({1: (0, 2.0), 2: (1, 3.0)}) == {1: 0.0, 2: 0.0}  # y on a line: no error
    assert J._residuals({}) == {}


def test_weak_judge_is_calibrated_with_the_grade_weighed_less():
    grades = {f"d{i}": i % 4 for i in range(40)}
    weak, calibrated = J.build_judge("weak", grades, 3), J.build_judge("calibrated", grades, 3)
    for d, g in grades.items():  # the same document noise, the grade weighed WEAK_STRENGTH instead of 1
        assert weak.score("q", d) == pytest.approx(calibrated.score("q", d) - (1 - J.WEAK_STRENGTH) * g)
    assert 0.5 < J.WEAK_STRENGTH < 1


def test_embedding_error_judge_reads_the_real_embedding_cache():
    with gzip.open(J.MINILM_CACHE, "rt") as f:
        data = json.load(f)
    assert data["depth"] == 100 and len(data["scores"]) == 97
    qid, cosine = next(iter(data["scores"].items()))
    query, ids = data["queries"][qid], list(cosine)
    grades = {d: i % 4 for i, d in enumerate(ids)}
    judge = J.build_judge("embedding-error", grades)
    errors = J._residuals({d: (grades[d], c) for d, c in cosine.items()})
    assert judge.score(query, ids[5]) == pytest.approx(grades[ids[5]] + J.CALIBRATED.doc_noise * errors[ids[5]])
    more_similar = max(ids, key=lambda d: errors[d])  # the most over-rated passage for its grade
    assert judge.score(query, more_similar) > grades[more_similar] + J.CALIBRATED.doc_noise
    a, b = Candidate(ids[0], ""), Candidate(ids[1], "")
    assert J.build_judge("embedding-error", grades, 4).compare(query, [(a, b)]) in ([0.0], [1.0])
    soft = J.build_judge("embedding-error-soft", grades).compare(query, [(a, b)])[0]
    assert 0 < soft < 1
    with pytest.raises(ValueError, match="no cached similarity"):
        judge.compare(query, [(a, Candidate("not-a-passage", ""))])


def test_comparator_for_builds_one_judge_per_query():
    class Coll:
        qrels = {"1": {"a": 3}, "2": {"b": 3}}

    judge_of = J.comparator_for("consistent", seed=2)(Coll())
    a, b = Candidate("a", ""), Candidate("b", "")
    assert judge_of("1").compare("any", [(a, b)]) == [1.0] and judge_of("2").compare("any", [(a, b)]) == [0.0]
    with pytest.raises(ValueError, match="unknown judge"):
        J.comparator_for("nope")


def test_resolve_judges_expands_family_and_checks_coverage():
    assert J.resolve_judges(["family"]) == list(J.FAMILY)
    deep = J.resolve_judges(["strong-bias", "family"], depth=100, collection="dl19")
    assert deep[0] == "strong-bias" and deep.count("strong-bias") == 1 and "bundled-ql" not in deep
    assert "bundled-ql" in J.resolve_judges(["family"], depth=20, collection="dl20")
    with pytest.raises(ValueError, match="no answers for 100"):
        J.resolve_judges(["bundled-ql"], depth=100, collection="dl19")
    with pytest.raises(ValueError, match="unknown judge"):
        J.resolve_judges(["calibratd"])
    assert "positional" not in J.resolve_judges(["family"], depth=100, collection="dl19")
    assert J.resolve_judges(["positional", "family"], depth=100, collection="dl19")[0] == "positional"


def test_the_calibration_script_bisects_with_the_package_s_bisect_rounded():
    """``benchmarks/judge_calibration.py`` had its own copy of ``activeprp_bench.calibration``'s bisection."""
    from activeprp_bench.calibration import bisect

    spec = importlib.util.spec_from_file_location("judge_calibration", ROOT / "benchmarks" / "judge_calibration.py")
    script = sys.modules["judge_calibration"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert abs(bisect(lambda x: x * x, 0.0, 4.0, 2.0, True, 30) - 2 ** 0.5) < 1e-6
    assert abs(bisect(lambda x: -x, 0.0, 4.0, -3.0, False, 30) - 3.0) < 1e-6
    assert script.bisect(lambda x: x * x, 0.0, 4.0, 2.0, True, 30) == 1.414
    assert script.calibration.bisect is bisect


@pytest.mark.parametrize(("stem", "params"), [("spread_n100_k10_b250", (250, 2, 100, 10, None)),
                                               ("spread_n20_k3_b50_r6", (50, 2, 20, 3, 6))])
def test_spread_tables_are_what_their_records_give_with_a_command_that_runs(stem, params):
    """The spread tables printed ``python -m activeprp_bench.judge_calibration``, a module moved to
    ``benchmarks/judge_calibration.py`` (5d94647), beside rows of an older ``auto``; re-run, each .md is the
    script's rendering of the .json beside it, and the command it prints names the script."""
    spec = importlib.util.spec_from_file_location("judge_calibration", ROOT / "benchmarks" / "judge_calibration.py")
    script = sys.modules["judge_calibration"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    folder = ROOT / "benchmarks" / "results" / "judges"
    text = (folder / f"{stem}.md").read_text(encoding="utf-8")
    assert text == script.spread_text(json.loads((folder / f"{stem}.json").read_text(encoding="utf-8")), *params)
    command = text.split("Command: `", 1)[1].split("`", 1)[0]
    assert command.startswith("python benchmarks/judge_calibration.py ") and f"--spread {params[0]}" in command


def test_calibration_answer_stats_count_the_answers():
    spec = importlib.util.spec_from_file_location("judge_calibration", ROOT / "benchmarks" / "judge_calibration.py")
    calibration = sys.modules["judge_calibration"] = importlib.util.module_from_spec(spec)  # dataclasses need it
    spec.loader.exec_module(calibration)
    Coll, answer_stats = calibration.Coll, calibration.answer_stats

    (query, grades, docs), = synthetic(1, 30)
    coll = Coll("syn", {"q": query}, {"q": docs}, {"q": grades})
    always_first = answer_stats(lambda c, q: J.GradedJudge(grades, J.Knobs(position_bias=100.0)), [coll], 30, 50)
    assert always_first["flip_rate"] == 1.0 and always_first["first_slot_rate"] == 1.0
    assert always_first["soft_rate"] == 0.0 and always_first["mean_confidence"] == 0.5
    perfect = answer_stats(lambda c, q: J.GradedJudge(grades, J.Knobs(hard=False)), [coll], 30, 50)
    assert perfect["flip_rate"] == 0.0 and perfect["soft_rate"] == 1.0  # equal grades answer 0.5: not a flip
    assert perfect["first_slot_rate"] < 0.5  # pairs of equal grades answer exactly 0.5: not "first"
    # a judge that answers from the grades alone is right on every prompt of distinct grades
    oracle = answer_stats(lambda c, q: J.GradedJudge(grades, J.Knobs(strength=100.0)), [coll], 30, 50)
    assert oracle["ece"] < 1e-6
