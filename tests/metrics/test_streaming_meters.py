"""Every streaming meter: one-shot == streaming == 4 merged shards (float64, <= 1e-12), state
round-trips, and merge refuses itself and incompatible settings."""

from __future__ import annotations

import copy

import pytest
import torch

from bensemble.metrics import (
    AccuracyMeter,
    BrierMeter,
    CalibrationErrorMeter,
    ClasswiseCalibrationErrorMeter,
    EECEMeter,
    NLLMeter,
    UncertaintyMeter,
    accuracy,
    brier_score,
    classwise_calibration_error,
    expected_calibration_error,
    expected_epistemic_calibration_error,
    fit_bins,
    negative_log_likelihood,
)
from bensemble.uncertainty import decompose_classification_uncertainty

N, K, H = 400, 4, 5


def _data(seed=0, n=N, k=K, h=H):
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(h, n, k, generator=g, dtype=torch.float64)
    members = torch.softmax(logits, -1)
    y = torch.randint(0, k, (n,), generator=g)
    return logits, members, y


def _centroids(members, n_bins=6, seed=0):
    return torch.stack([fit_bins(members[:, :, c].T, n_bins, seed=seed) for c in range(K)])


def _cases():
    """(id, meter factory, batch(idx) -> update args, one-shot value)."""
    logits, members, y = _data()
    probs = members.mean(0)
    z = logits[0]
    cents = _centroids(members)
    top_c = fit_bins(members.max(-1).values.T, 6, seed=1)
    bin_p, bin_y = members[:, :, 1], (y == 1).long()
    bin_c = fit_bins(bin_p.T, 6, seed=2)
    decomp = [float(t.mean()) for t in decompose_classification_uncertainty(members)]
    return [
        pytest.param(
            lambda: CalibrationErrorMeter(10),
            lambda i: (probs[i], y[i]),
            lambda m: m.compute(),
            expected_calibration_error(probs, y, 10),
            id="ece",
        ),
        pytest.param(
            lambda: CalibrationErrorMeter(10, "l2", from_logits=True),
            lambda i: (z[i], y[i]),
            lambda m: m.compute(),
            expected_calibration_error(z, y, 10, norm="l2", from_logits=True),
            id="rmsce-logits",
        ),
        pytest.param(
            lambda: ClasswiseCalibrationErrorMeter(K, 8),
            lambda i: (probs[i], y[i]),
            lambda m: m.compute(),
            classwise_calibration_error(probs, y, 8),
            id="classwise",
        ),
        pytest.param(
            lambda: ClasswiseCalibrationErrorMeter(K, 8, "max"),
            lambda i: (probs[i], y[i]),
            lambda m: m.compute(),
            classwise_calibration_error(probs, y, 8, norm="max"),
            id="classwise-max",
        ),
        pytest.param(
            NLLMeter,
            lambda i: (probs[i], y[i]),
            lambda m: m.compute(),
            negative_log_likelihood(probs, y),
            id="nll",
        ),
        pytest.param(
            lambda: NLLMeter(from_logits=True),
            lambda i: (z[i], y[i]),
            lambda m: m.compute(),
            negative_log_likelihood(z, y, from_logits=True),
            id="nll-logits",
        ),
        pytest.param(
            BrierMeter,
            lambda i: (probs[i], y[i]),
            lambda m: m.compute(),
            brier_score(probs, y),
            id="brier",
        ),
        pytest.param(
            AccuracyMeter,
            lambda i: (probs[i], y[i]),
            lambda m: m.compute(),
            accuracy(probs, y),
            id="accuracy",
        ),
        *[
            pytest.param(
                UncertaintyMeter,
                lambda i: (members[:, i],),
                lambda m, name=name: m.compute()[name],
                decomp[j],
                id=f"uncertainty-{name}",
            )
            for j, name in enumerate(("total", "aleatoric", "epistemic"))
        ],
        pytest.param(
            lambda: EECEMeter(cents),
            lambda i: (members[:, i], y[i]),
            lambda m: m.compute(),
            expected_epistemic_calibration_error(members, y, binning="kmeans_fit", centroids=cents),
            id="eece-classwise",
        ),
        pytest.param(
            lambda: EECEMeter(top_c, "top_label"),
            lambda i: (members[:, i], y[i]),
            lambda m: m.compute(),
            expected_epistemic_calibration_error(
                members, y, binning="kmeans_fit", centroids=top_c, multiclass="top_label"
            ),
            id="eece-top-label",
        ),
        pytest.param(
            lambda: EECEMeter(bin_c, binary=True),
            lambda i: (bin_p[:, i], bin_y[i]),
            lambda m: m.compute(),
            expected_epistemic_calibration_error(
                bin_p, bin_y, binning="kmeans_fit", centroids=bin_c, binary=True
            ),
            id="eece-binary",
        ),
    ]


