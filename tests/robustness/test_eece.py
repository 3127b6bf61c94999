"""Issue 11, EECE parts: class 8 (defaults, invariances, binning randomness), class 4 (bounded
allocations, validated arguments) and class 2 (the explicit ``binary=True`` shape mechanism)
for every public function of :mod:`bensemble.metrics.epistemic`."""

import inspect
import statistics
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bensemble.metrics import (
    binary_calibration_error,
    expected_epistemic_calibration_error,
    fit_bins,
    true_epistemic_calibration_error,
)

F64 = torch.float64
eece = expected_epistemic_calibration_error
tece = true_epistemic_calibration_error
BACKENDS = ("torch", "sklearn", "minibatch")


def _binary_members(h, n, seed, spread=0.5):
    """Coherent-ish binary members ``[H, N]`` around a latent frequency, and labels."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, generator=g, dtype=F64).clamp(0.02, 0.98)
    p = torch.sigmoid(torch.logit(base)[None] + spread * torch.randn(h, n, generator=g, dtype=F64))
    y = torch.bernoulli(base, generator=g).long()
    return p, y, base


def _class_members(h, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(h, n, k, generator=g, dtype=F64), dim=-1)
    y = torch.randint(0, k, (n,), generator=g)
    return p, y


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn(*args, **kwargs)


# ============================================================================ class 8: defaults


def test_auto_is_the_default_number_of_bins():
    from bensemble.metrics.binning import KMeansBinning

    assert inspect.signature(eece).parameters["binning"].default is None  # KMeansBinning()
    assert inspect.signature(KMeansBinning).parameters["n_bins"].default == "auto"
    p, y, _ = _binary_members(4, 2_500, seed=0)
    assert eece(p, y, binary=True, return_details=True).n_bins == 50


@pytest.mark.parametrize(
    "n, expected",
    [
        pytest.param(10, 1, id="N10"),
        pytest.param(50, 5, id="N50"),
        pytest.param(99, 9, id="N99"),
        pytest.param(100, 10, id="N100"),
        pytest.param(2_500, 50, id="N2500"),
        pytest.param(10_000, 100, id="N10k-paper"),
        pytest.param(40_000, 200, id="N40k"),
        pytest.param(10**6, 200, id="N1e6-capped"),
    ],
)
def test_auto_rule(n, expected):
    from bensemble.metrics.epistemic import auto_n_bins

    assert auto_n_bins(n) == expected


def test_auto_bins_are_fitted_and_reported():
    p, y, _ = _binary_members(4, 2_500, seed=0)
    d = eece(p, y, seed=0, binary=True, return_details=True)
    assert d.n_bins == 50  # sqrt(2500)
    assert d.n_bins_fitted == int((d.counts > 0).sum()) <= 50
    assert d.n_bins_fitted >= 45


def test_bins_fitted_is_capped_by_distinct_vectors():
    p = torch.tensor([[0.1, 0.1, 0.9, 0.9] * 30, [0.2, 0.2, 0.8, 0.8] * 30], dtype=F64)
    y = torch.tensor([0, 1, 1, 1] * 30)
    d = _quiet(eece, p, y, n_bins=12, seed=0, binary=True, return_details=True)
    assert (d.n_bins, d.n_bins_fitted) == (12, 2)


def test_warns_when_bins_hold_fewer_than_10_points():
    p, y, _ = _binary_members(3, 200, seed=1)
    with pytest.warns(UserWarning, match="fewer than 10 points"):
        eece(p, y, n_bins=40, seed=0, binary=True)
    with pytest.warns(UserWarning, match="fewer than 10 points"):
        eece(p, y, bins=torch.arange(200) % 50, binary=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        eece(p, y, seed=0, binary=True)  # auto: 14 bins, ~14 points each
        eece(p, y, n_bins=20, seed=0, binary=True)


# ============================================================================ class 8: member order


def _assert_member_order_invariant(p, y, perm, **kw):
    base = _quiet(eece, p, y, **kw)
    permuted = _quiet(eece, p[perm], y, **kw)
    assert permuted == base  # identical, not close


@pytest.mark.parametrize("backend", BACKENDS)
@settings(derandomize=True, max_examples=12, deadline=None)
@given(
    h=st.integers(2, 12),
    n=st.integers(40, 300),
    data_seed=st.integers(0, 10_000),
    perm_seed=st.integers(0, 10_000),
    n_bins=st.integers(2, 20),
)
def test_member_order_never_changes_the_eece(backend, h, n, data_seed, perm_seed, n_bins):
    p, y, _ = _binary_members(h, n, data_seed)
    perm = torch.randperm(h, generator=torch.Generator().manual_seed(perm_seed))
    _assert_member_order_invariant(p, y, perm, n_bins=n_bins, seed=3, backend=backend, binary=True)


@pytest.mark.parametrize("multiclass", ["classwise", "top_label"])
@pytest.mark.parametrize("backend", BACKENDS)
@settings(derandomize=True, max_examples=5, deadline=None)
@given(h=st.integers(2, 8), k=st.integers(3, 5), data_seed=st.integers(0, 10_000))
def test_member_order_never_changes_the_multiclass_eece(backend, multiclass, h, k, data_seed):
    p, y = _class_members(h, 150, k, data_seed)
    perm = torch.arange(h).flip(0)
    _assert_member_order_invariant(
        p, y, perm, n_bins=8, seed=1, backend=backend, multiclass=multiclass
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_member_order_regression_case(backend):
    """30 members, 3,000 points: the torch backend gave values 0.28% apart before."""
    p, y, _ = _binary_members(30, 3_000, seed=0)
    values = {
        eece(
            p[torch.randperm(30, generator=torch.Generator().manual_seed(s))],
            y,
            n_bins=50,
            seed=1,
            backend=backend,
            binary=True,
        )
        for s in range(4)
    }
    assert len(values) == 1


def test_member_order_with_fitted_centroids_and_custom_eu():
    p, y, _ = _binary_members(7, 600, seed=5)
    cents = fit_bins(p.T, 15, seed=0)
    eu = p.var(0)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    a = eece(p, y, binning="kmeans_fit", centroids=cents, eu=eu, binary=True)
    b = eece(p[perm], y, binning="kmeans_fit", centroids=cents[:, perm], eu=eu, binary=True)
    assert a == b


def test_member_order_never_changes_the_tece_or_the_ece():
    p, y, eta = _binary_members(17, 2_000, seed=6)
    perm = torch.randperm(17, generator=torch.Generator().manual_seed(0))
    assert tece(p[perm], eta, binary=True) == tece(p, eta, binary=True)
    assert tece(p[perm], eta, binary=True, condition_on="psi") == tece(
        p, eta, binary=True, condition_on="psi"
    )
    assert binary_calibration_error(p[perm], y, binary=True) == binary_calibration_error(
        p, y, binary=True
    )


# ============================================================================ class 8: seeds


def test_one_seed_is_the_plain_value():
    p, y, _ = _binary_members(5, 1_000, seed=7)
    d = eece(p, y, n_bins=20, seed=11, binary=True, return_details=True)
    assert d.seed_values == (d.value,) and d.seeds == (11,) and d.seed_sd is None


@pytest.mark.parametrize("backend", ["torch", "sklearn"])
def test_several_seeds_average_the_single_seed_values(backend):
    p, y, _ = _binary_members(5, 1_000, seed=7)
    kw = dict(n_bins=20, backend=backend, binary=True)
    d = eece(p, y, seed=11, n_seeds=4, return_details=True, **kw)
    singles = [eece(p, y, seed=s, **kw) for s in d.seeds]
    assert d.seeds == (11, 12, 13, 14)
    assert list(d.seed_values) == singles
    assert d.value == pytest.approx(statistics.fmean(singles), rel=1e-15)
    assert d.seed_sd == pytest.approx(statistics.stdev(singles), rel=1e-12)
    assert eece(p, y, seed=11, n_seeds=4, **kw) == d.value
    assert len(set(singles)) > 1  # the binning is random: the seeds do differ


def test_several_seeds_multiclass():
    p, y = _class_members(4, 400, 3, seed=8)
    d = eece(p, y, n_bins=10, seed=0, n_seeds=3, return_details=True)
    assert list(d.seed_values) == [eece(p, y, n_bins=10, seed=s) for s in range(3)]


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3", None])
def test_bad_n_seeds(bad):
    p, y, _ = _binary_members(3, 100, seed=9)
    with pytest.raises(ValueError, match="n_seeds"):
        eece(p, y, n_bins=5, seed=0, n_seeds=bad, binary=True)


def test_n_seeds_needs_random_binning():
    p, y, _ = _binary_members(3, 100, seed=9)
    with pytest.raises(ValueError, match="n_seeds"):
        eece(p, y, bins=torch.arange(100) % 5, n_seeds=3, binary=True)


# ============================================================================ class 4: allocations


def test_sparse_bin_ids_are_sized_by_the_distinct_ids():
    p, y, _ = _binary_members(3, 300, seed=10)
    dense = torch.arange(300) % 3
    sparse = torch.tensor([0, 17, 10**6])[dense]
    d = eece(p, y, bins=sparse, binary=True, return_details=True)
    assert d.counts.numel() == 3
    assert d.bin_ids.tolist() == [0, 17, 10**6]
    assert d.value == eece(p, y, bins=dense, binary=True)


def test_a_bin_id_of_1e9_allocates_nothing_large():
    p, y, _ = _binary_members(4, 500, seed=11)
    ids = torch.where(torch.arange(500) % 2 == 0, 0, 10**9)
    d = eece(p, y, bins=ids, binary=True, return_details=True)
    assert d.counts.tolist() == [250.0, 250.0]


def test_classwise_sparse_bins():
    p, y = _class_members(3, 200, 4, seed=12)
    ids = torch.tensor([5, 10**9])[torch.arange(200) % 2]
    d = eece(p, y, bins=ids, return_details=True)
    assert d.counts.shape == (4, 2)
    assert d.value == eece(p, y, bins=torch.arange(200) % 2)


@pytest.mark.parametrize(
    "bad",
    [2**40, 10**9, 301, 0, -3, 1.5, float("nan"), True, "many", None, [10]],
)
def test_bad_n_bins_is_a_value_error_before_any_allocation(bad):
    p, y, _ = _binary_members(3, 300, seed=13)
    with pytest.raises(ValueError, match="n_bins"):
        eece(p, y, n_bins=bad, seed=0, binary=True)


def test_n_bins_equal_to_n_is_allowed():
    p, y, _ = _binary_members(2, 30, seed=14)
    d = _quiet(eece, p, y, n_bins=30, seed=0, binary=True, return_details=True)
    assert d.n_bins == 30


@pytest.mark.parametrize(
    "kwargs, name",
    [
        pytest.param({"bins": [[0] * 50]}, "bins", id="bins-2d"),
        pytest.param({"bins": [0.5] * 50}, "bins", id="bins-float"),
        pytest.param({"bins": [-1] + [0] * 49}, "bins", id="bins-negative"),
        pytest.param({"bins": [0] * 49}, "bins", id="bins-short"),
        pytest.param(
            {"binning": "kmeans_fit", "centroids": [[float("nan")] * 3]},
            "centroids",
            id="centroids-nan",
        ),
        pytest.param(
            {"binning": "kmeans_fit", "centroids": [[0.5, 0.5]]}, "centroids", id="centroids-width"
        ),
        pytest.param(
            {"binning": "kmeans_fit", "centroids": np.zeros((0, 3))},
            "centroids",
            id="centroids-empty",
        ),
        pytest.param({"eu": [float("nan")] * 50}, "eu", id="eu-nan"),
        pytest.param({"eu": [-1.0] * 50}, "eu", id="eu-negative"),
        pytest.param({"eu": [0.1] * 49}, "eu", id="eu-short"),
        pytest.param({"subsample": 0}, "subsample", id="subsample-0"),
        pytest.param({"refine": -1}, "refine", id="refine-negative"),
        pytest.param({"max_iter": 0}, "max_iter", id="max_iter-0"),
        pytest.param({"tol": float("nan")}, "tol", id="tol-nan"),
        pytest.param({"batch_size": 10, "backend": "minibatch"}, "batch_size", id="batch-small"),
        pytest.param({"backend": "cuml"}, "backend", id="backend-unknown"),
        pytest.param({"seed": -1}, "seed", id="seed-negative"),
        pytest.param({"seed": 1.5}, "seed", id="seed-float"),
        pytest.param({"seed": 2**64}, "seed", id="seed-overflow"),
        pytest.param({"generator": 3}, "generator", id="generator-int"),
        pytest.param({"return_details": "yes"}, "return_details", id="return_details-str"),
        pytest.param({"binary": 1}, "binary", id="binary-int"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs, name):
    p, y, _ = _binary_members(3, 50, seed=15)
    kw = {"n_bins": 5, "binary": True, **kwargs}
    with pytest.raises(ValueError, match=f"`{name}`"):
        eece(p, y, **kw)


@pytest.mark.parametrize(
    "call, name",
    [
        pytest.param(lambda p, e: tece(p, e, eu=[-1.0] * 50, binary=True), "eu", id="eu"),
        pytest.param(lambda p, e: tece(p, e[:-1], binary=True), "eta", id="eta-short"),
        pytest.param(lambda p, e: tece(p, e + 2, binary=True), "eta", id="eta-range"),
        pytest.param(
            lambda p, e: tece(p, e, condition_on="y", binary=True),
            "condition_on",
            id="condition_on",
        ),
        pytest.param(
            lambda p, e: binary_calibration_error(p, (e > 0.5).long(), n_bins=2**40, binary=True),
            "n_bins",
            id="ece-bins",
        ),
    ],
)
def test_bad_tece_and_ece_arguments(call, name):
    p, _, eta = _binary_members(3, 50, seed=16)
    with pytest.raises(ValueError, match=f"`{name}`"):
        call(p, eta)


# ============================================================================ class 2: shapes


def test_a_single_models_probs_are_not_member_predictions():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(100, 2, generator=g, dtype=F64), -1)  # [N, K]
    y = torch.randint(0, 2, (100,), generator=g)
    with pytest.raises(ValueError, match=r"\[M, N, K\]") as err:
        eece(probs, y, n_bins=5, seed=0)
    assert "probs[None]" in str(err.value) and "binary=True" in str(err.value)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda p, y, e: eece(p, y, n_bins=5, seed=0), id="eece"),
        pytest.param(lambda p, y, e: tece(p, e), id="tece"),
        pytest.param(lambda p, y, e: binary_calibration_error(p, y), id="ece"),
    ],
)
def test_two_dimensional_members_need_binary_true(call):
    p, y, eta = _binary_members(3, 60, seed=17)
    with pytest.raises(ValueError, match="binary=True"):
        call(p, y, eta)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda p, y, e: eece(p, y, n_bins=5, seed=0, binary=True), id="eece"),
        pytest.param(lambda p, y, e: tece(p, e, binary=True), id="tece"),
        pytest.param(lambda p, y, e: binary_calibration_error(p, y, binary=True), id="ece"),
    ],
)
def test_binary_true_refuses_three_dimensional_members(call):
    p, y = _class_members(3, 60, 2, seed=18)
    with pytest.raises(ValueError, match="binary=True"):
        call(p, y, p[0, :, 1])


def test_binary_form_equals_the_two_class_form():
    p, y, eta = _binary_members(4, 400, seed=19)
    full = torch.stack([1 - p, p], dim=-1)  # [H, N, 2]
    ids = torch.arange(400) % 7
    assert eece(full, y, bins=ids) == pytest.approx(eece(p, y, bins=ids, binary=True), rel=1e-12)
    assert tece(full, eta) == tece(p, eta, binary=True)
    assert binary_calibration_error(full, y) == binary_calibration_error(p, y, binary=True)


def test_tece_and_ece_refuse_more_than_two_classes():
    p, y = _class_members(3, 60, 3, seed=20)
    with pytest.raises(ValueError, match="member_probs"):
        tece(p, p[0, :, 1])
    with pytest.raises(ValueError, match="member_probs"):
        binary_calibration_error(p, y)


@pytest.mark.parametrize("form", ["list", "numpy", "numpy32", "tensor"])
def test_same_data_same_answer_in_every_container(form):
    p, y, eta = _binary_members(3, 120, seed=21)
    p = p.to(torch.float32).to(F64)  # exactly representable in float32
    q, yq = _class_members(3, 120, 3, seed=22)
    q = q.to(torch.float32).to(F64)

    def conv(t):
        return {
            "list": t.tolist(),
            "numpy": t.numpy(),
            "numpy32": t.numpy().astype(np.float32),
            "tensor": t,
        }[form]

    assert eece(conv(p), y.tolist(), n_bins=6, seed=0, binary=True) == eece(
        p, y, n_bins=6, seed=0, binary=True
    )
    assert eece(conv(q), yq.numpy(), n_bins=6, seed=0) == eece(q, yq, n_bins=6, seed=0)
    assert tece(conv(p), eta, binary=True) == tece(p, eta, binary=True)
    assert binary_calibration_error(conv(p), y, binary=True) == binary_calibration_error(
        p, y, binary=True
    )


# ============================================================================ class 8: evaluate


def test_evaluate_reports_auto_bins_fitted_bins_and_the_seed_spread(tmp_path, capsys):
    from bensemble.app.evaluate import evaluate_predictions
    from bensemble.cli import main

    p, y = _class_members(4, 900, 3, seed=23)
    ev = evaluate_predictions(p, y, seed=0)
    assert ev.ensemble["eece_bins"] == 30  # auto at N = 900: sqrt(900)
    assert ev.ensemble["eece_bins_fitted"] == ev.eece_details.n_bins_fitted <= 30
    assert ev.ensemble["eece_sd"] is None and ev.ensemble["eece_seeds"] == 1
    ev3 = evaluate_predictions(p, y, seed=0, eece_seeds=3)
    assert ev3.ensemble["eece_sd"] == pytest.approx(statistics.stdev(ev3.eece_details.seed_values))
    assert ev3.ensemble["eece"] == pytest.approx(statistics.fmean(ev3.eece_details.seed_values))
    np.save(tmp_path / "p.npy", p.numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    argv = ["evaluate", str(tmp_path / "p.npy"), "--labels", str(tmp_path / "y.npy")]
    assert main([*argv, "--out", str(tmp_path / "r"), "--eece-seeds", "3"]) == 0
    out = capsys.readouterr().out
    assert "eece_sd" in out and "eece_bins_fitted" in out
    try:  # argparse usage errors exit 2 (by SystemExit or by the return value)
        status = main([*argv, "--out", str(tmp_path / "r2"), "--eece-bins", "many"])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    assert "--eece-bins" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda p: p.to_sparse(), id="sparse"),
        pytest.param(lambda p: torch.empty(p.shape, device="meta"), id="meta"),
    ],
)
def test_exotic_tensors_are_value_errors(make):
    p, y, eta = _binary_members(3, 50, seed=24)
    for call in (
        lambda: eece(make(p), y, n_bins=5, seed=0, binary=True),
        lambda: tece(make(p), eta, binary=True),
        lambda: binary_calibration_error(make(p), y, binary=True),
    ):
        with pytest.raises(ValueError, match="`member_probs`"):
            call()


def test_numpy_integers_are_integers():
    p, y, _ = _binary_members(3, 200, seed=25)
    assert binary_calibration_error(p, y, np.int64(7), binary=True) == binary_calibration_error(
        p, y, 7, binary=True
    )
    assert eece(p, y, np.int64(7), seed=np.int64(1), n_seeds=np.int64(2), binary=True) == eece(
        p, y, 7, seed=1, n_seeds=2, binary=True
    )
