"""Producers of member predictions: :class:`Ensemble` and its member adapters.

bensemble 0.2 import paths keep working: ``bensemble.core.ensemble.Ensemble``,
``bensemble.core.member.{MemberAdapter, ExplicitMembers, StochasticMembers}`` and
``bensemble.core.types.{Predictor, KLProvider, PosteriorSource, ...}``.
"""

from bensemble.core import types
from bensemble.core.ensemble import Ensemble
from bensemble.core.member import (
    DROPOUT_TYPES,
    ExplicitMembers,
    MemberAdapter,
    StochasticMembers,
)
from bensemble.core.packed import PackedMembers
from bensemble.core.sklearn_members import SklearnMembers
from bensemble.core.types import (  # noqa: F401 - exported by types.__all__
    KLProvider,
    MemberPredictions,
    MemberSource,
    PosteriorSource,
    Predictions,
    Predictor,
)

__all__ = [
    "Ensemble",
    "MemberAdapter",
    "ExplicitMembers",
    "StochasticMembers",
    "SklearnMembers",
    "PackedMembers",
    "DROPOUT_TYPES",
    *types.__all__,  # the protocols and aliases, listed once (in their module)
]
