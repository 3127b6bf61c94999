r"""A smooth calibration curve: kernel regression of correctness on confidence (paper, fig. 1(c)).

Instead of binning, estimate :math:`P(\text{correct} \mid \text{conf} = t)` on a grid of ``t``
with a Nadaraya-Watson kernel estimate

.. math:: \hat r(t) = \frac{\sum_i K_t(c_i)\, y_i}{\sum_i K_t(c_i)}

where ``c_i`` are confidences, ``y_i`` 0/1 correctness and ``K_t`` a kernel attached to the grid
point ``t``. The paper draws one "using a Kernel Density Estimation (with a Beta Kernel and a
bandwidth of 0.2)" without the parametrisation; ours is stated here.

**Beta kernel** (``kernel="beta"``): ``K_t`` is the Beta density with *mean* ``t`` and
concentration ``nu``, i.e. ``Beta(t nu, (1 - t) nu)`` with

.. math:: \nu = \frac{1}{4 b^2} - 1, \qquad
          \operatorname{sd}(K_t) = \sqrt{\frac{t (1 - t)}{\nu + 1}} = 2 b \sqrt{t (1 - t)},

so the bandwidth ``b`` is the kernel's standard deviation at ``t = 1/2`` and the kernel narrows
toward 0 and 1 (it never leaves [0, 1]); ``b`` must lie in ``(0, 1/2)``. Because ``K_t`` has mean
exactly ``t``, confidences that are uniform on [0, 1] and perfectly calibrated give an unbiased
curve at every ``t``; for Beta(a, b0)-distributed confidences the expected curve is exactly
``(t nu + a - 1) / (nu + a + b0 - 2)``, so the smoothing bias is
``(a - 1 - t (a + b0 - 2)) / (nu + a + b0 - 2)`` (measured in the tests and the README).

**Gaussian kernel** (``kernel="gaussian"``): ``K_t(c) = exp(-(c - t)^2 / (2 b^2))``, truncated
to [0, 1] by the data (no boundary correction: biased within ~``2 b`` of 0 and 1).

Edge conventions: grid points must lie in the open interval (0, 1) (the Beta kernel degenerates at
0 and 1); confidences are clipped to ``[1e-12, 1 - 1e-12]`` before the log-density, so a
confidence of exactly 0 or 1 gets a finite weight. Near the edges (``t nu < 1`` or
``(1 - t) nu < 1``, i.e. ``t < 1/nu`` - below 0.19 at ``b = 0.2``) the Beta kernel is J-shaped and
the most extreme confidences dominate ``\hat r(t)``. Weights are computed in log space, shifted
by their maximum per grid point, so no grid point underflows; ``density`` is the kernel density
estimate of the confidences, ``mean_i K_t(c_i)`` (normalised kernels).

Memory: the ``[G, N]`` weights are built in chunks of samples (no Python loop over grid points),
merged with a running log-sum-exp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from bensemble._validation import as_binary, as_confidences, as_float_tensor, check_option

__all__ = ["SmoothCalibrationCurve", "smooth_calibration_curve"]

KERNELS = ("beta", "gaussian")
_EPS = 1e-12
_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class SmoothCalibrationCurve:
    """Result of :func:`smooth_calibration_curve` (float64 tensors ``[G]``).

    Attributes:
        grid: the confidences ``t`` at which the curve is evaluated.
        curve: ``\\hat r(t)``, the estimated accuracy at confidence ``t``.
        density: the kernel density estimate of the confidences at ``t``.
        bandwidth: ``b``.
        kernel: ``"beta"`` or ``"gaussian"``.
        concentration: ``nu`` of the Beta kernel (NaN for the Gaussian).
    """

    grid: torch.Tensor
    curve: torch.Tensor
    density: torch.Tensor
    bandwidth: float
    kernel: str
    concentration: float


def _log_kernel(c: torch.Tensor, t: torch.Tensor, kernel: str, b: float, nu: float) -> torch.Tensor:
    """``[G, n]`` log-densities of the normalised kernels ``K_t(c)``."""
    if kernel == "beta":
        a, bb = t * nu, (1.0 - t) * nu
        log_norm = torch.lgamma(a) + torch.lgamma(bb) - math.lgamma(nu)
        return (
            (a - 1.0)[:, None] * torch.log(c)[None, :]
            + (bb - 1.0)[:, None] * torch.log1p(-c)[None, :]
            - log_norm[:, None]
        )
    z = (c[None, :] - t[:, None]) / b
    return -0.5 * z * z - math.log(b * math.sqrt(2.0 * math.pi))


def smooth_calibration_curve(
    conf: Any,
    correct: Any,
    bandwidth: float = 0.2,
    kernel: str = "beta",
    grid: Any = None,
) -> SmoothCalibrationCurve:
    r"""Kernel-smoothed reliability curve :math:`\hat r(t) = \sum_i K_t(c_i) y_i / \sum_i K_t(c_i)`.

    See the module docstring for the kernels, the bandwidth's meaning and the edge conventions.

    Args:
        conf: ``[N]`` confidences in [0, 1] (e.g. the predicted probability of the predicted
            class, or P(y = 1) with ``correct`` = the labels).
        correct: ``[N]`` 0/1 outcomes (bool, int or float).
        bandwidth: ``b``; in ``(0, 1/2)`` for the Beta kernel, ``> 0`` for the Gaussian.
        kernel: ``"beta"`` (the paper's) or ``"gaussian"``.
        grid: ``[G]`` points in (0, 1); default ``linspace(0.01, 0.99, 99)``.

    Returns:
        A :class:`SmoothCalibrationCurve`.

    Example:
        >>> conf = torch.linspace(0.0, 1.0, 2001, dtype=torch.float64)
        >>> r = smooth_calibration_curve(conf, conf > 0.5, bandwidth=0.05, grid=[0.25, 0.75])
        >>> [round(float(v), 3) for v in r.curve]
        [0.0, 1.0]
    """
    fn = "smooth_calibration_curve"
    c = as_confidences(conf, "conf", fn)
    y = as_binary(correct, "correct", fn, n=c.shape[0]).to(c.device)
    kernel = check_option(kernel, "kernel", KERNELS, fn)
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)):
        raise ValueError(f"{fn}: `bandwidth` must be a number (got {bandwidth!r})")
    b = float(bandwidth)
    upper = 0.5 if kernel == "beta" else math.inf
    if not (0.0 < b < upper):
        raise ValueError(
            f"{fn}: `bandwidth` must lie in (0, {upper:g}) for the {kernel} kernel (got {b!r})"
        )
    if grid is None:
        t = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)
    else:
        t = as_float_tensor(grid, "grid", fn, ndim=1).to(torch.float64)
        if t.numel() == 0 or bool(((t <= 0.0) | (t >= 1.0)).any()):
            raise ValueError(f"{fn}: `grid` must be non-empty and lie in the open interval (0, 1)")
    t = t.to(c.device)
    nu = 1.0 / (4.0 * b * b) - 1.0 if kernel == "beta" else math.nan
    cc = c.clamp(_EPS, 1.0 - _EPS)
    g = t.shape[0]
    m = torch.full((g,), -math.inf, dtype=torch.float64, device=c.device)
    s0 = torch.zeros(g, dtype=torch.float64, device=c.device)
    s1 = torch.zeros_like(s0)
    step = max(1, _CHUNK_ELEMENTS // g)
    for start in range(0, cc.shape[0], step):  # chunks of samples, all grid points at once
        logk = _log_kernel(cc[start : start + step], t, kernel, b, nu)
        m_new = torch.maximum(m, logk.max(dim=1).values)
        scale = torch.exp(m - m_new)
        w = torch.exp(logk - m_new[:, None])
        s0 = s0 * scale + w.sum(dim=1)
        s1 = s1 * scale + w @ y[start : start + step]
        m = m_new
    curve = s1 / s0
    density = torch.exp(m + torch.log(s0) - math.log(c.shape[0]))
    return SmoothCalibrationCurve(
        grid=t, curve=curve, density=density, bandwidth=b, kernel=kernel, concentration=nu
    )
