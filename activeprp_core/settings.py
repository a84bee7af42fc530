"""``RerankSettings``: the one declaration of the per-query settings of a rerank, validated once, on the way in.

Each field declares, in ``metadata["setting"]`` (a ``Setting``), how a value is checked (``Count``, ``Seconds``,
``OneOf``, ``Flag``, ``Named``), what it means (``help``, and what None means) and whether one request of a
``rerank_many`` or of the service may set it for itself (``per_request``). Every entry point derives its surface
from these declarations instead of restating them:

- the keywords of ``rerank``, ``arerank``, ``rerank_many``, ``arerank_many``, ``arerank_stream`` and
  ``Reranking`` (``takes_settings``, ``RerankSettings.of``);
- the fields of the LangChain and LlamaIndex wrappers (``activeprp_integrations._common.settings_model``);
- the flags of ``activeprp rerank`` / ``rerank-run`` (``activeprp_cli.rerank.add_settings_args``);
- the settings one request may carry (``PER_REQUEST``), the service's body fields that carry them
  (``activeprp_integrations.serve.bodies``) and the caps a server bounds (``CAPS``);
- the echo of the settings in ``RerankResult``, ``RerankResult.stats()`` and Ray's output columns.

``ONLINE`` is the preset of the online entry points (the wrappers, ``activeprp rerank``, ``activeprp serve``).
Adding a setting takes its field here, its echo in ``RerankResult`` (``types.py``) and, for a cap, its rule in
``budget.RULES``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, TypeVar

from .budget import RULES, check_count, check_flag, check_seconds
from .errors import MAX_CONSECUTIVE_FAILURES  # its home is errors.py (below types and comparators); also read here
from .oracles import ORACLES, Oracle
from .rankers import RANKERS, Ranker
from .rankers.auto import AUTO
from .registry import check_name

OnFailure = Literal["raise", "prior"]
ON_FAILURE = ("raise", "prior")


@dataclass(frozen=True)
class Count:
    """An integer >= ``minimum`` (None: any integer), or None when ``allow_none`` (``budget.check_count``)."""

    minimum: int | None = 0
    allow_none: bool = False

    def __call__(self, value: Any, name: str) -> int | None:
        return check_count(value, name, minimum=self.minimum, allow_none=self.allow_none)


@dataclass(frozen=True)
class Seconds:
    """A finite number of seconds >= 0, or None (``budget.check_seconds``)."""

    allow_none: bool = True

    def __call__(self, value: Any, name: str) -> float | None:
        return check_seconds(value, name, allow_none=self.allow_none)


@dataclass(frozen=True)
class OneOf:
    """One of ``options`` (strings)."""

    options: tuple[str, ...]

    @property
    def choices(self) -> list[str]:
        """The options, in order."""
        return list(self.options)

    def __call__(self, value: Any, name: str) -> str:
        if not isinstance(value, str) or value not in self.options:
            raise ValueError(f"{name} must be one of {self.options}, got {value!r}")
        return value


@dataclass(frozen=True)
class Flag:
    """A bool (no other type is read as one: ``budget.check_flag``)."""

    def __call__(self, value: Any, name: str) -> bool:
        return check_flag(value, name)


@dataclass(frozen=True)
class Named:
    """A name of ``registry`` (or of ``extra``), or an instance of ``base``; the name is kept, never built here
    (the reranking builds it once)."""

    registry: Mapping[str, type]
    base: type
    extra: tuple[str, ...] = ()

    @property
    def choices(self) -> list[str]:
        """The names, sorted."""
        return sorted({*self.registry, *self.extra})

    def __call__(self, value: Any, name: str) -> Any:
        return check_name(value, self.registry, self.base, name, self.extra)


Check = Count | Seconds | OneOf | Flag | Named


@dataclass(frozen=True)
class Setting:
    """The declaration of one ``RerankSettings`` field.

    Attributes:
        check: ``check(value, name)`` returns the value to keep or raises TypeError / ValueError saying what to pass.
        help: what the setting is, in a few words (units included).
        none: what None means for a setting that allows it (e.g. ``"no cap"``), else "".
        per_request: one request of a ``rerank_many`` (or of the service) may set it for itself.
    """

    check: Check
    help: str
    none: str = ""
    per_request: bool = False


def _setting(check: Check, help: str, *, none: str = "", per_request: bool = False) -> dict[str, Setting]:
    # A field's metadata, not the field: each default is written in ``field(default=...)`` itself, where griffe
    # (the API page) reads it; through a wrapper the page showed the call instead (review s68b F1).
    return {"setting": Setting(check, help, none, per_request)}


@dataclass(frozen=True, kw_only=True)
class RerankSettings:
    """The settings of one query's rerank (in a ``rerank_many``, shared by every query but those among
    ``PER_REQUEST`` that a request carries itself).

    Attributes:
        ranker: a name of ``activeprp_core.rankers.RANKERS`` (``"auto"`` included) or a ``Ranker`` instance.
        oracle: ``randomized``, ``bidirectional``, ``single``, ``adaptive``, ``auto``, or an ``Oracle`` instance.
        budget: the most LLM calls per query (int >= 0; None = no cap), a remote judge's retries not counted
            (they are reported in ``retries``). Required: spend is always stated.
        max_rounds: the most sequential rounds that send calls (int >= 0; None = no cap; 0 = the prior order).
        token_budget: the most prompt + completion tokens per query (int >= 0; None = no cap): each prompt's
            upper-bound estimate (``Comparator.estimate_tokens``) is reserved before it is sent, the difference
            to the usage the comparator reports is refunded after (a call reporting no usage keeps its estimate).
        time_budget: the most seconds per query, from the start of its rerank (a finite number >= 0; None = no
            cap; 0 = no call at all).
        top_k: K, the length of the reranked prefix (int >= 1). seed: seeds the oracle and ranker draws (any int).
        cache: reuse answers to repeated pair questions at no cost. on_failure: ``"raise"`` or ``"prior"``.
        max_concurrency: the most calls in flight (int >= 1; None = the comparator's own).
        max_consecutive_failures: the circuit breaker (int >= 1; None = never).

    Raises:
        TypeError: an integer setting that is not an int (numpy integers accepted, bools refused), a time that is
            not a number (bools and strings refused), a ranker or oracle of the wrong type, a non-bool ``cache``.
            ValueError: a value out of range (a negative count or time, an infinite or NaN time), an unknown
            ranker, oracle or ``on_failure``.
    """

    ranker: str | Ranker = field(default="mohajer", metadata=_setting(
        Named(RANKERS, Ranker), "the ranker that schedules the pair questions"))
    oracle: str | Oracle = field(default="randomized", metadata=_setting(
        Named(ORACLES, Oracle, (AUTO,)), "the oracle that turns a pair question into LLM calls"))
    budget: int | None = field(metadata=_setting(
        Count(allow_none=True), "most LLM calls per query (a judge's retries are not counted)", none="no cap",
        per_request=True))
    max_rounds: int | None = field(default=None, metadata=_setting(
        Count(allow_none=True), "most sequential rounds of LLM calls per query", none="no cap", per_request=True))
    token_budget: int | None = field(default=None, metadata=_setting(
        Count(allow_none=True),
        "most prompt + completion tokens per query: estimates reserved before sending, reported usage kept",
        none="no cap", per_request=True))
    time_budget: float | None = field(default=None, metadata=_setting(
        Seconds(), "most seconds per query from the start of its rerank: 0 = no call at all", none="no cap",
        per_request=True))
    top_k: int = field(default=10, metadata=_setting(
        Count(minimum=1), "K: the length of the reranked prefix", per_request=True))
    seed: int = field(default=0, metadata=_setting(
        Count(minimum=None), "seed of the oracle's and the ranker's random draws", per_request=True))
    cache: bool = field(default=True, metadata=_setting(
        Flag(), "answer a repeated pair question from the pair cache at no cost"))
    on_failure: OnFailure = field(default="raise", metadata=_setting(
        OneOf(ON_FAILURE), "what a comparator failure does: raise it, or return the best-effort (prior) order"))
    max_concurrency: int | None = field(default=None, metadata=_setting(
        Count(minimum=1, allow_none=True), "most LLM calls in flight", none="the comparator's own"))
    max_consecutive_failures: int | None = field(default=MAX_CONSECUTIVE_FAILURES, metadata=_setting(
        Count(minimum=1, allow_none=True), "calls in a row that may fail before the circuit breaker stops the calls",
        none="never"))

    def __post_init__(self) -> None:
        for name in FIELDS:
            object.__setattr__(self, name, check_setting(name, getattr(self, name)))

    @classmethod
    def of(cls, settings: RerankSettings | None = None, **options: Any) -> RerankSettings:
        """``settings`` with ``options`` replacing its fields (only ``options`` are checked: ``settings`` was), or
        new settings from ``options`` alone.

        Raises:
            TypeError: ``settings`` is not a ``RerankSettings``, or an unknown option. As the class otherwise.
        """
        if settings is None:
            return cls(**options)
        if not isinstance(settings, RerankSettings):
            raise TypeError(f"settings must be a RerankSettings, got {type(settings).__name__}")
        if not options:
            return settings
        _known(options)
        return cls.from_checked(**{**settings.as_dict(), **{k: check_setting(k, v) for k, v in options.items()}})

    @classmethod
    def from_checked(cls, **values: Any) -> RerankSettings:
        """Settings from values that went through ``check_setting`` on their way in (an entry point's own
        boundary: a wrapper's field validator, a CLI flag's type); missing fields take their defaults. Nothing is
        checked again.

        Raises:
            TypeError: an unknown field, or a required field (``budget``) missing.
        """
        _known(values)
        settings = object.__new__(cls)
        for f in fields(cls):
            if f.name not in values and f.default is MISSING:
                raise TypeError(f"RerankSettings needs {f.name}")
            object.__setattr__(settings, f.name, values.get(f.name, f.default))
        return settings

    def as_dict(self) -> dict[str, Any]:
        """The fields as keyword arguments (for ``rerank`` & co.)."""
        return {name: getattr(self, name) for name in FIELDS}


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RerankSettings))
"""The settings' names, in declaration order."""
SPECS: dict[str, Setting] = {f.name: f.metadata["setting"] for f in fields(RerankSettings)}
"""Each setting's declaration (``Setting``), by name."""
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(RerankSettings) if f.default is not MISSING}
"""The defaults of ``RerankSettings`` (``budget`` has none)."""
PER_REQUEST: tuple[str, ...] = tuple(name for name in FIELDS if SPECS[name].per_request)
"""The settings one request of a ``rerank_many`` / ``arerank_stream`` (or of the service) may set for itself."""
CAPS: tuple[str, ...] = tuple(name for name in FIELDS if name in RULES)
"""The hard caps (``budget.RULES``), in declaration order: a server bounds what a request may ask for each."""
COUNTS: dict[str, dict[str, Any]] = {name: {"minimum": spec.check.minimum, "allow_none": spec.check.allow_none}
                                     for name, spec in SPECS.items() if isinstance(spec.check, Count)}
