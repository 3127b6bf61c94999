"""Issue 11, class 3 (unvalidated state and public helpers of metrics / uncertainty / plots) and
class 4 on the metric side (absurd sizes are a ValueError before they reach the allocator)."""

from __future__ import annotations

import copy

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bensemble import _validation as V  # noqa: E402
from bensemble import metrics as M  # noqa: E402
from bensemble.metrics import CalibrationBins, CalibrationErrorMeter  # noqa: E402
from bensemble.plots import (  # noqa: E402
    EpistemicReliabilityDisplay,
    ReliabilityDisplay,
    RiskCoverageDisplay,
    plot_reliability_diagram,
    plot_toy_maps,
)
from bensemble.uncertainty import entropy  # noqa: E402

F64 = torch.float64


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _probs(n=20, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n, k, generator=g, dtype=F64), -1)


def _labels(n=20, k=3, seed=1):
    return torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- entropy()


@pytest.mark.parametrize(
    "value, pattern",
    [
        pytest.param(torch.tensor([[0.5, -0.5, 1.0]]), r"\[0, 1\]", id="negative"),
        pytest.param(torch.tensor([[1.5, -0.5]]), r"\[0, 1\]", id="above-one"),
        pytest.param(torch.tensor([[0.5, float("nan")]]), "finite", id="nan"),
        pytest.param(torch.tensor([[0.2, 0.2]]), "summing to 1", id="not-normalised"),
        pytest.param(torch.tensor(0.5), "at least 1-D", id="scalar"),
        pytest.param(torch.zeros(0, 3), "must not be empty", id="empty"),
        pytest.param("abc", "must be a torch tensor", id="string"),
        pytest.param(torch.tensor([[True, False]]), "real-valued", id="bool"),
    ],
)
def test_entropy_validates(value, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        entropy(value)
    assert str(info.value).startswith("entropy: `probs`")


def test_entropy_accepts_lists_numpy_tensors_and_any_rank():
    p = _probs()
    expected = -(p * p.log()).sum(-1)
    torch.testing.assert_close(entropy(p), expected)
    torch.testing.assert_close(entropy(p.numpy()), expected)
    torch.testing.assert_close(entropy(p.tolist()), expected)
    torch.testing.assert_close(entropy(p[None].expand(2, -1, -1)), expected[None].expand(2, -1))
    assert float(entropy([0.0, 1.0])) == 0.0


# ----------------------------------------------------------------------------- the meter


def test_meter_merge_with_itself_is_refused():
    meter = CalibrationErrorMeter().update(_probs(), _labels())
    with pytest.raises(ValueError, match="`other` must be another meter"):
        meter.merge(meter)
    assert meter.bins.total == 20  # unchanged


def test_meter_merge_copy_is_allowed():
    meter = CalibrationErrorMeter().update(_probs(), _labels())
    other = copy.deepcopy(meter)
    assert meter.merge(other).bins.total == 40


# Guards: these incompatibilities were already refused; pinned here with the new self-merge rule.
@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        pytest.param({"n_bins": 10}, "n_bins", id="n_bins"),
        pytest.param({"norm": "max"}, "norm", id="norm"),
        pytest.param({"num_classes": 4}, "classes", id="num_classes"),
    ],
)
def test_meter_merge_incompatible_settings_refused(kwargs, pattern):
    meter = CalibrationErrorMeter(num_classes=3).update(_probs(), _labels())
    other = CalibrationErrorMeter(**{"num_classes": 3, **kwargs})
    with pytest.raises(ValueError, match=pattern):
        meter.merge(other)


def test_meter_merge_refuses_a_declared_class_count_that_differs_from_seen():
    # `other` declares 4 classes but has seen no data; `self` has seen 3 classes undeclared.
    meter = CalibrationErrorMeter().update(_probs(), _labels())
    with pytest.raises(ValueError, match="classes"):
        meter.merge(CalibrationErrorMeter(num_classes=4))


