"""Bootstrap confidence intervals that stream, shard and merge, valid near zero.

* :func:`poisson_weights` - counter-based Poisson(1) bootstrap weights, a pure function of
  (seed, global sample index, replicate): any chunking gives the same weights.
* :class:`ReplicateState` - named replicate statistics sharing those weights: ``update`` per
  chunk, ``merge`` across shards / workers, ``compute`` -> ``{name: Interval}``.
* :class:`MeanReplicates` (accuracy, NLL, Brier, coverage: percentile intervals),
  :class:`CalibrationReplicates` (top-label / classwise ECE) and :class:`EECEReplicates` (EECE
  with fixed bins): the calibration errors use :func:`l1_norm_interval`, a two-step
  test-inversion interval valid near zero.
* :func:`selective_replicates` / :func:`selective_intervals` - misclassification AUROC and
  AURC replicates (exact, from the gathered confidences, same weights; percentile intervals).
* :class:`Interval` - point, low, high, level, method and what the interval covers.

See the user guide page "Confidence intervals" for what each interval covers.
"""

from bensemble.metrics.intervals._bundle import ReplicateState
from bensemble.metrics.intervals._calibration_replicates import CalibrationReplicates
from bensemble.metrics.intervals._eece_replicates import EECEReplicates
from bensemble.metrics.intervals._interval import Interval, l1_norm_interval, percentile_interval
from bensemble.metrics.intervals._poisson import poisson_weights
from bensemble.metrics.intervals._replicates import MeanReplicates
from bensemble.metrics.intervals._selective_replicates import (
    selective_intervals,
    selective_replicates,
)

__all__ = [
    "CalibrationReplicates",
    "EECEReplicates",
    "Interval",
    "MeanReplicates",
    "ReplicateState",
    "l1_norm_interval",
    "percentile_interval",
    "poisson_weights",
    "selective_intervals",
    "selective_replicates",
]
