"""Issue 11, class 2: shape ambiguity of member predictions.

The rule (``bensemble._validation.as_member_stack``): member predictions are ``[M, N, K]``. A 2-D
array is never guessed: it is the binary positive-class form ``[M, N]`` only with
``binary=True``, and otherwise a ``ValueError`` that explains the three readings. With
``binary=True`` a 3-D array is an error. A nested list, a numpy array and a tensor holding the
same data get the same answer, and ``[M, N]`` with ``binary=True`` equals ``[M, N, 2]``.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bensemble import _validation as V  # noqa: E402
from bensemble import metrics as M  # noqa: E402
from bensemble.metrics.ood import member_uncertainty  # noqa: E402
from bensemble.plots import (  # noqa: E402
    EpistemicReliabilityDisplay,
    RiskCoverageDisplay,
    plot_epistemic_reliability_diagram,
)
from bensemble.uncertainty import (  # noqa: E402
    decompose_classification_uncertainty,
    variance_decomposition,
)

F64 = torch.float64


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _p1(m=4, n=30, seed=0):
    return torch.rand(m, n, generator=torch.Generator().manual_seed(seed), dtype=F64) * 0.9 + 0.05


def _two_class(p1):
    return torch.stack([1 - p1, p1], dim=-1)


_LABELS = torch.randint(0, 2, (30,), generator=torch.Generator().manual_seed(1))

# fn(x, **kw) for every member-taking function; kw carries binary=True where needed.
MEMBER_TAKERS = [
    pytest.param(lambda x, **kw: decompose_classification_uncertainty(x, **kw), id="decompose"),
    pytest.param(lambda x, **kw: variance_decomposition(x, **kw), id="variance"),
    pytest.param(lambda x, **kw: M.ood_scores(x, **kw), id="ood_scores"),
    pytest.param(lambda x, **kw: M.detection_report(x, x, **kw), id="detection_report"),
    pytest.param(
        lambda x, **kw: M.misclassification_report(x, _LABELS, **kw), id="misclassification"
    ),
    pytest.param(lambda x, **kw: M.selective_confidence(x, **kw), id="selective_confidence"),
    pytest.param(
        lambda x, **kw: member_uncertainty(x, "member_uncertainty", **kw), id="member_uncertainty"
    ),
    pytest.param(
        lambda x, **kw: RiskCoverageDisplay.from_ensemble(x, _LABELS, **kw), id="RiskCoverage"
    ),
    pytest.param(
        lambda x, **kw: EpistemicReliabilityDisplay.from_member_probs(x, _LABELS, 3, seed=0, **kw),
        id="EpistemicDisplay",
    ),
    pytest.param(
        lambda x, **kw: plot_epistemic_reliability_diagram(x, _LABELS, 3, seed=0, **kw),
        id="plot_epistemic",
    ),
]


@pytest.mark.parametrize("call", MEMBER_TAKERS)
def test_single_model_probs_are_not_member_predictions(call):
    probs = _two_class(_p1(m=1, n=30)[0])  # one model's [N, K] probabilities
    with pytest.raises(ValueError) as info:
        call(probs)
    message = str(info.value)
    assert "[M, N, K]" in message and "binary=True" in message and "[None]" in message


@pytest.mark.parametrize("kind", ["list", "numpy", "tensor"])
@pytest.mark.parametrize("call", MEMBER_TAKERS)
def test_2d_is_an_error_whatever_the_container(call, kind):
    p1 = _p1()
    x = {"list": p1.tolist(), "numpy": p1.numpy(), "tensor": p1}[kind]
    with pytest.raises(ValueError, match="binary=True"):
        call(x)


@pytest.mark.parametrize("call", MEMBER_TAKERS)
def test_binary_true_with_3d_is_an_error(call):
    with pytest.raises(ValueError, match=r"binary=True.*\[M, N\]|\[M, N\].*binary=True"):
        call(_two_class(_p1()), binary=True)


def _flat(result):
    """Every tensor / float of a (nested) result, in a fixed order."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, float):
        return [torch.tensor(result, dtype=F64)]
    if isinstance(result, dict):
        return [t for key in sorted(result) for t in _flat(result[key])]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in _flat(item)]
    fields = ("coverage", "risk", "thresholds", "trust", "squared_error", "counts")
    return [getattr(result, f) for f in fields if hasattr(result, f)]


