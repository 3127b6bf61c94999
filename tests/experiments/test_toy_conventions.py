"""The two scoring conventions of the illustrative methods, on hand-made cases."""

from __future__ import annotations

import pytest
import torch

from bensemble.experiments.illustrative import draws_eece, illustrative_scores
from bensemble.metrics import expected_epistemic_calibration_error


def test_draws_eece_by_hand():
    # two bins of two points, two members
    phi = torch.tensor([[0.2, 0.4, 0.9, 1.2], [0.4, 0.2, 0.7, 0.8]], dtype=torch.float64)
    y = torch.tensor([0, 1, 1, 1])
    bins = torch.tensor([0, 0, 1, 1])
    trust = torch.tensor([0.01, 0.03, 0.02, 0.02], dtype=torch.float64)
    # bin 0: acc 0.5, member means 0.3 and 0.3: (0.04 + 0.04) / 2 = 0.04, trust 0.02 -> 0.02
    # bin 1: acc 1.0, member means 1.05 and 0.75: (0.0025 + 0.0625) / 2 = 0.0325, trust 0.02
    assert draws_eece(phi, y, trust, bins=bins) == pytest.approx(0.5 * 0.02 + 0.5 * 0.0125)


def test_draws_eece_equals_the_library_eece_on_probabilities():
    g = torch.Generator().manual_seed(0)
    phi = torch.rand(6, 40, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (40,), generator=g)
    trust = torch.rand(40, generator=g, dtype=torch.float64) / 10
    bins = torch.randint(0, 5, (40,), generator=g)
    with pytest.warns(UserWarning, match="fewer than 10"):
        ref = expected_epistemic_calibration_error(phi, y, eu=trust, bins=bins, binary=True)
    assert draws_eece(phi, y, trust, bins=bins) == pytest.approx(ref, abs=1e-12)


def test_conventions_on_a_constant_method():
    """h = 0.5 and EU = 0.04 everywhere, eta = 0.5, balanced labels, one bin.

    TECE-Psi is exactly 0 unclipped under both trusts. The EECE compares each member's *bin
    average* with acc = 1/2: the average of 400 independent draws is within 0.01 * 5 of 1/2, so
    the squared error is below 0.0025 and the EECE is the trust (0.04) within 0.0025 (reported)
    or within that plus the sampling error of the variance (draws)."""
    n = 400
    h = torch.full((n,), 0.5, dtype=torch.float64)
    eu = torch.full((n,), 0.04, dtype=torch.float64)
    eta = torch.full((n,), 0.5, dtype=torch.float64)
    y = torch.tensor([0, 1] * (n // 2))
    kw = {"eta": eta, "n_members": 50, "n_bins": 1, "seed": 0}
    for trust in ("reported", "draws"):
        s = illustrative_scores(h, eu, y, trust=trust, clip=False, **kw)
        assert s["tece"] == pytest.approx(0.0, abs=1e-15)
        assert s["accuracy"] == pytest.approx(0.5, abs=0.1)
        var_sd = 0.04 * (2 / n) ** 0.5 * 5  # 5 sd of a variance estimate from n draws
        assert abs(s["eece"] - 0.04) < 0.0025 + (var_sd if trust == "draws" else 0.0)
    # with clipping and sd 0.6, the draws' variance is far below the reported 0.36
    eu = torch.full((n,), 0.36, dtype=torch.float64)
    rep = illustrative_scores(h, eu, y, trust="reported", clip=True, **kw)
    draws = illustrative_scores(h, eu, y, trust="draws", clip=True, **kw)
    assert draws["tece"] == pytest.approx(0.0, abs=1e-15)
    assert rep["tece"] > 0.1 and rep["eece"] - draws["eece"] > 0.1


def test_illustrative_scores_validates_the_convention():
    h, eu, y = [0.5, 0.5], [0.01, 0.01], [0, 1]
    with pytest.raises(ValueError, match="trust"):
        illustrative_scores(h, eu, y, trust="var", clip=False, n_members=2, n_bins=1, seed=0)
    with pytest.raises(ValueError, match="clip"):
        illustrative_scores(h, eu, y, trust="draws", clip=1, n_members=2, n_bins=1, seed=0)
