"""Diversity from one network: MC dropout (bensemble 0.2 compatibility)."""

from bensemble.diversity.dropout import MCDropoutEnsembler

__all__ = ["MCDropoutEnsembler"]