_NUMERIC = MEMBER_TAKERS[:8]  # the figure-only shells are checked through their Display


@pytest.mark.parametrize("call", _NUMERIC + MEMBER_TAKERS[8:9])
def test_binary_members_same_answer_as_list_numpy_tensor(call):
    p1 = _p1()
    answers = [_flat(call(x, binary=True)) for x in (p1.tolist(), p1.numpy(), p1)]
    for other in answers[1:]:
        for a, b in zip(answers[0], other):
            torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("call", _NUMERIC)
def test_member_stack_same_answer_as_list_numpy_tensor(call):
    p = _two_class(_p1())
    answers = [_flat(call(x)) for x in (p.tolist(), p.numpy(), p)]
    for other in answers[1:]:
        for a, b in zip(answers[0], other):
            torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(decompose_classification_uncertainty, id="decompose"),
        pytest.param(M.ood_scores, id="ood_scores"),
        pytest.param(lambda x, **kw: M.detection_report(x, x.flip(1), **kw), id="detection"),
        pytest.param(lambda x, **kw: M.misclassification_report(x, _LABELS, **kw), id="miscl"),
        pytest.param(M.selective_confidence, id="selective_confidence"),
    ],
)
def test_binary_form_equals_two_class_stack(call):
    p1 = _p1()
    for a, b in zip(_flat(call(p1, binary=True)), _flat(call(_two_class(p1)))):
        torch.testing.assert_close(a, b)


def test_variance_binary_form_is_the_positive_class_column():
    p1 = _p1()
    mean, eu = variance_decomposition(p1, binary=True)
    mean2, eu2 = variance_decomposition(_two_class(p1))
    torch.testing.assert_close(mean, mean2[:, 1])
    torch.testing.assert_close(eu, eu2[:, 1])


def test_epistemic_display_binary_matches_eece_details():
    p1 = _p1(m=5, n=60, seed=3)
    y = torch.randint(0, 2, (60,), generator=torch.Generator().manual_seed(2))
    display = EpistemicReliabilityDisplay.from_member_probs(p1, y, 4, seed=0, binary=True)
    details = M.expected_epistemic_calibration_error(
        p1, y, 4, seed=0, return_details=True, binary=True
    )
    torch.testing.assert_close(display.counts, details.counts)
    assert display.value == details.value


def test_binary_members_are_checked_as_probabilities():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        decompose_classification_uncertainty(_p1() + 1.0, binary=True)
    logits = torch.logit(_p1())
    for a, b in zip(
        decompose_classification_uncertainty(logits, binary=True, from_logits=True),
        decompose_classification_uncertainty(_p1(), binary=True),
    ):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("binary", ["yes", 1, None])
def test_binary_must_be_a_bool(binary):
    with pytest.raises(ValueError, match="`binary` must be True or False"):
        decompose_classification_uncertainty(_p1(), binary=binary)


# ----------------------------------------------------------------------------- the checker


def test_as_member_stack_message_explains_the_three_readings():
    with pytest.raises(ValueError) as info:
        V.as_member_stack(np.full((4, 3), 1 / 3), "member_probs", "fn")
    message = str(info.value)
    assert message.startswith("fn: `member_probs` must be")
    assert "(got shape (4, 3))" in message
    assert "probs[None]" in message and "binary=True" in message


def test_as_member_stack_forms():
    p1 = _p1()
    out = V.as_member_stack(p1.numpy(), "m", "fn", binary=True)
    assert out.shape == (4, 30) and out.dtype == F64
    stacked = V.as_member_stack(_two_class(p1).tolist(), "m", "fn")
    assert stacked.shape == (4, 30, 2) and stacked.dtype == F64
    for bad in (np.zeros(3), np.zeros((1, 2, 3, 4))):
        with pytest.raises(ValueError, match="`m` must be"):
            V.as_member_stack(bad, "m", "fn")
    with pytest.raises(ValueError, match="must not be empty"):
        V.as_member_stack(np.zeros((2, 0)), "m", "fn", binary=True)
