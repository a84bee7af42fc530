"""Name-or-instance lookup shared by the ranker and oracle registries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")


def resolve(value: str | T, registry: dict[str, type[T]], base: type[T], kind: str) -> T:
    """A new instance of ``registry[value]`` for a name, or ``value`` itself when it is already a ``base``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: neither a str nor a ``base`` instance.
    """
    value = check_name(value, registry, base, kind)
    return value if isinstance(value, base) else registry[value]()


def check_name(value: object, registry: Mapping[str, object], base: type, kind: str,
               extra: Iterable[str] = ()) -> object:
    """``value`` unchanged when it is a ``base`` instance or a name of ``registry`` (or of ``extra``), without
    building anything (``resolve`` builds the instance once, where it is used).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: neither a str nor a ``base`` instance.
    """
    if isinstance(value, base):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{kind} must be a name or a {base.__name__}, got {type(value).__name__}")
    if value not in registry and value not in extra:
        raise ValueError(f"unknown {kind} {value!r}; choose one of {sorted([*registry, *extra])}")
    return value
