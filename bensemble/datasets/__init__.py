"""Data we generate (the toy Gaussians, with their analytic P(y|x)) or that a package ships."""

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
    "ToyData",
    "corrupt_inputs",
    "make_toy_gaussians",
    "make_toy_grid",
    "toy_posterior",
]
