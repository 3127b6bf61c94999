"""bensemble 0.2 import path of the NES searchers (see :mod:`bensemble.search.searchers`)."""

from bensemble.search.searchers import EvolutionarySearcher, RandomSearcher

__all__ = ["EvolutionarySearcher", "RandomSearcher"]
