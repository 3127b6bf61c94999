"""OOD / misclassification ranking metrics against scikit-learn; uncertainty scores vs loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from bensemble.metrics import (
    aupr,
    auroc,
    detection_report,
    fpr_at_95_tpr,
    misclassification_report,
    ood_scores,
)
from bensemble.metrics.ood import OOD_SCORES, fpr_at_tpr


def _reference_sklearn_fpr_at_tpr(scores, is_positive, tpr=0.95):
    fpr, tpr_curve, _ = roc_curve(is_positive, scores, drop_intermediate=False)
    return float(fpr[tpr_curve >= tpr].min())


def _random_case(seed, n=500, levels=12):
    rng = np.random.default_rng(seed)
    is_positive = rng.random(n) < rng.uniform(0.05, 0.6)
    is_positive[:2] = [True, False]
    scores = np.round(rng.normal(is_positive * rng.uniform(0, 2), 1.0) * levels / 4) / levels
    return scores, is_positive


@pytest.mark.parametrize("seed", range(10))
def test_auroc_aupr_match_sklearn_with_ties(seed):
    scores, pos = _random_case(seed)
    assert len(np.unique(scores)) < len(scores) / 3  # many ties
    assert auroc(scores, pos) == pytest.approx(roc_auc_score(pos, scores), abs=1e-9)
    assert aupr(scores, pos) == pytest.approx(average_precision_score(pos, scores), abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_fpr_at_95_tpr_matches_roc_curve_reference(seed):
    scores, pos = _random_case(seed)
    ref = _reference_sklearn_fpr_at_tpr(scores, pos)
    assert fpr_at_95_tpr(scores, pos) == pytest.approx(ref, abs=1e-12)
    for tpr in (0.5, 0.8, 1.0):
        ref = _reference_sklearn_fpr_at_tpr(scores, pos, tpr)
        assert fpr_at_tpr(scores, pos, tpr) == pytest.approx(ref, abs=1e-12)


def test_continuous_scores_and_float32():
    rng = np.random.default_rng(11)
    pos = rng.random(2000) < 0.3
    scores = rng.normal(pos * 1.0, 1.0).astype(np.float32)
    assert auroc(torch.as_tensor(scores), torch.as_tensor(pos)) == pytest.approx(
        roc_auc_score(pos, scores), abs=1e-9
    )
    assert aupr(scores, pos.astype(int)) == pytest.approx(
        average_precision_score(pos, scores), abs=1e-9
    )


def test_extremes():
    pos = np.array([0, 0, 1, 1])
    assert auroc([0.1, 0.2, 0.3, 0.4], pos) == 1.0
    assert auroc([0.4, 0.3, 0.2, 0.1], pos) == 0.0
    assert auroc([0.5, 0.5, 0.5, 0.5], pos) == 0.5
    assert aupr([0.1, 0.2, 0.3, 0.4], pos) == 1.0
    assert fpr_at_95_tpr([0.1, 0.2, 0.3, 0.4], pos) == 0.0
    assert fpr_at_95_tpr([0.5, 0.5, 0.5, 0.5], pos) == 1.0


@given(st.integers(0, 10_000))
def test_invariant_to_sample_order(seed):
    scores, pos = _random_case(seed, n=60, levels=3)
    perm = np.random.default_rng(seed).permutation(len(scores))
    for fn in (auroc, aupr, fpr_at_95_tpr):
        assert fn(scores[perm], pos[perm]) == pytest.approx(fn(scores, pos), abs=1e-12)


def test_scalar_results_are_python_floats():
    scores, pos = _random_case(0)
    for fn in (auroc, aupr, fpr_at_95_tpr):
        assert type(fn(scores, pos)) is float


@pytest.mark.parametrize(
    "scores, is_positive, arg",
    [
        pytest.param([0.1, float("nan")], [0, 1], "scores", id="nan"),
        pytest.param([[0.1, 0.2]], [0, 1], "scores", id="2-D"),
        pytest.param([], [], "scores", id="empty"),
        pytest.param([0.1, 0.2], [0, 2], "is_positive", id="non-binary"),
        pytest.param([0.1, 0.2], [1, 1], "is_positive", id="no-negatives"),
        pytest.param([0.1, 0.2], [0, 0], "is_positive", id="no-positives"),
        pytest.param([0.1, 0.2], [0, 1, 1], "is_positive", id="length"),
    ],
)
@pytest.mark.parametrize("fn", [auroc, aupr, fpr_at_95_tpr], ids=lambda f: f.__name__)
def test_bad_inputs_raise(scores, is_positive, arg, fn):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        fn(np.asarray(scores, dtype=float), np.asarray(is_positive))


def test_bad_tpr_raises():
    with pytest.raises(ValueError, match="`tpr`"):
        fpr_at_tpr([0.1, 0.2], [0, 1], 0.0)
    with pytest.raises(ValueError, match="`tpr`"):
        fpr_at_tpr([0.1, 0.2], [0, 1], 1.5)


# ------------------------------------------------------------------------ uncertainty scores
def _reference_loop_uncertainty(member_probs):
    m, n, k = member_probs.shape
    out = {key: np.zeros(n) for key in OOD_SCORES}
    for i in range(n):
        mean = [sum(member_probs[j, i, c] for j in range(m)) / m for c in range(k)]
        total = -sum(p * math.log(p) for p in mean if p > 0)
        alea = sum(-sum(p * math.log(p) for p in member_probs[j, i] if p > 0) for j in range(m)) / m
        var = sum(
            sum((member_probs[j, i, c] - mean[c]) ** 2 for j in range(m)) / m for c in range(k)
        )
        out["total"][i], out["aleatoric"][i] = total, alea
        out["epistemic"][i], out["variance"][i] = total - alea, var
        out["one_minus_max_probability"][i] = 1 - max(mean)
    return out


def _members(seed, m=5, n=40, k=4, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, n, k, generator=g, dtype=torch.float64) * 2
    logits = logits + spread * torch.randn(m, n, k, generator=g, dtype=torch.float64)
    probs = torch.softmax(logits, -1)
    probs[0, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # exact zeros: 0 log 0 = 0
    return probs


def test_ood_scores_match_loop():
    probs = _members(0)
    ref = _reference_loop_uncertainty(probs.numpy())
    got = ood_scores(probs)
    assert set(got) == set(OOD_SCORES)
    for key in OOD_SCORES:
        torch.testing.assert_close(got[key], torch.as_tensor(ref[key]), atol=1e-12, rtol=0)
    assert bool((got["epistemic"] >= 0).all())


def test_single_member_has_no_epistemic_part():
    probs = _members(1, m=1)
    s3 = ood_scores(probs)
    assert float(s3["epistemic"].abs().max()) == 0.0 and float(s3["variance"].max()) == 0.0
    # one model's [N, K] probabilities are not member predictions: never guessed
    with pytest.raises(ValueError, match=r"probs\[None\]"):
        ood_scores(probs[0])


def test_detection_report_ranks_disagreeing_members_as_ood():
    p_in = _members(2, spread=0.1)
    p_out = _members(3, spread=3.0)
    report = detection_report(p_in, p_out)
    assert set(report) == set(OOD_SCORES)
    for values in report.values():
        assert set(values) == {"auroc", "aupr", "fpr95"}
        assert all(type(v) is float for v in values.values())
    assert report["epistemic"]["auroc"] > 0.9
    flags = np.r_[np.zeros(40), np.ones(40)]
    scores = torch.cat([ood_scores(p_in)["epistemic"], ood_scores(p_out)["epistemic"]])
    assert report["epistemic"]["auroc"] == pytest.approx(roc_auc_score(flags, scores), abs=1e-12)


def test_misclassification_report_uses_argmax_errors():
    probs = _members(4, n=200, spread=0.5)
    g = torch.Generator().manual_seed(0)
    labels = torch.multinomial(probs.mean(0), 1, generator=g).squeeze(1)
    report = misclassification_report(probs, labels)
    wrong = (probs.mean(0).argmax(-1) != labels).numpy()
    total = ood_scores(probs)["total"].numpy()
    assert report["total"]["auroc"] == pytest.approx(roc_auc_score(wrong, total), abs=1e-12)
    assert report["total"]["aupr"] == pytest.approx(
        average_precision_score(wrong, total), abs=1e-12
    )


def test_report_bad_inputs_raise():
    p = _members(5)
    with pytest.raises(ValueError, match="`member_probs_out`"):
        detection_report(p, p[:, :, :3] / p[:, :, :3].sum(-1, keepdim=True))
    with pytest.raises(ValueError, match="`member_probs_out`"):
        detection_report(p, p[:2])
    with pytest.raises(ValueError, match="`member_probs_in`"):
        detection_report(p * 2, p)
    with pytest.raises(ValueError, match="`labels`"):
        misclassification_report(p, p.mean(0).argmax(-1))  # no errors at all
    with pytest.raises(ValueError, match="`member_probs`"):
        ood_scores(p[0, 0])
