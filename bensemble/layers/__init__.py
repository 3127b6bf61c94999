"""Stochastic layers: variational (Bayesian) layers, DropConnect, and the base classes.

:class:`BayesianLinear` and :class:`BayesianConv2d` hold factorised Gaussian posteriors over their
weights; :class:`DropConnectLinear` drops weights at random. :class:`StochasticLayer` is the
contract with :class:`bensemble.core.StochasticMembers` (``stochastic_kind``, ``force_sample``,
``sample_generator``); :class:`BaseBayesianLayer` keeps bensemble 0.2's import path for
variational layers. Every layer follows ``.to()``, ``.double()``, ``.half()`` and
``.share_memory()``, and its noise is drawn in float32 and cast, so a member is the same
function in every dtype.
"""

from bensemble.layers.base import BaseBayesianLayer, StochasticLayer, bernoulli_mask
from bensemble.layers.conv import BayesianConv2d
from bensemble.layers.dropconnect import DropConnectLinear
from bensemble.layers.linear import BayesianLinear

__all__ = [
    "StochasticLayer",
    "BaseBayesianLayer",
    "BayesianLinear",
    "BayesianConv2d",
    "DropConnectLinear",
    "bernoulli_mask",
]
