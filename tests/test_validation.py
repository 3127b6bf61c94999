"""The shared input checkers: conversions and the one message shape."""

import numpy as np
import pytest
import torch

from bensemble import _validation as v

FN = "some_metric"


def test_to_tensor_accepts_numpy_lists_and_tensors():
    arr = np.arange(6.0).reshape(2, 3)
    torch.testing.assert_close(v.to_tensor(arr, "x", FN), torch.from_numpy(arr))
    torch.testing.assert_close(
        v.to_tensor([[0.0, 1.0]], "x", FN), torch.tensor([[0.0, 1.0]]).double()
    )
    t = torch.ones(3, requires_grad=True)
    assert not v.to_tensor(t, "x", FN).requires_grad


@pytest.mark.parametrize(
    "value, pattern",
    [
        pytest.param("abc", "must be a torch tensor", id="string"),
        pytest.param([[1.0, 2.0], [3.0]], "rectangular", id="ragged"),
        pytest.param(np.array([object()]), "numeric", id="object-array"),
    ],
)
def test_to_tensor_rejects(value, pattern):
    with pytest.raises(ValueError, match=pattern):
        v.to_tensor(value, "x", FN)


def test_as_probs_returns_float64_and_checks_simplex():
    p = np.array([[0.2, 0.8], [0.5, 0.5]], dtype=np.float32)
    out = v.as_probs(p, "probs", FN)
    assert out.dtype == torch.float64 and out.shape == (2, 2)


@pytest.mark.parametrize(
    "value, pattern",
    [
        pytest.param(np.array([0.2, 0.8]), r"`probs` must be 2-D", id="rank"),
        pytest.param(np.zeros((0, 3)), "must not be empty", id="empty"),
        pytest.param(np.array([[np.nan, 1.0]]), "must be finite", id="nan"),
        pytest.param(np.array([[np.inf, 0.0]]), "must be finite", id="inf"),
        pytest.param(np.array([[-0.1, 1.1]]), r"in \[0, 1\].*from_logits", id="range"),
        pytest.param(np.array([[0.3, 0.3]]), "summing to 1.*from_logits=True", id="sum"),
        pytest.param(np.array([[1.0]]), "at least 2 classes", id="one-class"),
        pytest.param(np.array([[True, False]]), "real-valued", id="bool"),
    ],
)
def test_as_probs_rejects_with_named_argument(value, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        v.as_probs(value, "probs", FN)
    assert str(info.value).startswith(f"{FN}: `probs`")


def test_as_probs_from_logits_applies_softmax():
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    torch.testing.assert_close(
        v.as_probs(logits, "probs", FN, from_logits=True), logits.double().softmax(-1)
    )


def test_sum_tolerance_is_looser_for_half_precision():
    p = torch.tensor([[0.5, 0.503]], dtype=torch.float16)
    v.as_probs(p, "probs", FN)  # 3e-3 deviation accepted for float16
    with pytest.raises(ValueError, match="summing to 1"):
        v.as_probs(p.double(), "probs", FN)


@pytest.mark.parametrize(
    "value, kwargs, pattern",
    [
        pytest.param(np.array([0.0, 1.0]), {}, "integer dtype", id="float"),
        pytest.param(np.array([[0, 1]]), {}, "1-D", id="rank"),
        pytest.param(np.array([], dtype=int), {}, "not be empty", id="empty"),
        pytest.param(np.array([0, 1, 3]), {"num_classes": 3}, r"\[0, 2\].*\[0, 3\]", id="range"),
        pytest.param(np.array([-1, 1]), {"num_classes": 3}, "must lie in", id="negative"),
        pytest.param(np.array([0, 1]), {"n": 3}, "same length", id="length"),
    ],
)
def test_as_labels_rejects(value, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        v.as_labels(value, "labels", FN, **kwargs)
    assert "`labels`" in str(info.value)


def test_as_labels_accepts_int_and_bool():
    assert v.as_labels(np.array([0, 2], dtype=np.int32), "labels", FN, num_classes=3).dtype == (
        torch.int64
    )
    assert v.as_labels(torch.tensor([True, False]), "labels", FN).tolist() == [1, 0]


def test_as_binary_and_confidences():
    assert v.as_binary([True, False], "correct", FN).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="only 0 and 1"):
        v.as_binary([0.5, 1.0], "correct", FN)
    with pytest.raises(ValueError, match=r"`confidences` must lie in \[0, 1\]"):
        v.as_confidences([1.2], "confidences", FN)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10", None])
def test_check_n_bins(bad):
    with pytest.raises(ValueError, match="`n_bins` must be an integer >= 1"):
        v.check_n_bins(bad, FN)
    assert v.check_n_bins(np.int64(7), FN) == 7


def test_check_option_lists_valid_values():
    with pytest.raises(ValueError, match="'l1', 'l2', 'max'.*got 'l3'"):
        v.check_option("l3", "norm", ("l1", "l2", "max"), FN)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_check_positive(bad):
    with pytest.raises(ValueError, match="`temperature` must be a finite number > 0"):
        v.check_positive(bad, "temperature", FN)


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, float("nan")])
def test_check_probability_open(bad):
    with pytest.raises(ValueError, match=r"`alpha` must lie in \(0, 1\)"):
        v.check_probability(bad, "alpha", FN)


def test_check_same_length_names_all_arguments():
    with pytest.raises(ValueError, match="`probs` has 3, `labels` has 2"):
        v.check_same_length(FN, probs=torch.zeros(3, 2), labels=torch.zeros(2))


def test_member_probs_rank():
    with pytest.raises(ValueError, match="`member_probs` must be 3-D"):
        v.as_member_probs(np.full((4, 2), 0.5), fn=FN)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        v.as_binary_member_probs(np.full((4, 2), 1.5), fn=FN)


@pytest.mark.parametrize(
    "value, expected",
    [
        pytest.param(torch.zeros(2, dtype=torch.float64), torch.float64, id="float64"),
        pytest.param(torch.zeros(2, dtype=torch.float32), torch.float32, id="float32"),
        pytest.param(torch.zeros(2, dtype=torch.float16), torch.float32, id="float16"),
        pytest.param(torch.zeros(2, dtype=torch.bfloat16), torch.float32, id="bfloat16"),
        pytest.param(torch.zeros(2, dtype=torch.int64), torch.get_default_dtype(), id="int64"),
    ],
)
def test_output_dtype(value, expected):
    assert v.output_dtype(value) == expected


def test_check_bool():
    assert v.check_bool(np.bool_(True), "flag", FN) is True
    for bad in (1, 0, "True", None, 1.0):
        with pytest.raises(ValueError, match=f"{FN}: `flag` must be True or False"):
            v.check_bool(bad, "flag", FN)


def test_warn_user_points_at_the_caller_outside_the_package():
    with pytest.warns(UserWarning, match="hello") as record:
        v.warn_user("hello")
    assert record[0].filename == __file__


def test_check_generator_refuses_seeds_torch_cannot_hold():
    """torch.Generator.manual_seed overflows at 2**64: the checker must say so first."""
    from bensemble._validation import check_generator

    assert check_generator(None, 2**64 - 1, "f").initial_seed() == 2**64 - 1
    for bad in (2**64, -1, 1.5, True):
        with pytest.raises(ValueError, match="f: `seed` must be an integer in"):
            check_generator(None, bad, "f")