def test_meter_to_bad_device_is_a_value_error():
    meter = CalibrationErrorMeter().update(_probs(), _labels())
    with pytest.raises(ValueError, match="`device`"):
        meter.to("nonsense-device")


# ----------------------------------------------------------------------------- state objects


@pytest.mark.parametrize(
    "fields, pattern",
    [
        pytest.param(
            (torch.linspace(0, 1, 4), torch.ones(2), torch.ones(2), torch.ones(2)),
            "`counts` must have",
            id="shape",
        ),
        pytest.param(
            (torch.linspace(0, 1, 3), -torch.ones(2), torch.zeros(2), torch.zeros(2)),
            "`counts` must",
            id="negative-count",
        ),
        pytest.param(
            (torch.linspace(0, 1, 3), torch.ones(2), torch.full((2,), float("nan")), torch.ones(2)),
            "finite",
            id="nan",
        ),
        pytest.param(
            (torch.linspace(0, 1, 3), torch.ones(2), torch.ones(2), torch.full((2,), 2.0)),
            "`sum_correct` must",
            id="correct-above-count",
        ),
        pytest.param(
            (torch.tensor([0.0, 0.7, 0.5]), torch.ones(2), torch.ones(2), torch.ones(2)),
            "`edges` must",
            id="unsorted-edges",
        ),
    ],
)
def test_calibration_bins_validate(fields, pattern):
    with pytest.raises(ValueError, match=pattern):
        CalibrationBins(*fields)


def test_display_constructors_validate_their_arrays():
    with pytest.raises(ValueError, match="`risk`"):
        RiskCoverageDisplay(torch.ones(3), torch.ones(2), torch.ones(3))
    with pytest.raises(ValueError, match="`bins`"):
        ReliabilityDisplay("bins", torch.ones(2), torch.ones(2))
    bins = M.binned_calibration_stats([0.2, 0.9], [0, 1], n_bins=2)
    with pytest.raises(ValueError, match="`lower`"):
        ReliabilityDisplay(bins, torch.ones(3), torch.ones(2))
    with pytest.raises(ValueError, match="`counts`"):
        EpistemicReliabilityDisplay(torch.ones(3), torch.ones(3), torch.ones(2))


@pytest.mark.parametrize(
    "call, pattern",
    [
        pytest.param(
            lambda: RiskCoverageDisplay(torch.ones(2), torch.ones(2), torch.ones(2), aurc="0.1"),
            "`aurc` must be a finite number",
            id="aurc",
        ),
        pytest.param(
            lambda: EpistemicReliabilityDisplay(
                torch.ones(2), torch.ones(2), torch.ones(2), value=float("nan")
            ),
            "`value` must be a finite number",
            id="value",
        ),
        pytest.param(
            lambda: ReliabilityDisplay(
                M.binned_calibration_stats([0.2, 0.9], [0, 1], n_bins=2),
                torch.zeros(2),
                torch.ones(2),
                confidence_level=1.5,
            ),
            "`confidence_level` must lie in",
            id="confidence_level",
        ),
    ],
)
def test_display_scalars_are_checked(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("class_index", [1.5, "1", True])
def test_epistemic_class_index_must_be_an_int(class_index):
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 80, 3, generator=g, dtype=F64), -1)
    y = torch.randint(0, 3, (80,), generator=g)
    details = M.expected_epistemic_calibration_error(p, y, 4, seed=0, return_details=True)
    with pytest.raises(ValueError, match="`class_index`"):
        EpistemicReliabilityDisplay.from_details(details, class_index=class_index)


@pytest.mark.parametrize("ncols", [0, -1, 1.5, "2"])
def test_plot_toy_maps_ncols_is_checked(ncols):
    grid = torch.cartesian_prod(torch.arange(3.0), torch.arange(3.0)).flip(1)
    with pytest.raises(ValueError, match="`ncols`"):
        plot_toy_maps(grid, {"a": torch.zeros(9)}, ncols=ncols)


