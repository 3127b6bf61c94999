"""Issue 11 for conformal prediction: validated seeds (class 3) and never-empty sets (class 7).

Class 3: ``split_calibration`` takes an integer seed in ``[0, 2**64)``; floats, bools, negative
or huge numbers are a ``ValueError`` naming ``seed`` (``seed=1.7`` used to be truncated to 1).

Class 7: the non-randomised APS / RAPS score counts the mass ranked strictly above a label, so the
label at which the cumulative mass crosses the threshold is in the set and no set is ever empty
(Romano et al., 2020); the randomised score is kept. ``seed=`` sits beside ``generator=``; the
repr says "randomized"; a calibration set too small for ``alpha`` (``n < 1/alpha - 1``: threshold
``+inf``) is warned about.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bensemble.conformal import (
    SplitConformalClassifier,
    aps_scores,
    class_conditional_quantiles,
    conformal_quantile,
    coverage,
    empty_set_rate,
    raps_scores,
    split_calibration,
)


# ====================================================================== class 3: seeds
@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(1.7, id="float"),
        pytest.param(2.0, id="integral-float"),
        pytest.param(np.float64(3.0), id="numpy-float"),
        pytest.param(-1, id="negative"),
        pytest.param(True, id="bool"),
        pytest.param("3", id="string"),
        pytest.param(2**64, id="too-large"),
        pytest.param(torch.tensor(3), id="tensor"),
    ],
)
def test_split_calibration_refuses_non_integer_seeds(seed):
    with pytest.raises(ValueError, match="`seed`"):
        split_calibration(torch.arange(10) % 2, seed=seed)


def test_split_calibration_accepts_numpy_integer_seeds():
    a = split_calibration(torch.arange(10) % 2, seed=np.int64(4))
    b = split_calibration(torch.arange(10) % 2, seed=4)
    assert torch.equal(a.temperature, b.temperature)
    split_calibration(torch.arange(10) % 2, seed=2**64 - 1)


# ============================================================ class 7: never-empty sets
def _confident_case():
    """A well-calibrated model: labels drawn from its own probabilities, many confident rows."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4000, 10, generator=g, dtype=torch.float64) * 3
    probs = logits.softmax(-1)
    labels = torch.multinomial(probs, 1, generator=g).squeeze(1)
    return probs, labels


@pytest.mark.parametrize("score", ["aps", "raps"])
@pytest.mark.parametrize("class_conditional", [False, True], ids=["marginal", "mondrian"])
def test_non_randomized_sets_are_never_empty_on_a_calibrated_model(score, class_conditional):
    probs, labels = _confident_case()
    cp = SplitConformalClassifier(
        score, alpha=0.1, randomized=False, class_conditional=class_conditional
    )
    sets = cp.calibrate(probs[:2000], labels[:2000]).predict_set(probs[2000:])
    assert empty_set_rate(sets) == 0.0
    # the top label is always in the set
    top = probs[2000:].argmax(-1, keepdim=True)
    assert bool(sets.gather(1, top).all())
    assert coverage(sets, labels[2000:]) >= 0.9 - 0.02


def test_non_randomized_aps_includes_the_label_where_the_mass_crosses():
    cp = SplitConformalClassifier("aps", alpha=0.2, randomized=False)
    # calibration: 10 rows whose true label is the second one, after 0.5 of mass
    probs = torch.tensor([[0.5, 0.3, 0.2]] * 10, dtype=torch.float64)
    cp.calibrate(probs, torch.ones(10, dtype=torch.int64))
    assert cp.threshold_ == pytest.approx(0.5)  # the mass ranked strictly above the label
    sets = cp.predict_set(torch.tensor([[0.95, 0.03, 0.02], [0.4, 0.35, 0.25]]))
    # a confident row keeps its top label; the second row keeps labels until the mass passes 0.5
    assert sets.tolist() == [[True, False, False], [True, True, False]]


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(2, 8),
    seed=st.integers(0, 2**32 - 1),
    alpha=st.sampled_from([0.01, 0.05, 0.1, 0.2, 0.5]),
    score=st.sampled_from(["aps", "raps"]),
    class_conditional=st.booleans(),
    concentration=st.sampled_from([0.05, 0.3, 1.0, 5.0]),
)
def test_non_randomized_aps_never_returns_an_empty_set(
    n, k, seed, alpha, score, class_conditional, concentration
):
    rng = np.random.default_rng(seed)
    cal = rng.dirichlet(np.full(k, concentration), size=n)
    labels = rng.integers(0, k, size=n)
    test = rng.dirichlet(np.full(k, concentration), size=30)
    test[0] = np.eye(k)[0]  # one-hot rows: the most confident inputs there are
    cp = SplitConformalClassifier(
        score,
        alpha=alpha,
        randomized=False,
        class_conditional=class_conditional,
        k_reg=int(rng.integers(0, 3)),
        lam=float(rng.choice([0.0, 0.01, 0.5])),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # small n: infinite thresholds
        sets = cp.calibrate(cal, labels).predict_set(test)
    assert bool(sets.any(dim=1).all())


def test_non_randomized_scores_are_the_mass_ranked_strictly_above():
    p = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64)
    torch.testing.assert_close(
        aps_scores(p, randomized=False), torch.tensor([[0.8, 0.0, 0.5]], dtype=torch.float64)
    )
    torch.testing.assert_close(
        raps_scores(p, k_reg=1, lam=0.1, randomized=False),
        torch.tensor([[1.0, 0.0, 0.6]], dtype=torch.float64),
    )


