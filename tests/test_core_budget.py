"""activeprp_core.budget: the one integer checker, a cap, the caps of a query (reserve, refund, reconcile) and
the rankers' read-only view; and RerankSettings, validated once by that checker."""

import dataclasses
from typing import NamedTuple

import pytest

from activeprp_core import RerankSettings
from activeprp_core.budget import RULES, BudgetView, Cap, Caps, check_count, check_real, check_seconds
from activeprp_core.types import Judgment


class Np(NamedTuple):
    """A case's numpy scalar, ``numpy.<kind>(value)``, made in the test by ``made``: only the cases that need
    numpy skip where it is not installed (the core-only venvs)."""

    kind: str
    value: object


def made(value):
    if isinstance(value, Np):
        return getattr(pytest.importorskip("numpy"), value.kind)(value.value)
    return value


@pytest.mark.parametrize("value", [0, 7, Np("int64", 7), Np("int8", 3), Np("uint16", 5)])
def test_check_count_accepts_python_and_numpy_integers(value):
    value = made(value)
    assert check_count(value, "x") == int(value) and type(check_count(value, "x")) is int


@pytest.mark.parametrize("value", [True, False, Np("bool_", True), 2.0, "3", None])
def test_check_count_refuses_bools_floats_strings_and_none(value):
    value = made(value)
    with pytest.raises(TypeError, match="x must be an int"):
        check_count(value, "x")


def test_check_count_bounds_and_none():
    assert check_count(None, "x", allow_none=True) is None
    assert check_count(-5, "seed", minimum=None) == -5
    with pytest.raises(ValueError, match="top_k must be >= 1, got 0"):
        check_count(0, "top_k", minimum=1)


@pytest.mark.parametrize("value", [0, 2, 0.5, Np("float32", 0.25), Np("int64", 3)])
def test_check_real_accepts_finite_numbers_numpy_too(value):
    value = made(value)
    assert check_real(value, "w") == float(value) and type(check_real(value, "w")) is float


@pytest.mark.parametrize("value, error, message", [
    (True, TypeError, "w must be a number of CPUs >= 0, got bool"), ("1", TypeError, "got str"),
    (None, TypeError, "got NoneType"), (float("nan"), ValueError, "w must be a finite number of CPUs >= 0, got nan"),
    (float("inf"), ValueError, "finite"), (-1, ValueError, "w must be a number of CPUs >= 0, got -1")])
def test_check_real_refuses_bools_strings_nan_inf_and_negatives_naming_the_unit(value, error, message):
    with pytest.raises(error, match=message):
        check_real(value, "w", unit="CPUs")


def test_check_seconds_is_check_real_in_seconds():
    assert check_real(None, "t", allow_none=True) is None
    with pytest.raises(ValueError, match="t must be a number of seconds > 0 or None, got 0"):
        check_seconds(0, "t", positive=True, allow_none=True)
    with pytest.raises(ValueError, match="w must be a number >= 0, got -1"):
        check_real(-1, "w")


def test_check_real_signed_takes_either_sign_but_still_refuses_nan_and_strings():
    assert check_real(-2, "bias", signed=True) == -2.0
    with pytest.raises(ValueError, match="bias must be a finite number, got nan"):
        check_real(float("nan"), "bias", signed=True)
    with pytest.raises(TypeError, match="bias must be a number, got str"):
        check_real("x", "bias", signed=True)


def test_cap_reserves_refunds_and_settles():
    cap = Cap(10, "token_budget")
    assert cap.take(6) and not cap.take(5) and cap.spent == 6 and cap.remaining == 4
    cap.settle(6, 2)  # reserved 6, the answer reported 2: 4 come back
    assert cap.spent == 2 and cap.fits(8) and not cap.fits(9)
    cap.refund(5)
    assert cap.spent == 0
    assert Cap(None).fits(10**9) and Cap(None).remaining is None


class Priced:
    """Prices each "pair" at its own value; asked at most once per prompt_costs call (only while capped)."""

    def estimate_tokens(self, query, pairs):
        return list(pairs)


