"""Neural ensemble search (Zaidi et al. 2021; Shu et al. 2022): bensemble 0.2's ``search`` API.

:class:`RandomSearcher` (NES-RS) and :class:`EvolutionarySearcher` (NES-RE) train a pool from a
:class:`SearchSpace` and pick members by :func:`forward_select`; :class:`NESBayesianSampler`
samples members from a posterior over the pool (Monte Carlo or SVGD). Every member's validation
predictions are computed once and selection runs on the cached ``[P, N, *]`` tensor.
"""

from bensemble.search.bayesian import NESBayesianSampler
from bensemble.search.searchers import EvolutionarySearcher, RandomSearcher
from bensemble.search.selection import (
    CachedCriterion,
    ValidationSet,
    classification_nll_criterion,
    forward_select,
    regression_mse_criterion,
    select_on_predictions,
)
from bensemble.search.space import SearchSpace

__all__ = [
    "CachedCriterion",
    "EvolutionarySearcher",
    "NESBayesianSampler",
    "RandomSearcher",
    "SearchSpace",
    "ValidationSet",
    "classification_nll_criterion",
    "forward_select",
    "regression_mse_criterion",
    "select_on_predictions",
]
