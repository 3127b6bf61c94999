"""Binnings of member predictions for the EECE - and the K-means behind the default one.

The public face:

* :class:`KMeansBinning` - K-means cells of the member vectors (the paper's partition; the
  default of :func:`~bensemble.metrics.expected_epistemic_calibration_error`, its streaming meter,
  the epistemic reliability display and ``bensemble evaluate``). It holds every clustering
  option.
* :class:`UniformBinning`, :class:`QuantileBinning` - equal-width / equal-mass bins of the mean
  prediction (the ECE's bins); :class:`ExplicitBinning` - bin ids given per point.
* the protocol they share (:class:`~bensemble.metrics.binning.base.Binning`): ``fit(member_probs)
  -> self``, ``assign(member_probs) -> bin ids``, ``n_bins_``, ``centroids_``, ``state_dict`` /
  ``load_state_dict``, ``repr``.
* array-level K-means: :func:`fit_bins` (centroids of ``[N, H]`` rows), :func:`assign_bins`,
  :func:`kmeans_inertia`.

Usage::

    from bensemble.metrics import expected_epistemic_calibration_error as eece
    from bensemble.metrics.binning import KMeansBinning

    eece(member_probs, labels)                                      # KMeansBinning() defaults
    eece(member_probs, labels, binning=KMeansBinning(n_bins=50, n_seeds=5))
    cells = KMeansBinning(n_bins=100).fit(calibration_members)      # fixed cells, reused:
    eece(test_members, test_labels, binning=cells)

K-means: what runs and why
--------------------------
The EECE bins points by their whole member vector ``v_n = (p_1, ..., p_H)``. Backends
(``backend=``): ``"torch"`` (``"auto"``) - ours; ``"sklearn"`` - :class:`sklearn.cluster.KMeans`
(``n_init=1``, k-means++); ``"minibatch"`` - :class:`~sklearn.cluster.MiniBatchKMeans`
(``batch_size >= 8192``, ``reassignment_ratio=0``: the default 0.01 moved the clusters of sparse
regions onto dense points, 5-10x worse inertia on the toy benchmark); ``"faiss"`` when
``faiss-cpu`` is installed (never by default). All share scikit-learn's conventions (the paper
used its defaults): greedy k-means++ seeding with ``2 + floor(ln B)`` candidates per step,
``max_iter=300``, ``tol=1e-4`` relative to the mean feature variance (or no label change),
empty clusters dropped, bins capped at the number of distinct rows, ties to the lower centroid.

**Why our torch Lloyd beats scikit-learn's on 1-2 threads.** Same algorithm and stopping rule;
the differences are in the arithmetic: the fit runs in float32 (distances between probability
vectors need no more to choose a cell; centroids and the final assignment are float64), squared
distances ``||x||^2 - 2 x.c + ||c||^2`` come from one ``addmm`` per cache-sized chunk of rows
written into a reused block (no page faults), and the row-wise argmin uses numpy's SIMD kernel.
scikit-learn's Lloyd runs float64 over the data in OpenMP-parallel chunks, built for many cores.
Measured on one thread (``python benchmarks/bench_eece.py --threads 1``, CPU time): at every fit
size tried (50,000 x 10 and 40,000 x 100 rows, 200 bins) our fit took 1/3 to 2/3 of
scikit-learn's CPU time with inertia within 1%; MiniBatchKMeans was not faster at 50,000 rows
and ~1% worse. Large ``N``: the fit uses a seeded subsample of ``subsample`` rows (default
50,000), then ``refine`` (2) Lloyd passes over every row, then every row is assigned in chunks
(at N = 10^6, H = 10, 200 bins the inertia was 3.6% above a full fit's; 6.7% without refining).

**The classwise path** (``multiclass="classwise"``, ``K`` partitions, one per class;
:mod:`~bensemble.metrics.binning._classes`): the classes run in chunks on single-threaded workers.
Each class is seeded on a sample, as scikit-learn's :class:`~sklearn.cluster.MiniBatchKMeans`
does with ``init_size`` (:mod:`~bensemble.metrics.binning._subsample_seed`): 4,096 rows drawn
from the class's own generator, stratified - the 3,072 rows farthest from the class mean (the
confident predictions that the optimal cells isolate: on the ImageNet-like classes at K = 1000
a uniform 4,096-row sample left the fitted inertia ~200x the exact fit's, a lightweight coreset
5-9x) at weight 1, and a uniform draw of 1,024 of the rest, each standing for its share - then
weighted greedy k-means++ and at most 30 weighted Lloyd steps on that sample (those for all
classes of a chunk at once, on sorted rows as below). The exact seeding on every row
(``O(B log B N H)``) cost as much CPU as the rest of the fit; on the sample it takes 10-20 ms
per class at 141-200 bins (one thread). Lloyd then runs for all classes of a
chunk at once on rows sorted by their projection on the diagonal
(:mod:`~bensemble.metrics.binning._sorted`): an ensemble's member vectors lie near the diagonal,
so a block of rows can only be nearest to the few centroids whose projection is close - a
window of typically 3-30 of them instead of all ``B`` - which is scored exactly (no
approximation: the argmin of the dense product, up to rounding-level ties), and the cluster sums
are updated from the rows that moved. Lloyd stops, per class, once a step lowers the inertia by
at most ``lloyd_rtol = 3e-4`` of it. The bins therefore differ from a loop of binary EECEs'
(another seeding), with the within-bin sum of squares close to it (on
``benchmarks/bench_eece_classwise.py``'s data mean -0.3% to +0.4%, worst class +2.4% to +6.6%,
where the exact fit's own reseeding gives up to +6.9%; bounded against the exact fit in
``tests/metrics/binning/test_coreset.py``); a class's bins do not depend on the other classes, the
chunking or the thread count, and ``bensemble evaluate``'s streamed fit gives the same centroids.
``lloyd_rtol=0`` is the exact fit: greedy k-means++ on every row and the dense Lloyd kernels,
bins bit-identical to the loop of binary EECEs on one thread. Classes with no more distinct
member vectors than bins take the closed form (every distinct vector its own centroid).
Measured against a loop of binary EECEs, both on one thread, CPU time
(``python benchmarks/bench_eece_classwise.py``; figures in ``benchmarks/results.md``).
"""

from bensemble.metrics.binning._fit import (
    BACKENDS,
    DEFAULT_LLOYD_RTOL,
    DEFAULT_REFINE,
    DEFAULT_SUBSAMPLE,
    assign_bins,
    fit_bins,
    kmeans_inertia,
)
from bensemble.metrics.binning.base import Binning
from bensemble.metrics.binning.fixed import ExplicitBinning, QuantileBinning, UniformBinning
from bensemble.metrics.binning.kmeans import KMeansBinning

__all__ = [
    "BACKENDS",
    "DEFAULT_LLOYD_RTOL",
    "DEFAULT_REFINE",
    "DEFAULT_SUBSAMPLE",
    "Binning",
    "ExplicitBinning",
    "KMeansBinning",
    "QuantileBinning",
    "UniformBinning",
    "assign_bins",
    "fit_bins",
    "kmeans_inertia",
]
