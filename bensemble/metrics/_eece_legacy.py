"""The EECE's keyword arguments before binning objects (issue 23), mapped onto a binning.

``expected_epistemic_calibration_error(p, y, n_bins=..., seed=..., backend=..., ...)`` keeps
working for one release with a :class:`DeprecationWarning`, giving the numbers it gave before:
each old call builds the :class:`~bensemble.metrics.binning.KMeansBinning` (or
:class:`~bensemble.metrics.binning.ExplicitBinning`, or fixed cells) that reproduces it, with the
old rule that ``coreset`` and ``lloyd_rtol`` only concerned the classwise fits. One change: an
old call with neither ``seed`` nor ``generator`` now uses seed 0
(:data:`bensemble._seeds.DEFAULT_SEED`, the library's rule); ``seed=None`` draws a fresh seed
from torch's global generator, as the old default did. A positional third argument (the old
``n_bins``) counts as one of them.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import as_labels, check_option, check_positive, check_positive_int
from bensemble.metrics.binning import ExplicitBinning, KMeansBinning
from bensemble.metrics.binning._fit import DEFAULT_LLOYD_RTOL, resolve_seed
from bensemble.metrics.binning.kmeans import KMEANS_DEFAULTS

__all__ = ["LEGACY_KEYWORDS", "legacy_binning"]

#: The keyword arguments replaced by ``binning=`` (and their old defaults): the K-means options
#: of :class:`~bensemble.metrics.binning.KMeansBinning` (seed: the library's default 0, which a
#: ``generator`` overrides) and the classwise stopping rule spelt out.
LEGACY_KEYWORDS: dict[str, Any] = {
    **KMEANS_DEFAULTS,
    "seed": DEFAULT_SEED,
    "lloyd_rtol": DEFAULT_LLOYD_RTOL,
    "generator": None,
    "bins": None,
    "centroids": None,
}
_OLD_BINNINGS = ("kmeans", "kmeans_fit")


def is_legacy_binning(value: Any) -> bool:
    """An old positional ``n_bins`` or an old ``binning`` string in the ``binning`` slot."""
    if isinstance(value, str):
        return True  # an old option name (or a wrong one: its error lists the valid ones)
    return isinstance(value, (int, np.integer)) or isinstance(value, bool)


def legacy_binning(
    fn: str, binning: Any, given: dict[str, Any], classwise: bool, binary: bool, multiclass: str
):
    """The binning an old-style call describes, after one :class:`DeprecationWarning`.

    Args:
        fn: the calling function's name (for messages).
        binning: what came in the ``binning`` slot (an old ``n_bins`` or ``"kmeans"`` /
            ``"kmeans_fit"``, or ``None``).
        given: the old keyword arguments passed.
        classwise: the call scores classwise (``coreset`` / ``lloyd_rtol`` apply only then).
        binary: the call's ``binary`` flag; ``multiclass``: its multiclass option.
    """
    unknown = sorted(set(given) - set(LEGACY_KEYWORDS))
    if unknown:
        raise ValueError(
            f"{fn}: unexpected keyword argument(s) {', '.join(map(repr, unknown))} (valid: "
            "member_probs, labels, binning, eu, multiclass, return_details, binary; deprecated: "
            f"{', '.join(LEGACY_KEYWORDS)})"
        )
    options = {**LEGACY_KEYWORDS, **given}
    mode = "kmeans"
    if isinstance(binning, str) and binning != "auto":
        mode = binning
    elif binning is not None:
        if "n_bins" in given:
            raise ValueError(f"{fn}: pass `n_bins` once (got it positionally and by keyword)")
        options["n_bins"] = binning
    used = sorted(given)
    if binning is not None:
        used.append(f"binning={binning!r}" if mode != "kmeans" else "n_bins (positional)")
    warnings.warn(
        f"{fn}: the keyword arguments {', '.join(used)} are deprecated (removed in bensemble "
        "0.4); pass a binning object instead, e.g. binning=KMeansBinning(n_bins=..., seed=...) "
        "from bensemble.metrics.binning (ExplicitBinning(bins) for explicit bin ids, "
        "KMeansBinning.from_centroids(centroids) for fitted centroids)",
        DeprecationWarning,
        stacklevel=3,
    )
    check_option(mode, "binning", _OLD_BINNINGS, fn)
    n_seeds = options["n_seeds"]
    ok = isinstance(n_seeds, (int, np.integer)) and not isinstance(n_seeds, (bool, np.bool_))
    if not ok or int(n_seeds) < 1:
        raise ValueError(f"{fn}: `n_seeds` must be an integer >= 1 (got {n_seeds!r})")
    if options["coreset"] is not None:
        check_positive_int(options["coreset"], "coreset", fn)
    check_positive(options["lloyd_rtol"], "lloyd_rtol", fn, allow_zero=True)
    bins, centroids = options["bins"], options["centroids"]
    if bins is not None and centroids is not None:
        raise ValueError(f"{fn}: pass either `bins` or `centroids`, not both (got both)")
    if bins is None and mode == "kmeans_fit" and centroids is None:
        raise ValueError(f"{fn}: `centroids` must be given with binning='kmeans_fit' (got None)")
    if bins is None and mode == "kmeans" and centroids is not None:
        raise ValueError(
            f"{fn}: `centroids` must be None with binning='kmeans' "
            "(pass binning='kmeans_fit' to use fitted centroids)"
        )
    if int(n_seeds) > 1 and (bins is not None or mode == "kmeans_fit"):
        raise ValueError(
            f"{fn}: `n_seeds` must be 1 unless binning='kmeans' fits the bins (got {n_seeds} "
            "with explicit bins or centroids, which involve no randomness)"
        )
    kmeans = {
        key: options[key]
        for key in ("n_bins", "backend", "n_seeds", "subsample", "refine", "max_iter", "tol")
    }
    kmeans["batch_size"] = options["batch_size"]
    if classwise:
        kmeans.update(coreset=options["coreset"], lloyd_rtol=options["lloyd_rtol"])
    try:
        if bins is not None:
            as_labels(bins, "bins", fn)
            explicit = _renamed(fn, lambda: ExplicitBinning(bins), "bins", "bin_ids")
            explicit._argument = "bins"
            return explicit
        if mode == "kmeans_fit":
            cells = _renamed(
                fn,
                lambda: KMeansBinning.from_centroids(
                    centroids, multiclass=multiclass, binary=binary, **kmeans
                ),
            )
            cells._argument = "centroids"
            return cells
        seed = resolve_seed(options["generator"], options["seed"], fn)
        return _renamed(fn, lambda: KMeansBinning(**kmeans, seed=seed))
    except TypeError as error:  # pragma: no cover - defensive
        raise ValueError(f"{fn}: {error}") from None


def _renamed(fn: str, build, old: str | None = None, new: str | None = None):
    """Run ``build`` with the binning's validation messages attributed to ``fn``."""
    try:
        return build()
    except ValueError as error:
        message = str(error)
        head, _, rest = message.partition(": ")
        if head.split(".")[0] in ("KMeansBinning", "ExplicitBinning"):
            message = f"{fn}: {rest}"
        if new is not None:
            message = message.replace(f"`{new}`", f"`{old}`")
        raise ValueError(message) from None
