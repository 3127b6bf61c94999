"""Stochastic layers: DropConnect and the base classes random layers build on.

:class:`StochasticLayer` is the contract with :class:`bensemble.core.StochasticMembers`
(``stochastic_kind``, ``force_sample``, ``sample_generator``); :class:`BaseBayesianLayer` keeps
bensemble 0.2's import path for variational layers.
"""

from bensemble.layers.base import BaseBayesianLayer, StochasticLayer, bernoulli_mask
from bensemble.layers.dropconnect import DropConnectLinear
from bensemble.layers.linear import BayesianLinear

__all__ = [
    "StochasticLayer",
    "BaseBayesianLayer",
    "BayesianLinear",
    "DropConnectLinear",
    "bernoulli_mask",
]
