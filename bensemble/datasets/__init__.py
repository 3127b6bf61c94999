"""Data we generate (the toy Gaussians, with their analytic P(y|x); a heteroscedastic regression
problem with its known E[Y | x] and Var[Y | x]) or that a package ships."""

from bensemble.datasets.regression_toy import (
    REGRESSION_TOY_RANGE,
    RegressionToyData,
    make_regression_toy,
    regression_toy_mean,
    regression_toy_variance,
)
from bensemble.datasets.toy import (
    BAYES_ERROR,
    ToyData,
    corrupt_inputs,
    make_toy_gaussians,
    make_toy_grid,
    toy_posterior,
)

__all__ = [
    "BAYES_ERROR",
    "REGRESSION_TOY_RANGE",
    "RegressionToyData",
    "ToyData",
    "corrupt_inputs",
    "make_toy_gaussians",
    "make_regression_toy",
    "make_toy_grid",
    "regression_toy_mean",
    "regression_toy_variance",
    "toy_posterior",
]
