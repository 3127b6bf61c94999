"""The error raised when a method is used before it is fitted."""

from __future__ import annotations

__all__ = ["NotFittedError"]


class NotFittedError(ValueError, RuntimeError):
    """A method was called before the fit it needs.

    A ``ValueError`` like every bad call in bensemble, and a ``RuntimeError`` as bensemble 0.2
    raised for ``LaplaceApproximation`` and ``PBPEngine``, so code catching either works.
    """
