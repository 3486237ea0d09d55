"""What the system checks of the ``LLMCHAT`` setting share: warnings for unknown keys, an
optional module that must be installed, a policy with its ``<KEY>_FOR`` callable."""

from __future__ import annotations

import importlib
from typing import Any

from django.core.checks import Error, Warning


def _unknown_keys(given: Any, known: Any, where: str, problem: str, what: str, id: str) -> list:
    """A warning ``id`` for each key of ``given`` that is not in ``known``."""
    hint = f"Known {what}: {', '.join(sorted(known))}."
    return [
        Warning(f"{where}[{key!r}]{problem}", hint=hint, id=id) for key in given if key not in known
    ]


def _missing(module: str, message: str, **kw: Any) -> list:
    """``[Error(message, **kw)]`` when the optional ``module`` cannot be imported, else []."""
    try:
        importlib.import_module(module)
    except ImportError:
        return [Error(message, **kw)]
    return []


def _policy_errors(
    merged: dict[str, Any], key: str, validate: Any, page: str, ids: str, hint_for: str
) -> list:
    """``key`` (its problems from ``validate``: ``<ids>0``) and ``<key>_FOR``, a callable or
    an importable dotted path (``<ids>1``)."""
    hint = f"See the {page} page of the documentation."
    errors = [Error(problem, hint=hint, id=f"{ids}0") for problem in validate(merged[key])]
    value = merged[f"{key}_FOR"]
    if not _callable_setting(value):
        message = f"LLMCHAT['{key}_FOR'] is not a callable or an importable dotted path: "
        errors.append(Error(f"{message}{value!r}.", hint=hint_for, id=f"{ids}1"))
    return errors


def _callable_setting(value: Any) -> bool:
    """``None``, a callable, or the dotted path of one."""
    if value is None or callable(value):
        return True
    if not isinstance(value, str):
        return False
    from django.utils.module_loading import import_string

    try:
        return callable(import_string(value))
    except ImportError:
        return False
