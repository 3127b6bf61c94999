"""Vector and matrix scaling: affine maps of the logits fitted by L-BFGS on the convex NLL."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import (
    check_allocation,
    check_positive,
    check_positive_int,
)
from bensemble.calibration._api import ScalerAPI, numpy_view
from bensemble.calibration._inputs import fit_inputs, forward_input, state_tensor
from bensemble.calibration._lbfgs import CONVERGENCE_GTOL, minimise

__all__ = ["CONVERGENCE_GTOL", "MatrixScaling", "VectorScaling"]


class _AffineScaling(ScalerAPI, nn.Module):
    """Shared fit / forward for scalers that are affine in their parameters (convex NLL).

    Parameters are float32 module parameters that do not require gradients (the fit is the
    calibrator's own; ``requires_grad_(True)`` opts in to training them in an outer loop); the
    fit runs in float64 and stores its result rounded to float32 (``nll_`` is the NLL of the
    stored, rounded map).
    """

    _name = "_AffineScaling"

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = check_positive_int(num_classes, "num_classes", self._name, minimum=2)

    #: subclasses: the scale of the identity map, ``scale(K, dtype=, device=)`` (``torch.ones``
    #: for a per-class scale, ``torch.eye`` for a matrix); its shift is zeros ``[K]``
    _identity_scale: Callable[..., torch.Tensor]

    def _identity(self, dtype: torch.dtype, device: Any = None) -> list[torch.Tensor]:
        """The identity map's parameters ``[scale, shift]``."""
        k = self.num_classes
        scale = type(self)._identity_scale(k, dtype=dtype, device=device)
        return [scale, torch.zeros(k, dtype=dtype, device=device)]

    def _initial(self, device: torch.device) -> list[torch.Tensor]:
        """Where every fit starts: the identity map, in float64."""
        return self._identity(torch.float64, device)

    def _start_at_identity(self, *names: str) -> None:
        """Create the float32 parameters ``names`` at the identity map; they do not require
        gradients (fitted by ``fit``, not by an outer optimiser)."""
        for name, value in zip(names, self._identity(torch.float32), strict=True):
            setattr(self, name, nn.Parameter(value))
        self.requires_grad_(False)

    #: subclasses: how the scale acts on the logits, ``scaled(z, scale)`` (``z * a`` per class,
    #: ``z @ W^T`` for a matrix); the map is ``scaled(z, scale) + shift``
    _scaled: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def _map(self, z: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
        """The affine map ``scaled(z, scale) + shift`` of ``params = [scale, shift]``."""
        scale, shift = params
        return type(self)._scaled(z, scale) + shift

    def _penalty(self, params: list[torch.Tensor]) -> torch.Tensor | None:
        return None

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """Calibrated logits.

        Args:
            logits: ``[N, K]`` or member logits ``[M, N, K]`` with ``K = num_classes``.

        Returns:
            The mapped logits, same shape and floating dtype as ``logits``.
        """
        z, out_dtype = forward_input(logits, f"{self._name}.forward", self.num_classes)
        params = [p.to(device=z.device, dtype=z.dtype) for p in self.parameters()]
        finite = torch.stack([torch.isfinite(q.detach()).all() for q in params])
        if not bool(finite.all()):  # one host synchronisation for all parameters
            names = [n for (n, _), ok in zip(self.named_parameters(), finite.tolist()) if not ok]
            raise ValueError(
                f"{self._name}.forward: the parameters {names} must be finite (got NaN/inf "
                "values, e.g. from a diverged optimiser); refit or reload the scaler"
            )
        return self._map(z, params).to(out_dtype)

    def fit(self, logits: Any, labels: Any, max_iter: int = 100) -> _AffineScaling:
        """Minimise the validation NLL by L-BFGS (strong-Wolfe line search, float64).

        Every fit starts from the identity map, so refitting gives the same answer.

        Args:
            logits: Validation logits ``[N, num_classes]`` (tensor or array; not modified).
            labels: Integer labels ``[N]`` in ``[0, num_classes)``.
            max_iter: L-BFGS iteration budget.

        Returns:
            ``self``, with ``converged_`` (final max-abs gradient <= ``CONVERGENCE_GTOL``),
            ``n_iter_``, ``nll_`` (mean NLL of the stored float32 map on the data) set.
        """
        fn = f"{self._name}.fit"
        max_iter = check_positive_int(max_iter, "max_iter", fn)
        self._check_hyperparameters(fn)
        z, y, _, _ = fit_inputs(logits, labels, fn, self.num_classes, stacklevel=3)

        def objective(params: list[torch.Tensor]) -> torch.Tensor:
            loss = F.cross_entropy(self._map(z, params), y)
            penalty = self._penalty(params)
            return loss if penalty is None else loss + penalty

        result = minimise(objective, self._initial(z.device), max_iter)
        if not result.finite:
            # the stored map stays as it was: a diverged fit never becomes a NaN scaler
            raise ValueError(
                f"{fn}: `logits` must allow a finite fit (the L-BFGS iterates became "
                f"non-finite; the largest |logit| is {float(z.abs().max()):.4g}); rescale the "
                "logits or check them for overflow upstream"
            )
        gmax = result.max_gradient
        with torch.no_grad():
            for own, fitted in zip(self.parameters(), result.params):
                own.copy_(fitted)
            stored = [p.to(torch.float64) for p in self.parameters()]
            nll = float(F.cross_entropy(self._map(z, stored), y))
        self.converged_ = result.converged
        self.n_iter_ = result.n_iter
        self.nll_ = nll
        if not self.converged_:
            warnings.warn(
                f"{fn}: L-BFGS stopped after {self.n_iter_} iterations with gradient "
                f"{gmax:.2e} > {CONVERGENCE_GTOL:g}; the data may be separable (the NLL has no "
                "finite minimiser) or max_iter too small.",
                RuntimeWarning,
                stacklevel=2,
            )
        return self

    def _check_hyperparameters(self, fn: str) -> None:
        """Re-check hyper-parameters a user may have reassigned since ``__init__``."""
        check_positive_int(self.num_classes, "num_classes", fn, minimum=2)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        fn = f"{self._name}.load_state_dict"
        for name, param in self._parameters.items():
            key = prefix + name
            if key in state_dict and param is not None:
                state_tensor(state_dict[key], key, fn, tuple(param.shape))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class VectorScaling(_AffineScaling):
    """Vector scaling: ``softmax(a * z + b)`` with a scale ``a`` and a shift ``b`` per class.

    Can fix class-specific over- or under-confidence, and can change the predicted class.
    Fitted by L-BFGS with a strong-Wolfe line search on the (convex) mean NLL in float64.

    Args:
        num_classes: Number of classes ``K`` (>= 2).

    Attributes:
        a: Per-class scale ``[K]`` (float32 parameter, no gradient), initially ones.
        b: Per-class shift ``[K]`` (float32 parameter, no gradient), initially zeros.
        a_, b_: The same as float64 numpy arrays.
        converged_, n_iter_, nll_: Set by :meth:`fit`.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> latent = torch.randn(2000, 3, generator=g)
        >>> labels = torch.multinomial(latent.softmax(-1), 1, generator=g).squeeze(1)
        >>> scaler = VectorScaling(num_classes=3).fit(3 * latent, labels)
        >>> scaler.converged_, scaler(3 * latent).shape
        (True, torch.Size([2000, 3]))
        >>> proba = scaler.predict_proba((3 * latent).numpy())  # numpy in, a plain tensor out
        >>> proba.shape, proba.requires_grad
        (torch.Size([2000, 3]), False)
    """

    _name = "VectorScaling"
    _identity_scale = staticmethod(torch.ones)
    _scaled = staticmethod(torch.mul)

    def __init__(self, num_classes: int) -> None:
        super().__init__(num_classes)
        # a and b, their float64 fitting copies, gradients and L-BFGS history (~20 per class)
        check_allocation(self._name, "num_classes", self.num_classes, per_count=20, itemsize=8)
        self._start_at_identity("a", "b")

    a_ = numpy_view(
        "a", "The per-class scale ``a`` applied, as float64 ``[K]`` (a copy).", needs_fit=False
    )
    b_ = numpy_view(
        "b", "The per-class shift ``b`` applied, as float64 ``[K]`` (a copy).", needs_fit=False
    )


class MatrixScaling(_AffineScaling):
    """Matrix scaling: ``softmax(z W^T + b)`` with a full ``K x K`` matrix and a shift.

    The most flexible affine calibrator (Guo et al., 2017); it has ``K^2 + K`` parameters and
    overfits small validation sets, which the off-diagonal penalty of Kull et al. (2019)
    counters: the fitted objective is ``NLL + off_diagonal_l2 * sum_{i != j} W_ij^2``.

    Args:
        num_classes: Number of classes ``K`` (>= 2).
        off_diagonal_l2: Penalty weight on the squared off-diagonal entries of ``W`` (>= 0).

    Attributes:
        weight: ``[K, K]`` matrix (float32 parameter, no gradient), initially the identity.
        bias: ``[K]`` shift (float32 parameter, no gradient), initially zeros.
        weight_, bias_: The same as float64 numpy arrays.
        converged_, n_iter_, nll_: Set by :meth:`fit` (``nll_`` excludes the penalty).
    """

    _name = "MatrixScaling"
    _identity_scale = staticmethod(torch.eye)

    def __init__(self, num_classes: int, *, off_diagonal_l2: float = 0.0) -> None:
        super().__init__(num_classes)
        self.off_diagonal_l2 = check_positive(
            off_diagonal_l2, "off_diagonal_l2", self._name, allow_zero=True
        )
        # a [K, K] weight, its float64 fitting copies, gradients and L-BFGS history (~20 x)
        check_allocation(
            self._name, "num_classes", self.num_classes, per_count=20 * (self.num_classes + 1)
        )
        self._start_at_identity("weight", "bias")

    weight_ = numpy_view(
        "weight", "The matrix ``W`` applied, as float64 ``[K, K]`` (a copy).", needs_fit=False
    )
    bias_ = numpy_view(
        "bias", "The shift ``b`` applied, as float64 ``[K]`` (a copy).", needs_fit=False
    )

    @staticmethod
    def _scaled(z: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return z @ weight.T

    def _check_hyperparameters(self, fn: str) -> None:
        super()._check_hyperparameters(fn)
        check_positive(self.off_diagonal_l2, "off_diagonal_l2", fn, allow_zero=True)

    def _penalty(self, params: list[torch.Tensor]) -> torch.Tensor | None:
        if self.off_diagonal_l2 == 0.0:
            return None
        weight = params[0]
        off = weight - torch.diag_embed(torch.diagonal(weight))
        return self.off_diagonal_l2 * (off * off).sum()

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, off_diagonal_l2={self.off_diagonal_l2:g}"
