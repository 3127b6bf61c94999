"""Keyword arguments renamed to the glossary's names, the old names kept as deprecated aliases.

The package calls integer class labels ``labels`` everywhere. Functions that took them as
``targets`` (bensemble 0.2's metrics) accept that keyword until bensemble 0.4, with a
:class:`DeprecationWarning` naming the new one::

    @renamed_keywords(targets="labels")
    def brier_score(probs, labels, *, from_logits=False): ...

    brier_score(p, targets=y)  # works, warns: `targets` is deprecated, use `labels`

Positional calls are unaffected. Passing both names is a ``ValueError``. ``inspect.signature``
shows the new names (the wrapper keeps ``__wrapped__``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from bensemble._scalar_checks import warn_user

__all__ = ["REMOVAL", "renamed_keywords", "take_renamed"]

#: The release that removes the deprecated names.
REMOVAL = "0.4"

F = TypeVar("F", bound=Callable[..., Any])


def take_renamed(fn: str, kwargs: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    """``kwargs`` with every deprecated name of ``renames`` (old -> new) moved to its new name,
    after one :class:`DeprecationWarning` each; both names at once is a ``ValueError``."""
    for old, new in renames.items():
        if old not in kwargs:
            continue
        if new in kwargs:
            raise ValueError(
                f"{fn}: `{new}` must be passed once (got `{new}` and its deprecated name `{old}`)"
            )
        warn_user(
            f"{fn}: `{old}` is deprecated, use `{new}` (same meaning); `{old}` will be removed "
            f"in bensemble {REMOVAL}",
            DeprecationWarning,
        )
        kwargs[new] = kwargs.pop(old)
    return kwargs


def renamed_keywords(**renames: str) -> Callable[[F], F]:
    """Decorator: accept each ``old=`` keyword of ``renames`` (``old="new"``) as a deprecated
    alias of ``new`` (see the module docstring)."""

    def decorate(function: F) -> F:
        name = function.__qualname__.replace(".<locals>", "")

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                kwargs = take_renamed(name, kwargs, renames)
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
