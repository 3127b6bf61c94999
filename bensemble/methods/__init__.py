"""Posterior approximations and classical second-order models: producers of member predictions.

Every method yields member probabilities ``[H, N, K]`` through ``sample_members(x, n, generator)``
(and ``sample_models(n)`` where members are networks); none computes a metric.

Second-order ("active") methods: :func:`train_ensemble` (deep ensembles),
:class:`LastLayerLaplace`, :class:`BayesianLogisticRegression` (Pólya-Gamma Gibbs),
:class:`RandomForestMembers` / :func:`forest_members`; MC dropout and DropConnect are
``Ensemble.from_stochastic`` over :func:`make_mlp` networks. Illustrative methods (their EU is
not a member variance): :class:`Centroids`, :class:`RelativeLikelihood`, :class:`EvidentialKNN`.
"""

from bensemble.methods._illustrative import IllustrativeClassifier, gaussian_members
from bensemble.methods._parallel import MemberBackend
from bensemble.methods._pbp_moments import PBPNet, ProbLinear, relu_moments
from bensemble.methods.bayesian_logistic import BayesianLogisticRegression
from bensemble.methods.centroids import Centroids
from bensemble.methods.deep_ensemble import train_ensemble, train_model
from bensemble.methods.evidential_knn import EvidentialKNN
from bensemble.methods.forest import RandomForestMembers, forest_members
from bensemble.methods.kfac_laplace import LaplaceApproximation
from bensemble.methods.laplace import LastLayerLaplace
from bensemble.methods.mlp import make_mlp
from bensemble.methods.pbp import PBPEngine
from bensemble.methods.relative_likelihood import RelativeLikelihood

__all__ = [
    "BayesianLogisticRegression",
    "Centroids",
    "EvidentialKNN",
    "IllustrativeClassifier",
    "LaplaceApproximation",
    "LastLayerLaplace",
    "MemberBackend",
    "PBPEngine",
    "PBPNet",
    "ProbLinear",
    "RandomForestMembers",
    "RelativeLikelihood",
    "forest_members",
    "gaussian_members",
    "make_mlp",
    "relu_moments",
    "train_ensemble",
    "train_model",
]