"""The integer settings and their bounds, as ``check_count`` takes them (numpy integers pass, bools do not)."""

def check_setting(name: str, value: Any) -> Any:
    """``value`` as setting ``name`` keeps it (e.g. a numpy integer as an int), checked by its declaration.

    Raises:
        TypeError / ValueError: the value is not one the setting takes (the message says what to pass); an
            unknown name is a TypeError.
    """
    _known((name,))
    return SPECS[name].check(value, name)


def _known(names: Any) -> None:
    unknown = sorted(set(names) - set(SPECS))
    if unknown:
        raise TypeError(f"unknown setting(s) {unknown}; the settings are {list(SPECS)}")


ONLINE = RerankSettings(ranker=AUTO, oracle=AUTO, budget=50, max_rounds=6)
"""The online preset: the defaults of the entry points that sit on a request path (the LangChain and LlamaIndex
wrappers, ``activeprp rerank``, ``activeprp serve``): ``auto`` ranker and oracle, 50 LLM calls and 6 sequential
rounds per query; the other fields are ``RerankSettings``'s defaults. Its ``top_k`` (10) is the K of ``activeprp
rerank`` and ``activeprp serve`` (a request's ``top_n`` sets its own); the wrappers set K with their ``top_n``,
3 by default (``activeprp_integrations._common.DEFAULT_TOP_N``). The budget and round cap were chosen at N=20,
K=3; ``auto``'s table was measured at (N, K) = (20, 3), (50, 5) and (100, 10) and looks up the nearest in log
scale, so at N=20 it picks the same ranker and oracle for K=10. Why these values: docs/judges.md."""


_Func = TypeVar("_Func", bound=Callable[..., Any])


def takes_settings(func: _Func) -> _Func:
    """Decorator: ``func`` takes the ``RerankSettings`` fields as ``**options``; its ``inspect.signature`` (what
    IDEs, ``help()`` and ``inspect`` show) lists them as keyword-only parameters with their defaults instead, so
    ``rerank(..., token_budget=...)`` is visible without declaring the fields again. Calls are unchanged, and
    type checkers see ``func``'s own annotations (the settings as ``**options: Any``)."""
    signature = inspect.signature(func)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    settings = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
                                  default=inspect.Parameter.empty if f.default is MISSING else f.default)
                for f in fields(RerankSettings)]
    func.__signature__ = signature.replace(parameters=own + settings)  # type: ignore[attr-defined]
    return func
