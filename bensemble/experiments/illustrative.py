"""How the experiments score the paper's three illustrative methods (one explicit convention).

Centroids, Likelihood and EK-NN report a prediction ``h(x)`` and an epistemic uncertainty
``EU(x)``, not a second-order distribution. The paper turns them into members by "sampl[ing]
hypotheses from a normal distribution using the predicted epistemic uncertainty as the variance,
i.e. phi ~ N(h(x), sqrt(EU(x)))" (section 4; appendix B.1.1 repeats it: "using the predicted
epistemic uncertainty as variance") and does not say more. Two choices are left open:

* **trust** - the EU the EECE compares the members' squared error with: ``"reported"``, the
  method's own ``EU(x)`` (the sentence above: the reported EU *is* the variance of the
  distribution the hypotheses are drawn from), or ``"draws"``, the variance of the finite draws
  (the default of :func:`~bensemble.metrics.expected_epistemic_calibration_error`);
* **clip** - whether the draws are clipped to [0, 1]. The sentence writes an unclipped normal.

The default, :data:`DEFAULT_TRUST` = ``"reported"`` with :data:`DEFAULT_CLIP` = ``False``, is
the one that sentence states, and the same in every experiment (``bensemble reproduce EXPERIMENT
--trust reported|draws --clip/--no-clip``; :class:`Convention`); every table and figure that
scores an illustrative method names its convention in its caption, and the conventions tables
print all four. Unclipped, the two trusts differ only by sampling noise. Clipped draws (the earlier
``reproduce`` behaviour) have a variance below ``EU`` wherever ``h +- sqrt(EU)`` leaves [0, 1];
there the two trusts differ systematically.

Draws outside [0, 1] are not probabilities, so the library's metrics reject them;
:func:`draws_eece` is the EECE formula on real-valued draws (K-means bins of the draw vectors,
fitted as the EECE fits them), equal to the library's EECE wherever both apply (tested). The
TECE is conditioned on ``Psi = (h(x), EU(x))`` and computed exactly
(:func:`~bensemble.metrics.epistemic.illustrative_true_epistemic_calibration_error`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from bensemble._validation import as_confidences, as_labels, check_option, check_positive_int
from bensemble.methods._illustrative import gaussian_members
from bensemble.metrics import accuracy, assign_bins, calibration_error, fit_bins
from bensemble.metrics._binning import bin_sums
from bensemble.metrics.epistemic import illustrative_true_epistemic_calibration_error

__all__ = [
    "CONVENTIONS",
    "DEFAULT_CLIP",
    "DEFAULT_TRUST",
    "TRUST",
    "Convention",
    "convention_label",
    "draws_eece",
    "illustrative_scores",
]

#: The two trusts (see the module docstring).
TRUST = ("reported", "draws")
#: The paper's sentence: the reported EU is the variance of the (unclipped) normal.
DEFAULT_TRUST = "reported"
DEFAULT_CLIP = False
#: Equal-width bins of the ECE of the mean prediction (as ``_common.ECE_BINS``).
_ECE_BINS = 15


def convention_label(trust: str, clip: bool) -> str:
    """Short label of a convention, e.g. ``"trust=EU, unclipped"``."""
    return f"trust={'EU' if trust == 'reported' else 'Var(draws)'}, {'' if clip else 'un'}clipped"


@dataclass(frozen=True)
class Convention:
    """How an experiment scores the illustrative methods: ``trust`` and ``clip``.

    Built from the ``bensemble reproduce`` options with :meth:`from_extra` (checked before
    anything trains); :attr:`label` names it in table rows, :attr:`caption` in captions.
    """

    trust: str = DEFAULT_TRUST
    clip: bool = DEFAULT_CLIP

    def __post_init__(self) -> None:
        check_option(self.trust, "trust", TRUST, "Convention")
        _check_clip(self.clip, "Convention")

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any], fn: str) -> Convention:
        """``extra["trust"]`` / ``extra["clip"]`` (absent: the defaults), checked for ``fn``."""
        trust = extra.get("trust", DEFAULT_TRUST)
        check_option(trust, "trust", TRUST, fn)
        return cls(trust, _check_clip(extra.get("clip", DEFAULT_CLIP), fn))

    @property
    def label(self) -> str:
        """E.g. ``"trust=EU, unclipped"``."""
        return convention_label(self.trust, self.clip)

    @property
    def caption(self) -> str:
        """The convention in words, for table titles and figure captions."""
        draws = "clipped to [0, 1]" if self.clip else "unclipped"
        trust = "the reported EU" if self.trust == "reported" else "the variance of the draws"
        return f"illustrative methods: phi ~ N(h, sqrt(EU)) draws {draws}, trust = {trust}"


def _check_clip(clip: Any, fn: str) -> bool:
    if not isinstance(clip, bool):
        raise ValueError(f"{fn}: `clip` must be True or False (got {clip!r})")
    return clip


def draws_eece(
    draws: Any,
    labels: Any,
    trust_eu: Any,
    *,
    bins: Any = None,
    n_bins: int = 100,
    seed: int = 0,
    backend: str = "sklearn",
) -> float:
    """The EECE formula on real-valued draws ``[H, N]`` (they may leave [0, 1]).

    ``sum_m |B_m|/N |mean_h (acc_m - conf_hm)^2 - mean_{n in B_m} trust_n|`` with ``acc_m`` the
    fraction of positives in bin ``m`` and ``conf_hm`` member ``h``'s mean draw over it; bins
    are ``bins`` or K-means cells of the draw vectors (:func:`~bensemble.metrics.fit_bins`,
    ``min(n_bins, N)`` bins).
    """
    fn = "draws_eece"
    phi = torch.as_tensor(draws, dtype=torch.float64)
    if phi.ndim != 2:
        raise ValueError(f"{fn}: `draws` must be [H, N] (got shape {list(phi.shape)})")
    n = phi.shape[1]
    y = as_labels(labels, "labels", fn, n=n, num_classes=2).to(torch.float64)
    t = torch.as_tensor(trust_eu, dtype=torch.float64)
    if t.shape != (n,):
        raise ValueError(f"{fn}: `trust_eu` must have shape [{n}] (got {list(t.shape)})")
    if bins is None:
        centroids = fit_bins(
            phi.T, min(check_positive_int(n_bins, "n_bins", fn), n), seed=seed, backend=backend
        )
        ids = assign_bins(phi.T, centroids)
    else:
        ids = as_labels(bins, "bins", fn, n=n)
    _, dense = torch.unique(ids, return_inverse=True)
    m = int(dense.max()) + 1
    counts, pos, trust_sum = bin_sums(dense, m, y, t)
    acc = pos / counts
    # conf_h(I_m): member h's mean draw over the bin, [H, M]
    conf = torch.zeros(phi.shape[0], m, dtype=torch.float64).index_add_(1, dense, phi) / counts
    err = ((acc[None, :] - conf) ** 2).mean(dim=0)
    return float((counts * (err - trust_sum / counts).abs()).sum() / n)


def illustrative_scores(
    positive_probs: Any,
    eu: Any,
    labels: Any,
    *,
    eta: Any = None,
    trust: str = DEFAULT_TRUST,
    clip: bool = DEFAULT_CLIP,
    n_members: int = 100,
    n_bins: int = 100,
    seed: int = 0,
) -> dict[str, float]:
    """Accuracy, ECE, EECE (and exact TECE-Psi) of an illustrative method under one convention.

    Draws ``n_members`` members ``phi ~ N(h, sqrt(EU))`` (clipped or not; seeded by ``seed``),
    scores their mean prediction (accuracy at 1/2; ECE of the mean clamped to [0, 1], 15 bins)
    and their EECE with the chosen trust; with ``eta`` adds ``tece`` conditioned on
    ``(h, EU)`` and ``gap = |eece - tece|``.
    """
    fn = "illustrative_scores"
    check_option(trust, "trust", TRUST, fn)
    clip = _check_clip(clip, fn)
    h = as_confidences(positive_probs, "positive_probs", fn).to(torch.float64)
    e = torch.as_tensor(eu, dtype=torch.float64)
    y = as_labels(labels, "labels", fn, n=h.shape[0], num_classes=2)
    g = torch.Generator().manual_seed(seed)
    phi = gaussian_members(h, e, n_members, clip=clip, generator=g)[..., 1]
    reported = e if trust == "reported" else phi.var(dim=0, unbiased=False)
    mean = phi.mean(dim=0).clamp(0.0, 1.0)
    scores = {
        "accuracy": accuracy(torch.stack([1.0 - mean, mean], dim=1), y),
        "ece": calibration_error(mean, y, _ECE_BINS),
        "eece": draws_eece(phi, y, reported, n_bins=n_bins, seed=seed),
    }
    if eta is not None:
        scores["tece"] = illustrative_true_epistemic_calibration_error(
            h, e, eta, trust=trust, clip=clip
        )
        scores["gap"] = abs(scores["eece"] - scores["tece"])
    return scores


#: Every convention, the default first.
CONVENTIONS = tuple(
    [Convention()]
    + [
        Convention(t, c)
        for c in (False, True)
        for t in TRUST
        if (t, c) != (DEFAULT_TRUST, DEFAULT_CLIP)
    ]
)