# ---------------------------------------------------------------------- seed= beside generator=
def test_seed_gives_the_generator_sets():
    # a generator draws the predictor's integer seed once: the predictor then behaves exactly as
    # one built with that seed
    probs, labels = _confident_case()
    by_gen = SplitConformalClassifier("aps", 0.1, generator=torch.Generator().manual_seed(7))
    by_gen.calibrate(probs[:500], labels[:500])
    by_seed = SplitConformalClassifier("aps", 0.1, seed=by_gen.seed_)
    by_seed.calibrate(probs[:500], labels[:500])
    assert by_seed.threshold_ == by_gen.threshold_
    assert torch.equal(by_seed.predict_set(probs[500:900]), by_gen.predict_set(probs[500:900]))


def test_score_functions_take_seed():
    p = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]], dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    torch.testing.assert_close(aps_scores(p, seed=3), aps_scores(p, generator=g))
    g = torch.Generator().manual_seed(3)
    torch.testing.assert_close(raps_scores(p, seed=3), raps_scores(p, generator=g))


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: SplitConformalClassifier("aps", seed=1.5), id="cp-float"),
        pytest.param(lambda: SplitConformalClassifier("aps", seed=-1), id="cp-negative"),
        pytest.param(
            lambda: SplitConformalClassifier("aps", seed=1, generator=torch.Generator()),
            id="cp-both",
        ),
        pytest.param(lambda: aps_scores([[0.5, 0.5]], seed=True), id="aps-bool"),
        pytest.param(lambda: raps_scores([[0.5, 0.5]], seed=2**64), id="raps-huge"),
    ],
)
def test_bad_seeds_raise(call):
    with pytest.raises(ValueError, match="`seed`"):
        call()


def test_repr_says_randomized():
    assert "randomized" in repr(SplitConformalClassifier("aps"))
    assert "randomized" in repr(SplitConformalClassifier("raps", randomized=True))
    assert "randomized=False" in repr(SplitConformalClassifier("aps", randomized=False))
    assert "seed=4" in repr(SplitConformalClassifier("aps", seed=4))


# ---------------------------------------------------------- too-small calibration sets warn
def test_too_small_calibration_set_warns():
    probs = torch.full((5, 3), 1 / 3, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1])
    with pytest.warns(UserWarning, match=r"alpha.*\+inf|\+inf.*alpha"):
        cp = SplitConformalClassifier("lac", alpha=0.1).calibrate(probs, labels)
    assert cp.threshold_ == float("inf")
    with pytest.warns(UserWarning, match="alpha"):
        assert conformal_quantile(torch.arange(5.0), 0.1) == float("inf")


def test_too_small_class_warns_naming_the_classes():
    probs = torch.full((30, 3), 1 / 3, dtype=torch.float64)
    labels = torch.tensor([0] * 20 + [1] * 10)  # class 2 has none; class 1 has 10 >= 9
    with pytest.warns(UserWarning, match=r"\[2\]"):
        SplitConformalClassifier("lac", alpha=0.1, class_conditional=True).calibrate(probs, labels)
    with pytest.warns(UserWarning, match=r"\[2\]"):
        class_conditional_quantiles(torch.rand(30), labels, 3, 0.1)


def test_large_enough_calibration_set_does_not_warn():
    probs = torch.full((9, 3), 1 / 3, dtype=torch.float64)  # n = 9 = 1/alpha - 1: finite
    labels = torch.arange(9) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cp = SplitConformalClassifier("lac", alpha=0.1).calibrate(probs, labels)
    assert cp.threshold_ < float("inf")
