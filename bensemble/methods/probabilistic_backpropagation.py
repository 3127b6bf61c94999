"""bensemble 0.2 import path of probabilistic backpropagation (see :mod:`bensemble.methods.pbp`)."""

from bensemble.methods._pbp_moments import PBPNet, ProbLinear, relu_moments
from bensemble.methods.pbp import PBPEngine

__all__ = ["PBPEngine", "PBPNet", "ProbLinear", "relu_moments"]
