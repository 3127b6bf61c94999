"""Split conformal classifier: the guide's worked example, exact ranks, edge cases, coverage."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from bensemble.conformal import (
    SplitConformalClassifier,
    class_conditional_quantiles,
    conformal_quantile,
    conformal_rank,
    coverage,
    lac_scores,
    mean_set_size,
    per_class_coverage,
)
from bensemble.conformal import scores as scores_module


def _reference_guide_threshold(cal_probs, cal_labels, alpha=0.1):
    """The practitioner's guide's ``conformal_threshold`` (numpy, np.sort)."""
    P = np.asarray(cal_probs, dtype=float)
    y = np.asarray(cal_labels)
    if P.ndim != 2 or len(P) == 0 or P.shape[1] < 2 or y.shape != (len(P),):
        raise ValueError("Expected probabilities (n,C) and labels (n,)")
    if (
        not 0 < alpha < 1
        or not np.isfinite(P).all()
        or np.any(P < 0)
        or not np.allclose(P.sum(1), 1)
    ):
        raise ValueError("Invalid probabilities or alpha")
    if not np.issubdtype(y.dtype, np.integer) or np.any((y < 0) | (y >= P.shape[1])):
        raise ValueError("Invalid class indices")
    scores = 1 - P[np.arange(len(y)), y]
    rank = int(np.ceil((len(scores) + 1) * (1 - alpha)))
    if rank > len(scores):
        return np.inf
    return np.sort(scores)[rank - 1]


def _reference_loop_class_thresholds(scores, labels, num_classes, alpha):
    """Per-class thresholds with a plain loop over classes and np.sort."""
    out = np.full(num_classes, np.inf)
    for c in range(num_classes):
        s = np.sort(scores[labels == c])
        k = math.ceil((len(s) + 1) * (1 - Fraction(repr(alpha))))
        if k <= len(s):
            out[c] = s[k - 1]
    return out


def _dirichlet_data(rng, n, k, concentration=0.6):
    probs = rng.dirichlet(np.ones(k) * concentration, size=n)
    labels = (probs.cumsum(1) < rng.random((n, 1))).sum(1).clip(max=k - 1)
    return probs, labels


# ------------------------------------------------------------------------ the guide's example
def test_guide_worked_example_reproduced_exactly():
    rng = np.random.default_rng(0)
    cal = rng.dirichlet(np.ones(5) * 0.6, size=2000)
    cal_y = np.array([rng.choice(5, p=p) for p in cal])
    test = rng.dirichlet(np.ones(5) * 0.6, size=2000)
    test_y = np.array([rng.choice(5, p=p) for p in test])

    cp = SplitConformalClassifier("lac", alpha=0.1).calibrate(cal, cal_y)
    sets = cp.predict_set(test)
    assert f"{cp.threshold_:.3f}" == "0.882"
    assert f"{coverage(sets, test_y):.3f}" == "0.894"
    assert f"{mean_set_size(sets):.2f}" == "2.64"
    assert cp.threshold_ == _reference_guide_threshold(cal, cal_y, alpha=0.1)
    guide_sets = [np.where(1 - p <= cp.threshold_)[0] for p in test]
    ours = cp.predict_set_indices(test)
    assert all(np.array_equal(a.numpy(), b) for a, b in zip(ours, guide_sets))


@pytest.mark.parametrize("alpha", [0.1, 0.05, 0.2, 0.01, 0.25])
@pytest.mark.parametrize("seed", range(4))
def test_threshold_matches_guide_reference_on_random_data(alpha, seed):
    rng = np.random.default_rng(seed)
    for n in rng.integers(1, 400, size=10):
        probs, labels = _dirichlet_data(rng, int(n), 4)
        probs = np.round(probs, 2)  # many tied scores
        probs[:, -1] = 1.0 - probs[:, :-1].sum(1)
        probs = np.clip(probs, 0, 1)
        probs /= probs.sum(1, keepdims=True)
        cp = SplitConformalClassifier("lac", alpha).calibrate(probs, labels)
        assert cp.threshold_ == _reference_guide_threshold(probs, labels, alpha)


# ------------------------------------------------------------------------ exact rank
@pytest.mark.parametrize("percent", [1, 5, 10, 20, 25, 30, 33, 50, 70, 90, 99])
def test_rank_is_exact_integer_arithmetic(percent):
    alpha = percent / 100
    n = np.arange(0, 3000)
    expected = -(-(n + 1) * (100 - percent) // 100)  # ceil in integers
    got = np.array([conformal_rank(int(m), alpha) for m in n])
    np.testing.assert_array_equal(got, expected)


def test_rank_n9_alpha01_is_9_not_10():
    assert conformal_rank(9, 0.1) == 9
    assert conformal_rank(5, 0.1) == 6
    assert conformal_rank(0, 0.5) == 1


def test_quantile_is_exact_order_statistic_with_ties():
    g = torch.Generator().manual_seed(0)
    s = torch.randint(0, 7, (1001,), generator=g).to(torch.float64) / 7
    for alpha in (0.1, 0.05, 0.5, 0.9):
        k = conformal_rank(1001, alpha)
        assert conformal_quantile(s, alpha) == float(torch.sort(s).values[k - 1])


# ------------------------------------------------------------------------ edge cases
def _probs_for_scores(scores):
    """Two-class probabilities whose LAC score for label 0 is ``scores``."""
    p0 = 1.0 - torch.as_tensor(scores, dtype=torch.float64)
    return torch.stack([p0, 1.0 - p0], dim=1), torch.zeros(len(scores), dtype=torch.int64)


def test_n9_alpha01_uses_the_maximum_score():
    scores = torch.tensor([0.15, 0.3, 0.05, 0.6, 0.45, 0.2, 0.35, 0.1, 0.55], dtype=torch.float64)
    probs, labels = _probs_for_scores(scores)
    cp = SplitConformalClassifier("lac", alpha=0.1).calibrate(probs, labels)
    assert cp.threshold_ == pytest.approx(0.6, abs=1e-15)
    assert cp.threshold_ == float((1.0 - probs[:, 0]).max())


def test_n5_alpha01_gives_infinite_threshold_and_full_sets():
    probs, labels = _probs_for_scores([0.1, 0.2, 0.3, 0.4, 0.5])
    with pytest.warns(UserWarning, match="n >= 1/alpha - 1 = 9"):
        cp = SplitConformalClassifier("lac", alpha=0.1).calibrate(probs, labels)
    assert cp.threshold_ == math.inf
    test = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    assert bool(cp.predict_set(test).all())
    # never clamped to the maximum calibration score (0.5), which would drop label 1 here
    assert cp.predict_set(test)[0, 1]


def test_ties_are_conservative():
    # every calibration score equals 0.3, so the threshold is 0.3 and a test score of exactly 0.3
    # must be kept (<=, not <)
    probs = torch.tensor([[0.7, 0.3]] * 20, dtype=torch.float64)
    cp = SplitConformalClassifier("lac", alpha=0.1).calibrate(probs, torch.zeros(20, dtype=int))
    assert cp.threshold_ == float(1.0 - probs[0, 0])
    mask = cp.predict_set(torch.tensor([[0.7, 0.3], [0.69, 0.31]], dtype=torch.float64))
    assert mask.tolist() == [[True, False], [False, False]]


def test_predict_set_indices_match_mask():
    rng = np.random.default_rng(3)
    probs, labels = _dirichlet_data(rng, 300, 6)
    cp = SplitConformalClassifier("aps", 0.2, generator=torch.Generator().manual_seed(1))
    cp.calibrate(probs[:150], labels[:150])
    mask = cp.predict_set(probs[150:])
    idx = cp.predict_set_indices(probs[150:])
    assert len(idx) == 150
    for row, ind in zip(mask, idx):
        torch.testing.assert_close(ind, torch.nonzero(row).squeeze(1))


def test_member_stack_is_scored_on_its_mean():
    rng = np.random.default_rng(4)
    members = np.stack([rng.dirichlet(np.ones(4), size=200) for _ in range(3)])
    labels = rng.integers(0, 4, size=200)
    a = SplitConformalClassifier("raps", 0.1, randomized=False).calibrate(members, labels)
    b = SplitConformalClassifier("raps", 0.1, randomized=False).calibrate(members.mean(0), labels)
    assert a.threshold_ == pytest.approx(b.threshold_, abs=1e-15)
    torch.testing.assert_close(a.predict_set(members), b.predict_set(members.mean(0)))


@pytest.mark.parametrize("score", ["lac", "aps", "raps"])
def test_chunked_prediction_equals_one_chunk(score, monkeypatch):
    rng = np.random.default_rng(5)
    probs, labels = _dirichlet_data(rng, 400, 7)
    probs = torch.as_tensor(probs, dtype=torch.float32)
    probs = probs / probs.sum(1, keepdim=True)

    def run():
        cp = SplitConformalClassifier(score, 0.1, generator=torch.Generator().manual_seed(0))
        cp.calibrate(probs[:200], labels[:200])
        return cp.threshold_, cp.predict_set(probs[200:])

    t1, m1 = run()
    monkeypatch.setattr(scores_module, "_CHUNK_ELEMENTS", 7 * 13)  # 13 rows per chunk
    t2, m2 = run()
    assert t1 == t2
    torch.testing.assert_close(m1, m2)


@pytest.mark.parametrize("score", ["aps", "raps"])
def test_one_predictor_gives_the_same_sets_on_every_call(score):
    # issue 20: two predict_set calls on the same rows differed in 112 of 450 rows
    rng = np.random.default_rng(8)
    probs, labels = _dirichlet_data(rng, 900, 10)
    cp = SplitConformalClassifier(score, 0.1).calibrate(probs[:450], labels[:450])
    first = cp.predict_set(probs[450:])
    assert torch.equal(first, cp.predict_set(probs[450:]))
    assert torch.equal(first, SplitConformalClassifier(score, 0.1).calibrate(
        probs[:450], labels[:450]).predict_set(probs[450:]))  # fmt: skip
    # a row's uniform follows its position in the batch (the predict stream, re-seeded per call)
    assert torch.equal(first[:100], cp.predict_set(probs[450:550]))
    # seed=None: each predictor draws its own seed once, then keeps it
    fresh = SplitConformalClassifier(score, 0.1, seed=None).calibrate(probs[:450], labels[:450])
    assert torch.equal(fresh.predict_set(probs[450:]), fresh.predict_set(probs[450:]))


def test_randomized_sets_follow_the_generator():
    rng = np.random.default_rng(6)
    probs, labels = _dirichlet_data(rng, 600, 5)

    def sets(seed):
        cp = SplitConformalClassifier("aps", 0.1, generator=torch.Generator().manual_seed(seed))
        return cp.calibrate(probs[:300], labels[:300]).predict_set(probs[300:])

    torch.testing.assert_close(sets(1), sets(1))
    assert not torch.equal(sets(1), sets(2))


# ------------------------------------------------------------------------ class-conditional
def test_class_conditional_thresholds_match_loop_reference():
    rng = np.random.default_rng(7)
    probs, labels = _dirichlet_data(rng, 500, 6)
    labels[labels == 5] = 4  # class 5 absent
    labels[:3] = 3
    labels[labels == 3] = 0
    labels[:3] = 3  # class 3 has 3 examples -> k = 4 > 3 -> inf
    for alpha in (0.1, 0.3):
        cp = SplitConformalClassifier("lac", alpha, class_conditional=True).calibrate(probs, labels)
        s = 1 - probs[np.arange(500), labels]
        ref = _reference_loop_class_thresholds(s, labels, 6, alpha)
        np.testing.assert_array_equal(cp.threshold_.numpy(), ref)
        assert math.isinf(ref[5])  # absent class
        assert math.isinf(ref[3]) == (alpha == 0.1)  # n_c = 3: k = 4 at 0.1, k = 3 at 0.3
        assert cp.class_counts_.tolist() == np.bincount(labels, minlength=6).tolist()
        direct = class_conditional_quantiles(torch.as_tensor(s), labels, 6, alpha)
        np.testing.assert_array_equal(direct.numpy(), ref)


def test_class_conditional_sets_use_each_class_threshold():
    probs = torch.tensor([[0.6, 0.4]] * 9 + [[0.3, 0.7]] * 9, dtype=torch.float64)
    labels = torch.tensor([0] * 9 + [1] * 9)
    cp = SplitConformalClassifier("lac", 0.1, class_conditional=True).calibrate(probs, labels)
    torch.testing.assert_close(cp.threshold_, torch.tensor([0.4, 0.3], dtype=torch.float64))
    mask = cp.predict_set(torch.tensor([[0.6, 0.4], [0.65, 0.35]], dtype=torch.float64))
    assert mask.tolist() == [[True, False], [True, False]]
    mask = cp.predict_set(torch.tensor([[0.3, 0.7]], dtype=torch.float64))
    assert mask.tolist() == [[False, True]]


# ------------------------------------------------------------------------ coverage guarantee
_CONFIGS = [
    pytest.param(dict(score="lac"), id="lac"),
    pytest.param(dict(score="aps", randomized=True), id="aps-randomized"),
    pytest.param(dict(score="aps", randomized=False), id="aps"),
    pytest.param(dict(score="raps", randomized=True, k_reg=1, lam=0.1), id="raps-randomized"),
    pytest.param(dict(score="raps", randomized=False, k_reg=2, lam=0.05), id="raps"),
]


@pytest.fixture(scope="module")
def splits():
    """200 exchangeable calibration/test splits (500 / 500, K = 5) from a miscalibrated model."""
    rng = np.random.default_rng(2024)
    n_splits, n, k = 200, 1000, 5
    probs = rng.dirichlet(np.ones(k) * 0.7, size=n_splits * n)
    # labels come from a sharper distribution than the model's probabilities (miscalibration)
    truth = probs**2.5 * np.array([1.0, 1.0, 1.5, 0.7, 1.2])
    truth /= truth.sum(1, keepdims=True)
    labels = (truth.cumsum(1) < rng.random((n_splits * n, 1))).sum(1).clip(max=k - 1)
    probs = torch.as_tensor(probs).reshape(n_splits, n, k)
    labels = torch.as_tensor(labels).reshape(n_splits, n)
    return probs, labels


def _coverages(splits, alpha, class_conditional=False, fixed_seed=False, **config):
    """Mean coverage over the splits; ``fixed_seed``: every split with the default seed 0 (the
    same uniforms at every split), else a fresh seed per split from one generator."""
    probs, labels = splits
    g = torch.Generator().manual_seed(0)
    marginal, per_class = [], []
    for p, y in zip(probs, labels):
        source = {} if fixed_seed else {"generator": g}
        cp = SplitConformalClassifier(
            alpha=alpha, class_conditional=class_conditional, **source, **config
        )
        sets = cp.calibrate(p[:500], y[:500]).predict_set(p[500:])
        marginal.append(coverage(sets, y[500:]))
        per_class.append(per_class_coverage(sets, y[500:]))
    return np.mean(marginal), torch.stack(per_class).nanmean(0)


@pytest.mark.parametrize("config", _CONFIGS)
def test_marginal_coverage_over_200_splits(splits, config):
    # E[coverage] >= 1 - alpha exactly; the mean of 200 splits has sd ~ 0.001 here, so 0.005
    # is a five-sigma margin
    alpha = 0.1
    mean_cov, _ = _coverages(splits, alpha, **config)
    assert mean_cov >= 1 - alpha - 0.005
    # continuous scores: coverage is also at most 1 - alpha + 1 / (n + 1) in expectation
    assert mean_cov <= 1 - alpha + 1 / 501 + 0.01


@pytest.mark.parametrize("config", [c for c in _CONFIGS if "randomized" in c.id])
def test_marginal_coverage_with_the_default_seed_at_every_split(splits, config):
    # the default seed reuses the same uniforms at every split: over the data alone the
    # randomised sets still cover at the nominal level (each position's uniform is one draw of
    # U(0, 1), independent of the data; calibration and prediction use independent streams)
    alpha = 0.1
    mean_cov, _ = _coverages(splits, alpha, fixed_seed=True, **config)
    assert 1 - alpha - 0.005 <= mean_cov <= 1 - alpha + 1 / 501 + 0.01


@pytest.mark.parametrize("config", _CONFIGS)
def test_class_conditional_coverage_over_200_splits(splits, config):
    alpha = 0.1
    marginal, per_class = _coverages(splits, alpha, class_conditional=True, **config)
    assert marginal >= 1 - alpha - 0.005
    # ~100 calibration examples per class: a mean of 200 splits has sd ~ 0.002-0.003
    assert bool((per_class >= 1 - alpha - 0.02).all()), per_class
    assert bool((per_class <= 1 - alpha + 0.03).all()), per_class


@pytest.mark.parametrize("class_conditional", [False, True], ids=["marginal", "mondrian"])
@pytest.mark.parametrize("config", [_CONFIGS[2], _CONFIGS[4]], ids=["aps", "raps"])
def test_non_randomized_sets_are_never_empty_over_200_splits(splits, config, class_conditional):
    probs, labels = splits
    for p, y in zip(probs, labels):
        cp = SplitConformalClassifier(alpha=0.1, class_conditional=class_conditional, **config)
        sets = cp.calibrate(p[:500], y[:500]).predict_set(p[500:])
        assert bool(sets.any(dim=1).all())


def test_marginal_lac_undercovers_some_class_where_mondrian_does_not(splits):
    # the same data show why class-conditional calibration exists
    _, per_class = _coverages(splits, 0.1, score="lac")
    assert float(per_class.min()) < 0.9 - 0.02


# ------------------------------------------------------------------------ validation
def _good():
    probs = torch.tensor([[0.7, 0.3], [0.4, 0.6], [0.5, 0.5]], dtype=torch.float64)
    return probs, torch.tensor([0, 1, 1])


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        pytest.param(dict(alpha=0.0), "alpha", id="alpha-0"),
        pytest.param(dict(alpha=1.0), "alpha", id="alpha-1"),
        pytest.param(dict(alpha=-0.1), "alpha", id="alpha-negative"),
        pytest.param(dict(alpha=float("nan")), "alpha", id="alpha-nan"),
        pytest.param(dict(alpha="0.1"), "alpha", id="alpha-string"),
        pytest.param(dict(score="thr"), "score", id="score-unknown"),
        pytest.param(dict(class_conditional=1), "class_conditional", id="mondrian-int"),
        pytest.param(dict(k_reg=-1), "k_reg", id="k_reg-negative"),
        pytest.param(dict(k_reg=1.5), "k_reg", id="k_reg-float"),
        pytest.param(dict(lam=-0.1), "lam", id="lam-negative"),
        pytest.param(dict(randomized="yes"), "randomized", id="randomized-str"),
        pytest.param(dict(generator=0), "generator", id="generator-int"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        SplitConformalClassifier(**kwargs)


@pytest.mark.parametrize(
    "probs, labels, arg",
    [
        pytest.param([[0.7, float("nan")], [0.4, 0.6]], [0, 1], "probs", id="nan"),
        pytest.param([[0.7, float("inf")], [0.4, 0.6]], [0, 1], "probs", id="inf"),
        pytest.param([[0.7, 0.7], [0.4, 0.6]], [0, 1], "probs", id="rows-not-summing"),
        pytest.param([[1.2, -0.2], [0.4, 0.6]], [0, 1], "probs", id="negative"),
        pytest.param([[1.0], [1.0]], [0, 0], "probs", id="one-class"),
        pytest.param([0.5, 0.5], [0], "probs", id="1-D"),
        pytest.param(np.zeros((0, 3)), np.zeros(0, dtype=int), "probs", id="empty"),
        pytest.param([[0.7, 0.3], [0.4, 0.6]], [0.0, 1.0], "labels", id="float-labels"),
        pytest.param([[0.7, 0.3], [0.4, 0.6]], [0, 2], "labels", id="label-out-of-range"),
        pytest.param([[0.7, 0.3], [0.4, 0.6]], [0, -1], "labels", id="label-negative"),
        pytest.param([[0.7, 0.3], [0.4, 0.6]], [0, 1, 1], "labels", id="label-length"),
        pytest.param([[0.7, 0.3], [0.4, 0.6]], [[0, 1]], "labels", id="label-2-D"),
    ],
)
def test_bad_calibration_inputs_raise(probs, labels, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        SplitConformalClassifier().calibrate(np.asarray(probs), np.asarray(labels))


def test_predict_before_calibrate_names_the_missing_step():
    with pytest.raises(ValueError, match=r"calibrate\(probs, labels\)"):
        SplitConformalClassifier().predict_set(_good()[0])
    with pytest.raises(ValueError, match="calibrate"):
        SplitConformalClassifier().predict_set_indices(_good()[0])


def test_predict_with_other_number_of_classes_raises():
    cp = SplitConformalClassifier().calibrate(*_good())
    with pytest.raises(ValueError, match="`probs`"):
        cp.predict_set(torch.full((2, 3), 1 / 3))


def test_functional_inputs_raise():
    with pytest.raises(ValueError, match="`scores`"):
        conformal_quantile(torch.tensor([0.1, float("nan")]), 0.1)
    with pytest.raises(ValueError, match="`alpha`"):
        conformal_quantile(torch.tensor([0.1, 0.2]), 1.5)
    with pytest.raises(ValueError, match="`n`"):
        conformal_rank(-1, 0.1)
    with pytest.raises(ValueError, match="`labels`"):
        class_conditional_quantiles(torch.tensor([0.1, 0.2]), torch.tensor([0, 3]), 3, 0.1)
    with pytest.raises(ValueError, match="`num_classes`"):
        class_conditional_quantiles(torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, 0.1)


def test_lac_scores_are_one_minus_p():
    p = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    torch.testing.assert_close(lac_scores(p), 1 - p)


# ------------------------------------------------------------------------ LAC fast path
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_lac_cutoff_gives_the_float64_score_sets(dtype):
    from bensemble.conformal.split import lac_cutoff

    g = torch.Generator().manual_seed(0)
    p = torch.rand(4000, generator=g, dtype=torch.float64).to(dtype)
    # thresholds that tie exactly with some scores, their neighbours, and random ones
    exact = (1.0 - p[:50].to(torch.float64)).tolist()
    near = [float(np.nextafter(q, 2.0)) for q in exact] + [
        float(np.nextafter(q, -1)) for q in exact
    ]
    random = torch.rand(50, generator=g, dtype=torch.float64).tolist()
    for q in exact + near + random + [0.0, 1.0, 1.5, math.inf]:
        got = p >= lac_cutoff(q, dtype, p.device)
        expected = (1.0 - p.to(torch.float64)) <= q
        assert torch.equal(got, expected), (dtype, q)
    qs = torch.tensor(exact[:10], dtype=torch.float64)
    per_class = p[:1000].reshape(100, 10)
    got = per_class >= lac_cutoff(qs, dtype, p.device)
    assert torch.equal(got, (1.0 - per_class.to(torch.float64)) <= qs)


@pytest.mark.parametrize("class_conditional", [False, True])
def test_lac_predict_set_equals_score_comparison(class_conditional):
    rng = np.random.default_rng(8)
    probs, labels = _dirichlet_data(rng, 2000, 10)
    p32 = torch.as_tensor(probs, dtype=torch.float32)
    cp = SplitConformalClassifier("lac", 0.1, class_conditional=class_conditional)
    cp.calibrate(p32[:1000], labels[:1000])
    expected = lac_scores(p32[1000:]) <= cp.threshold_
    assert torch.equal(cp.predict_set(p32[1000:]), expected)
    # the calibration examples at the threshold are in their own sets (ties conservative)
    assert coverage(cp.predict_set(p32[:1000]), labels[:1000]) >= 0.9


def test_quantile_beyond_torch_quantile_limit():
    # torch.quantile refuses inputs over 2**24 elements (and spends seconds before saying so);
    # exact selection has no such limit
    n = 2**24 + 3
    s = torch.arange(n, dtype=torch.float64).flip(0)
    k = conformal_rank(n, 0.1)
    assert conformal_quantile(s, 0.1) == float(k - 1)


def _reference_stepwise_lac_cutoff(q: float, dtype: torch.dtype) -> torch.Tensor:
    """The smallest ``c`` with ``float64(1 - c) <= q``, one ulp at a time (slow but plain)."""
    qt = torch.tensor(q, dtype=torch.float64)
    c = (1.0 - qt).to(dtype).clamp(min=0.0)
    while (1.0 - c.double()) > qt:
        c = torch.nextafter(c, torch.tensor(math.inf, dtype=dtype))
    while True:
        lower = torch.nextafter(c, torch.tensor(-math.inf, dtype=dtype))
        if lower < 0 or (1.0 - lower.double()) > qt:
            return c
        c = lower


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_lac_cutoff_matches_the_stepwise_definition(dtype):
    from bensemble.conformal.split import lac_cutoff

    g = torch.Generator().manual_seed(0)
    qs = torch.rand(40, generator=g, dtype=torch.float64).tolist() + [0.0, 0.5, 1.0, 1.5]
    for q in qs:
        got = lac_cutoff(q, dtype, "cpu")
        assert got.dtype == dtype
        assert torch.equal(got, _reference_stepwise_lac_cutoff(q, dtype)), (q, dtype)
    assert lac_cutoff(math.inf, dtype, "cpu") == -math.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lac_cutoff_one_ulp_below_one_returns_at_once(dtype):
    """A threshold one ulp below 1 used to walk ~2**52 ulps down towards 0 (a hang)."""
    from bensemble.conformal.split import lac_cutoff

    q = torch.nextafter(
        torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    )
    c = lac_cutoff(q, dtype, "cpu")
    assert (1.0 - c.double()) <= q
    below = torch.nextafter(c, torch.tensor(-1.0, dtype=dtype))
    assert below < 0 or (1.0 - below.double()) > q
    # per-class thresholds as a tensor, mixed with ordinary values and inf
    qs = torch.stack(
        [q, torch.tensor(0.3, dtype=torch.float64), torch.tensor(math.inf, dtype=torch.float64)]
    )
    cs = lac_cutoff(qs, dtype, "cpu")
    assert cs[0] == c and cs[2] == -math.inf
