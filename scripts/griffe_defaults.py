"""A griffe extension for the docs site's API page (mkdocs.yml): a parameter whose default is a module constant's
name (``max_active: int = DEFAULT_MAX_ACTIVE``) shows the constant's value instead (``= 64``), as
``inspect.signature`` does, when that value is a number, or a short literal, written as such. The page renders
only the modules' ``__all__``, so most such constants are not on it, and two of them share a name
(``activeprp_core.many.DEFAULT_MAX_ACTIVE`` is 64, ``activeprp_integrations.serve``'s is 32): review s68b F4."""

from __future__ import annotations

import ast
from typing import Any

import griffe

SHORT = 24  # a longer literal (a prompt) keeps its name: the page renders the prompts under their names


def _literal(text: str) -> bool:
    """``text`` is a number, an arithmetic of numbers (``32 * 1024``, ``1 << 20``) or a short literal."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    arithmetic = (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)
    if all(isinstance(n, arithmetic) or isinstance(n, ast.Constant) and type(n.value) in (int, float)
           for n in ast.walk(node)):
        return True
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return len(text) <= SHORT


def _value(name: griffe.Expr, loader: griffe.GriffeLoader, seen: frozenset[str] = frozenset()) -> str | None:
    """The written value of the constant ``name`` refers to (following a constant set to another's name)."""
    path = name.canonical_path
    if path in seen:
        return None
    try:
        target = loader.modules_collection[path]
    except KeyError:
        try:  # a constant of another package of the checkout (ray.py's default is activeprp_core.many's)
            loader.load(path.split(".")[0])
            target = loader.modules_collection[path]
        except (ImportError, KeyError, griffe.GriffeError):
            return None
    if target.is_alias:
        try:
            target = target.final_target
        except griffe.AliasResolutionError:
            return None
    value = getattr(target, "value", None) if target.is_attribute else None
    if isinstance(value, griffe.ExprName):
        return _value(value, loader, seen | {path})
    return str(value) if value is not None and _literal(str(value)) else None


class ConstantDefaults(griffe.Extension):
    """Replaces each parameter default that names a constant with the constant's value (see the module)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._package(pkg, loader)

    on_package_loaded = on_package  # the same hook under its name in older griffe

    def _package(self, obj: griffe.Object, loader: griffe.GriffeLoader) -> None:
        for member in obj.members.values():
            if member.is_alias:
                continue
            if member.is_function:
                for parameter in member.parameters:
                    if isinstance(parameter.default, griffe.ExprName):
                        parameter.default = _value(parameter.default, loader) or parameter.default
            elif member.is_class or member.is_module:
                self._package(member, loader)