def test_risk_coverage_from_ensemble_checks_the_labels_range():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(3, 10, 2, generator=g, dtype=F64), -1)
    with pytest.raises(ValueError, match=r"`labels` must lie in \[0, 1\]"):
        RiskCoverageDisplay.from_ensemble(p, torch.full((10,), 5))


# ----------------------------------------------------------------------------- class 4: sizes

HUGE = 2**40
ECE_FAMILY = [
    pytest.param(lambda n: M.expected_calibration_error(_probs(), _labels(), n), id="ece"),
    pytest.param(lambda n: M.maximum_calibration_error(_probs(), _labels(), n), id="mce"),
    pytest.param(lambda n: M.classwise_calibration_error(_probs(), _labels(), n), id="classwise"),
    pytest.param(lambda n: M.reliability_diagram(_probs(), _labels(), n), id="reliability"),
    pytest.param(lambda n: M.calibration_error([0.2, 0.9], [0, 1], n), id="calibration_error"),
    pytest.param(lambda n: M.binned_calibration_stats([0.2, 0.9], [0, 1], n), id="binned_stats"),
    pytest.param(lambda n: CalibrationErrorMeter(n_bins=n), id="meter"),
    pytest.param(
        lambda n: ReliabilityDisplay.from_confidences([0.2, 0.9], [0, 1], n_bins=n), id="display"
    ),
    pytest.param(lambda n: plot_reliability_diagram(_probs(), _labels(), n), id="plot"),
    pytest.param(
        lambda n: M.expected_calibration_error(_probs(), _labels(), n, binning="quantile"),
        id="ece-quantile",
    ),
]


@pytest.mark.parametrize("call", ECE_FAMILY)
def test_absurd_n_bins_is_a_value_error(call):
    with pytest.raises(ValueError, match=r"`n_bins` must be .*<= "):
        call(HUGE)


def test_n_bins_maximum_is_documented_and_accepted():
    assert V.MAX_N_BINS >= 10**5
    assert V.check_n_bins(V.MAX_N_BINS, "f") == V.MAX_N_BINS
    with pytest.raises(ValueError, match=str(V.MAX_N_BINS)):
        V.check_n_bins(V.MAX_N_BINS + 1, "f")


def test_classwise_bins_times_classes_is_bounded():
    # 2**20 classes x 2**20 bins would be 2**40 per-bin slots (8 TB of counts)
    k = 2**20
    probs = torch.zeros(1, k, dtype=torch.float32)
    probs[0, 0] = 1.0
    with pytest.raises(ValueError, match="`n_bins`.*classes"):
        M.classwise_calibration_error(probs, torch.tensor([0]), V.MAX_N_BINS)


@pytest.mark.parametrize(
    "call, pattern",
    [
        pytest.param(
            lambda: ReliabilityDisplay.from_confidences([0.2, 0.9], [0, 1]).plot(show_counts="no"),
            "`show_counts` must be True or False",
            id="show_counts",
        ),
        pytest.param(
            lambda: EpistemicReliabilityDisplay(torch.ones(2), torch.ones(2), torch.ones(2)).plot(
                max_marker_size=-5.0
            ),
            "`max_marker_size` must be a finite number > 0",
            id="max_marker_size",
        ),
        pytest.param(
            lambda: plot_toy_maps(
                torch.cartesian_prod(torch.arange(3.0), torch.arange(3.0)).flip(1),
                {"a": torch.zeros(9)},
                panel_size=0.0,
            ),
            "`panel_size` must be a finite number > 0",
            id="panel_size",
        ),
        pytest.param(
            lambda: plot_toy_maps(
                torch.cartesian_prod(torch.arange(3.0), torch.arange(3.0)).flip(1),
                {"a": torch.zeros(9)},
                shared_scale="yes",
            ),
            "`shared_scale` must be True or False",
            id="shared_scale",
        ),
    ],
)
def test_plot_options_are_checked(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
