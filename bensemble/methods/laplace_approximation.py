"""bensemble 0.2 import path of :class:`~bensemble.methods.kfac_laplace.LaplaceApproximation`."""

from bensemble.methods.kfac_laplace import LaplaceApproximation

__all__ = ["LaplaceApproximation"]