def _shards(n_parts, seed=1):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(N, generator=g)
    cuts = sorted((torch.randperm(N - 1, generator=g)[: n_parts - 1] + 1).tolist())
    return [perm[a:b] for a, b in zip([0, *cuts], [*cuts, N], strict=True)]


@pytest.mark.parametrize(("make", "batch", "value", "expected"), _cases())
def test_streaming_and_four_merged_shards_equal_one_shot(make, batch, value, expected):
    whole = make().update(*batch(torch.arange(N)))
    assert value(whole) == pytest.approx(expected, abs=1e-12, rel=1e-10)
    streamed = make()
    for idx in _shards(7, seed=3):
        streamed.update(*batch(idx))
    assert value(streamed) == pytest.approx(expected, abs=1e-12, rel=1e-10)
    shards = [make().update(*batch(idx)) for idx in _shards(4)]
    merged = shards[0]
    for other in shards[1:]:
        merged.merge(other)
    assert value(merged) == pytest.approx(expected, abs=1e-12, rel=1e-10)
    assert merged.n_samples == N
    assert all(t.dtype == torch.float64 for t in merged.state.values())


@pytest.mark.parametrize(("make", "batch", "value", "expected"), _cases())
def test_state_dict_round_trip_and_merge_refusals(make, batch, value, expected):
    a = make().update(*batch(torch.arange(N // 2)))
    b = make().load_state_dict(a.state_dict())
    assert value(b) == value(a)
    b.update(*batch(torch.arange(N // 2, N)))
    assert value(b) == pytest.approx(expected, abs=1e-12, rel=1e-10)
    assert value(a) != value(b)  # the loaded state is a copy
    with pytest.raises(ValueError, match=r"merge: `other` must be another meter"):
        a.merge(a)
    with pytest.raises(ValueError, match=r"merge: `other` must be a "):
        a.merge(object())
    a.merge(copy.deepcopy(a))  # a deliberate copy is allowed
    assert a.n_samples == N
    with pytest.raises(ValueError, match="no data yet"):
        make().compute()
    with pytest.raises(ValueError, match="load_state_dict: `state_dict` must be a dict"):
        make().load_state_dict({"state": {}})


def test_incompatible_settings_refused():
    _, members, y = _data()
    cents = _centroids(members)
    with pytest.raises(ValueError, match="must have the same settings"):
        ClasswiseCalibrationErrorMeter(K, 8).merge(ClasswiseCalibrationErrorMeter(K, 9))
    with pytest.raises(ValueError, match="must have the same settings"):
        NLLMeter().merge(NLLMeter(eps=0.0))
    with pytest.raises(ValueError, match="must have the same settings"):
        EECEMeter(cents).merge(EECEMeter(cents + 0.01))
    with pytest.raises(ValueError, match="must use the same n_bins and norm"):
        CalibrationErrorMeter(10).merge(CalibrationErrorMeter(10, "max"))
    with pytest.raises(ValueError, match="same settings"):
        BrierMeter().load_state_dict(NLLMeter().state_dict())
    with pytest.raises(
        ValueError, match=r"`state_dict\['state'\]\['counts'\]` must be a float64 tensor"
    ):
        sd = ClasswiseCalibrationErrorMeter(K, 8).state_dict()
        sd["state"]["counts"] = torch.zeros(3)
        ClasswiseCalibrationErrorMeter(K, 8).load_state_dict(sd)


def test_bad_inputs_name_the_argument():
    _, members, y = _data()
    with pytest.raises(ValueError, match="ClasswiseCalibrationErrorMeter.update: `probs` must"):
        ClasswiseCalibrationErrorMeter(K).update(members.mean(0)[:, :3], y)
    with pytest.raises(ValueError, match="EECEMeter.update: `member_probs` must have 5 members"):
        EECEMeter(_centroids(members)).update(members[:3], y)
    with pytest.raises(ValueError, match="EECEMeter: `num_classes` must be given"):
        EECEMeter(torch.rand(4, H))
    with pytest.raises(ValueError, match="UncertaintyMeter.update: `member_probs` must be member"):
        UncertaintyMeter().update(members[0])
    with pytest.raises(ValueError, match="EECEMeter: `centroids` must be one"):
        EECEMeter(_centroids(members), "top_label")


def test_eece_meter_shared_and_ragged_centroids_match_one_shot():
    _, members, y = _data(5)
    shared = fit_bins(members[:, :, 0].T, 5, seed=0)
    ragged = [fit_bins(members[:, :, c].T, 3 + c, seed=0) for c in range(K)]
    for cents, kw in ((shared, {"num_classes": K}), (ragged, {})):
        meter = EECEMeter(cents, **kw)
        for idx in _shards(3):
            meter.update(members[:, idx], y[idx])
        expected = expected_epistemic_calibration_error(
            members, y, binning="kmeans_fit", centroids=cents
        )
        assert meter.compute() == pytest.approx(expected, abs=1e-12, rel=1e-10)


# ----------------------------------------------------------------------------- issue 19: sizes


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        pytest.param(
            lambda: ClasswiseCalibrationErrorMeter(2**40),
            r"ClasswiseCalibrationErrorMeter: `num_classes` must be <= 8388608 "
            r".*\(got 1099511627776\)",
            id="classwise-classes",  # was "`n_bins` must be <= -1"
        ),
        pytest.param(
            lambda: ClasswiseCalibrationErrorMeter(2**22, 15),
            r"`n_bins` must be <= 3 for 4194304 classes .*\(got 15\)",
            id="classwise-bins",
        ),
        pytest.param(
            lambda: EECEMeter(torch.rand(5, H, dtype=torch.float64), num_classes=2**40),
            r"EECEMeter: `num_classes` must be <= 1258291 for one shared set of 5 centroids",
            id="eece-shared-classes",
        ),
        pytest.param(
            lambda: EECEMeter([torch.zeros(2**22, 1)] + [torch.zeros(1, 1)] * 4),
            r"EECEMeter: `centroids` must make a state of at most 50331648 sums",
            id="eece-ragged-sets",  # the padded [5, 2**22, 1] copy is never allocated
        ),
    ],
)
def test_meter_sizes_are_bounded_before_allocation_with_the_true_limit(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()


def test_the_largest_sizes_accepted_are_the_ones_the_messages_state():
    # the checks themselves, at the edge (the states they admit there take ~400 MB)
    from bensemble.metrics._state import check_bin_slots
    from bensemble.metrics.streaming_epistemic import _check_state_size

    check_bin_slots(2**22, 3, "f")
    with pytest.raises(ValueError, match="<= 3 for"):
        check_bin_slots(2**22, 4, "f")
    check_bin_slots(2**23, 1, "f")
    with pytest.raises(ValueError, match="`num_classes` must be <= 8388608"):
        check_bin_slots(2**23 + 1, 1, "f")
    _check_state_size(1258291, 5, H, "f", "num_classes")
    with pytest.raises(ValueError, match="<= 1258291"):
        _check_state_size(1258292, 5, H, "f", "num_classes")


# ----------------------------------------------------------------------------- from_sample


@pytest.mark.parametrize("kind", ["classwise", "top_label", "binary"])
def test_eece_meter_from_sample_is_fit_bins_on_the_sample_and_seeded(kind):
    _, members, y = _data(7)
    sample = members[:, :200, 1] if kind == "binary" else members[:, :200]
    kw = {"binary": True} if kind == "binary" else {"multiclass": kind}
    meter = EECEMeter.from_sample(sample, 6, seed=5, **kw)
    if kind == "classwise":
        expected = torch.stack([fit_bins(sample[:, :, c].T, 6, seed=5) for c in range(K)])
    elif kind == "top_label":
        top = sample.mean(0).argmax(1)
        cols = sample.gather(2, top[None, :, None].expand(H, -1, 1)).squeeze(2)
        expected = fit_bins(cols.T, 6, seed=5)[None]
    else:
        expected = fit_bins(sample.T, 6, seed=5)[None]
    assert torch.equal(meter.centroids, expected)
    assert torch.equal(EECEMeter.from_sample(sample, 6, seed=5, **kw).centroids, expected)
    assert meter.n_samples == 0
    rest = members[:, 200:, 1] if kind == "binary" else members[:, 200:]
    labels = (y[200:] == 1).long() if kind == "binary" else y[200:]
    meter.update(rest, labels)
    one_shot = expected_epistemic_calibration_error(
        rest,
        labels,
        binning="kmeans_fit",
        centroids=expected[0] if kind != "classwise" else expected,
        **({"binary": True} if kind == "binary" else {"multiclass": kind}),
    )
    assert meter.compute() == pytest.approx(one_shot, rel=1e-10, abs=1e-12)


def test_eece_meter_from_sample_checks_its_arguments():
    _, members, _ = _data()
    with pytest.raises(ValueError, match=r"from_sample: `n_bins` must be 'auto' or an integer"):
        EECEMeter.from_sample(members[:, :20], 50)
    with pytest.raises(ValueError, match=r"from_sample: `member_probs` must be member"):
        EECEMeter.from_sample(members[0], 5)
    with pytest.raises(ValueError, match=r"from_sample: `multiclass` must be one of"):
        EECEMeter.from_sample(members, 5, multiclass="both")
    assert EECEMeter.from_sample(members, "auto").centroids.shape[1] <= 20  # sqrt(400)
    with pytest.raises(ValueError, match=r"EECEMeter: `centroids` must be fitted .*from_sample"):
        EECEMeter(None)
