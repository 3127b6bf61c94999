"""The EECE with a binning object gives exactly what the deprecated keyword arguments gave.

Each case calls the old form (keywords, with its DeprecationWarning) and the new one (a binning
object) on the same data and seeds, and compares the value, every per-bin field and the point
bins bit for bit. (``benchmarks/compare_eece_before_after.py`` compares both against the
previous release's code.)
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from bensemble.metrics import expected_epistemic_calibration_error as eece
from bensemble.metrics import fit_bins
from bensemble.metrics.binning import ExplicitBinning, KMeansBinning, QuantileBinning

F64 = torch.float64


def _members(h, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(h, n, k, generator=g, dtype=F64)
    z += 2 * torch.randn(1, n, k, generator=g, dtype=F64)
    return torch.softmax(z, -1), torch.randint(k, (n,), generator=g)


P5, Y5 = _members(4, 300, 5, 0)
P2, Y2 = _members(5, 300, 2, 1)
PB = P2[:, :, 1]
EU = torch.rand(300, generator=torch.Generator().manual_seed(9), dtype=F64) * 0.01
IDS = torch.randint(0, 40, (300,), generator=torch.Generator().manual_seed(3)) * 3
CENTS = [fit_bins(P5[:, :150, c].T, 8, seed=2) for c in range(5)]
TOP = fit_bins(P5[:, :150, 0].T, 6, seed=4)


def _old(*args, **kwargs):
    with pytest.warns(DeprecationWarning, match="deprecated"):
        return eece(*args, **kwargs, return_details=True)


def _new(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        return eece(*args, **kwargs, return_details=True)


CASES = [
    pytest.param(
        lambda: _old(PB, Y2, n_bins=12, seed=0, binary=True),
        lambda: _new(PB, Y2, KMeansBinning(12, seed=0), binary=True),
        id="binary",
    ),
    pytest.param(
        lambda: _old(PB, Y2, seed=5, binary=True, eu=EU),
        lambda: _new(PB, Y2, KMeansBinning(seed=5), binary=True, eu=EU),
        id="binary-auto-eu",
    ),
    pytest.param(
        lambda: _old(P5, Y5, n_bins=10, multiclass="top_label", seed=3),
        lambda: _new(P5, Y5, KMeansBinning(10, seed=3), multiclass="top_label"),
        id="top-label",
    ),
    pytest.param(
        lambda: _old(P5, Y5, n_bins=15, seed=1),
        lambda: _new(P5, Y5, KMeansBinning(15, seed=1)),
        id="classwise",
    ),
    pytest.param(
        lambda: _old(P5, Y5, n_bins=15, seed=1, lloyd_rtol=0.0),
        lambda: _new(P5, Y5, KMeansBinning(15, seed=1, lloyd_rtol=0.0)),
        id="classwise-exact",
    ),
    pytest.param(
        lambda: _old(P5, Y5, n_bins=9, seed=2, n_seeds=3),
        lambda: _new(P5, Y5, KMeansBinning(9, seed=2, n_seeds=3)),
        id="seeds",
    ),
    pytest.param(
        lambda: _old(P5, Y5, n_bins=7, seed=0, subsample=120, refine=1, coreset=60),
        lambda: _new(P5, Y5, KMeansBinning(7, seed=0, subsample=120, refine=1, coreset=60)),
        id="subsample-coreset",
    ),
    pytest.param(
        # coreset and lloyd_rtol concerned only the classwise fits: ignored for top-label
        lambda: _old(P5, Y5, 8, multiclass="top_label", seed=0, coreset=60, lloyd_rtol=1e-2),
        lambda: _new(P5, Y5, KMeansBinning(8, seed=0), multiclass="top_label"),
        id="top-label-ignores-classwise-options",
    ),
    pytest.param(
        lambda: _old(P5[:, 150:], Y5[150:], binning="kmeans_fit", centroids=CENTS),
        lambda: _new(P5[:, 150:], Y5[150:], KMeansBinning.from_centroids(CENTS)),
        id="kmeans-fit",
    ),
    pytest.param(
        lambda: _old(
            P5[:, 150:], Y5[150:], binning="kmeans_fit", centroids=TOP, multiclass="top_label"
        ),
        lambda: _new(
            P5[:, 150:], Y5[150:], KMeansBinning.from_centroids(TOP, multiclass="top_label")
        ),
        id="kmeans-fit-top-label",
    ),
    pytest.param(
        lambda: _old(P5, Y5, bins=IDS),
        lambda: _new(P5, Y5, ExplicitBinning(IDS)),
        id="bins",
    ),
    pytest.param(
        lambda: _old(PB, Y2, n_bins=8, generator=torch.Generator().manual_seed(11), binary=True),
        lambda: _new(
            PB,
            Y2,
            KMeansBinning(8, seed=int(torch.randint(0, 2**62, (1,), generator=_gen(11)))),
            binary=True,
        ),
        id="generator",
    ),
    pytest.param(
        lambda: _old(PB, Y2, n_bins=8, seed=0, backend="sklearn", binary=True),
        lambda: _new(PB, Y2, KMeansBinning(8, seed=0, backend="sklearn"), binary=True),
        id="sklearn",
    ),
    pytest.param(
        lambda: _old(P5, Y5, 6, seed=0),  # the old positional n_bins
        lambda: _new(P5, Y5, KMeansBinning(6, seed=0)),
        id="positional-n-bins",
    ),
]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _same(a, b):
    assert a.value == b.value
    for name in ("counts", "acc", "mean_delta", "member_variance", "trust", "squared_error"):
        torch.testing.assert_close(
            getattr(a, name), getattr(b, name), rtol=0, atol=0, equal_nan=True
        )
    assert torch.equal(a.point_bins, b.point_bins)
    for name in ("binning", "backend", "backend_settings", "seed", "n_bins", "n_bins_fitted"):
        assert getattr(a, name) == getattr(b, name), name
    assert (a.seeds, a.seed_values, a.seed_sd) == (b.seeds, b.seed_values, b.seed_sd)


@pytest.mark.parametrize("old, new", CASES)
def test_old_and_new_call_forms_agree_bit_for_bit(old, new):
    _same(old(), new())


def test_old_calls_default_to_seed_zero_and_seed_none_draws_from_the_global_generator():
    """The library's seed rule (bensemble._seeds) for old calls too: without seed or generator
    the seed is 0, as in the new form; ``seed=None`` draws it from torch's global RNG (the old
    default: identical draws for identical global states); a generator wins over the default."""
    assert _old(PB, Y2, n_bins=8, binary=True).seed == 0 == _new(PB, Y2, binary=True).seed
    _same(_old(PB, Y2, n_bins=8, binary=True), _old(PB, Y2, n_bins=8, binary=True, seed=0))
    torch.manual_seed(0)
    expected = int(torch.randint(0, 2**62, (1,)))
    torch.manual_seed(0)
    assert _old(PB, Y2, n_bins=8, binary=True, seed=None).seed == expected
    drawn = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(4)))
    given = _old(PB, Y2, n_bins=8, binary=True, generator=torch.Generator().manual_seed(4))
    assert given.seed == drawn


def test_a_fitted_binning_reused_equals_the_old_kmeans_fit():
    cells = KMeansBinning(8, seed=2).fit(P5[:, :150])
    sets = cells.centroids_
    assert isinstance(sets, list) and len(sets) == 5
    for k, c in enumerate(sets):  # the fit is fit_bins per class, members in their given order
        assert torch.equal(c, CENTS[k]) or c.shape[1] == 4
    new = _new(P5[:, 150:], Y5[150:], cells)
    old = _old(P5[:, 150:], Y5[150:], binning="kmeans_fit", centroids=sets)
    _same(old, new)
    assert new.binning == "kmeans_fit" and new.seed is None


def test_no_deprecation_warning_for_the_new_forms_and_one_for_the_old():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        eece(PB, Y2, binary=True)
        eece(P5, Y5, QuantileBinning(5), multiclass="top_label")
    with pytest.warns(DeprecationWarning) as record:
        eece(PB, Y2, n_bins=5, seed=0, binary=True)
    assert len(record) == 1 and "n_bins, seed" in str(record[0].message)
    assert record[0].filename == __file__  # attributed to the caller


def test_at_most_twelve_parameters():
    assert len(inspect.signature(eece).parameters) <= 12
    assert len(inspect.signature(KMeansBinning).parameters) <= 12


def test_wrong_binning_and_unknown_keywords_name_what_is_valid():
    with pytest.raises(ValueError, match="`binning` must be a binning"):
        eece(P5, Y5, object())
    with (
        pytest.raises(ValueError, match="'kmeans', 'kmeans_fit'"),
        pytest.warns(DeprecationWarning),
    ):
        eece(P5, Y5, "quantile")
    with pytest.raises(ValueError, match="unexpected keyword argument.*'nbins'"):
        eece(P5, Y5, nbins=3)
    with pytest.raises(ValueError, match="pass `n_bins` once"):
        eece(P5, Y5, 4, n_bins=4)


def test_fitted_binning_must_match_the_predictions_and_mode():
    cells = KMeansBinning(5).fit(P5, multiclass="top_label")
    with pytest.raises(ValueError, match="like the ones the binning was fitted on"):
        eece(P5, Y5, cells, multiclass="classwise")
    with pytest.raises(ValueError, match="like the ones the binning was fitted on"):
        eece(P5[:3], Y5, cells)
    assert eece(P5, Y5, cells) == eece(P5, Y5, cells, multiclass="top_label")
    with pytest.raises(ValueError, match="n_seeds=1 when fitted"):
        eece(P5, Y5, KMeansBinning(5, n_seeds=2).fit(P5))


def test_the_eece_leaves_an_unfitted_binning_unfitted():
    binning = KMeansBinning(6)
    details = eece(P5, Y5, binning, return_details=True)
    assert not binning.fitted
    assert details.fitted_binning.fitted and details.fitted_binning.n_bins_ == 6
    assert torch.equal(details.fitted_binning.assign(P5), details.point_bins)
