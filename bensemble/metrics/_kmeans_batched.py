"""Compatibility: moved to :mod:`bensemble.metrics.binning._threads` (issue 23).

Kept only for modules that still import from here (``metrics/streaming_eval.py``,
``app/evaluate_memmap.py``, ``app/evaluate_summary.py``); remove once they import from the new
place.
"""

from bensemble.metrics.binning._threads import map_classes, single_threaded  # noqa: F401