def test_caps_name_the_cap_that_refuses_and_reconcile_reported_tokens():
    caps = Caps({"budget": 3, "max_rounds": 1, "token_budget": 100})
    costs = caps.prompt_costs(Priced(), "q", [40, 50])  # priced by the comparator's estimate_tokens
    assert costs == [{"budget": 1, "token_budget": 40}, {"budget": 1, "token_budget": 50}]
    uncapped = Caps({"budget": 3, "max_rounds": 1, "token_budget": None})
    assert uncapped.prompt_costs(Priced(), "q", [40]) == [{"budget": 1, "token_budget": 0}]  # no price asked
    zero = Caps({"budget": None, "max_rounds": None, "token_budget": 0})  # a cap of 0 is a cap
    assert zero.refusal(zero.prompt_costs(Priced(), "q", [5])) == "token_budget"
    assert caps.refusal(costs) is None
    caps.take(costs)
    caps.take_round()
    assert caps.refusal(caps.prompt_costs(Priced(), "q", [5])) == "max_rounds"  # the round cap is checked first
    caps.reconcile(costs[0], Judgment(1.0, prompt_tokens=9, completion_tokens=1))
    caps.reconcile(costs[1], Judgment(1.0))  # no usage reported: the reservation stands
    assert caps["token_budget"].spent == 60 and caps["budget"].spent == 2
    caps.refund([{"budget": 1, "token_budget": 50}], round_too=True)
    assert (caps["budget"].spent, caps["token_budget"].spent, caps["max_rounds"].spent) == (1, 10, 0)
    assert caps.reconciled("token_budget") and not caps.reconciled("budget")
    assert set(RULES) == {"budget", "max_rounds", "token_budget", "time_budget"}


def test_view_reads_the_caps_live():
    caps = Caps({"budget": 5, "max_rounds": None, "token_budget": 50})
    state = {"exhausted": False}
    view = BudgetView(caps.caps, lambda: state["exhausted"])
    assert (view.calls_left, view.rounds_left, view.tokens_left, view.exhausted) == (5, None, 50, False)
    caps.take(caps.prompt_costs(Priced(), "q", [20]))
    state["exhausted"] = True
    assert (view.calls_left, view.tokens_left, view.exhausted) == (4, 30, True)
    assert not hasattr(view, "take")  # read-only: nothing to spend through it


def test_settings_take_numpy_integers_as_ints():
    np = pytest.importorskip("numpy")
    s = RerankSettings(budget=np.int64(5), max_rounds=np.int8(2), token_budget=np.int32(900), top_k=np.int16(3),
                       seed=np.int64(-1), max_concurrency=np.int64(2), max_consecutive_failures=np.int64(4))
    assert (s.budget, s.max_rounds, s.token_budget, s.top_k, s.seed) == (5, 2, 900, 3, -1)
    assert all(type(getattr(s, f)) is int for f in ("budget", "max_rounds", "token_budget", "top_k", "seed"))


def test_settings_validate_every_integer_with_the_one_checker():
    for name in ("budget", "max_rounds", "token_budget", "top_k", "seed", "max_concurrency",
                 "max_consecutive_failures"):
        with pytest.raises(TypeError, match=name):
            RerankSettings(**{"budget": 1, name: True})
    with pytest.raises(ValueError, match="token_budget must be >= 0"):
        RerankSettings(budget=1, token_budget=-1)


@pytest.mark.parametrize("bad, error", [({"ranker": "nope"}, ValueError), ({"oracle": "nope"}, ValueError),
                                        ({"on_failure": "ignore"}, ValueError), ({"cache": 1}, TypeError),
                                        ({"ranker": 3}, TypeError), ({"budgt": 3}, TypeError)])
def test_settings_refuse_bad_values_at_construction(bad, error):
    with pytest.raises(error):
        RerankSettings(budget=1, **bad)


def test_settings_are_frozen_need_a_budget_and_merge_options():
    with pytest.raises(TypeError, match="budget"):
        RerankSettings()
    s = RerankSettings(budget=10, oracle="auto", ranker="auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.budget = 3
    t = RerankSettings.of(s, token_budget=500)
    assert (t.budget, t.token_budget, s.token_budget) == (10, 500, None)
    assert RerankSettings.of(s) is s and RerankSettings.of(None, budget=4).budget == 4
    with pytest.raises(TypeError, match="RerankSettings"):
        RerankSettings.of({"budget": 3})
    assert t.as_dict()["token_budget"] == 500
