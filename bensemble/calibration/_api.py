"""The scikit-learn-like surface shared by every post-hoc calibrator (no public names).

Two families share one vocabulary - ``fit`` returns ``self``, ``transform`` and
``predict_proba`` answer without tracking gradients and take tensors or numpy arrays, fitted
values end in ``_``, ``state_dict`` / ``load_state_dict`` round-trip:

* :class:`ScalerAPI` - the logit scalers (temperature, vector, matrix scaling): ``transform`` maps
  logits to calibrated logits, ``predict_proba`` returns their softmax;
* :class:`ProbabilityCalibrator` - the calibrators of probabilities (isotonic, histogram
  binning, beta, Dirichlet): ``transform`` and ``predict_proba`` both return calibrated
  probabilities. Inputs are probabilities ``[N, K]`` (logits with ``from_logits=True``) or, for a
  binary task, the positive-class probability ``[N]``; outputs keep the input's layout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    as_logits,
    as_probs,
    check_bool,
    check_probability,
    output_dtype,
    to_tensor,
)
from bensemble.calibration._inputs import table_state_tensor

__all__: list[str] = []

_F64 = torch.float64
#: Default floor of the probabilities before a logarithm (``min_prob`` of beta and Dirichlet
#: calibration and of the epistemic recalibrator): exact zeros (trees) get a finite logarithm
#: (``log 1e-300 = -690.8``) and every positive float64 probability keeps its own. Higher floors
#: erase the information of very confident models: fitted on the probabilities of the
#: over-fitted MLPs of ``benchmarks/bench_calibrators.py`` (a third of the toy's below 1e-12), a
#: floor of 1e-12 raised the test NLL of beta and Dirichlet calibration from 0.104 to 0.121 on
#: the toy, and of Dirichlet calibration from 0.831 to 0.880 on digits; on a random forest's
#: pooled digits probabilities (17% exact zeros) 1e-300 was the best of 1e-6 ... 1e-300 for
#: unregularised Dirichlet calibration (``python benchmarks/bench_calibrators.py
#: --floor-study``).
PROB_FLOOR = 1e-300


class ScalerAPI:
    """``transform`` / ``predict_proba`` for the logit scalers (mixed into ``nn.Module`` s).

    The scalers' parameters do not require gradients (a fitted calibrator is not trained by an
    outer optimiser; ``requires_grad_(True)`` opts back in), so ``scaler(logits)`` is a plain
    tensor whenever ``logits`` is; these two methods never track gradients at all.
    """

    def transform(self, logits: Any) -> torch.Tensor:
        """Calibrated logits (the module's output) without gradients.

        Args:
            logits: ``[N, K]`` or member logits ``[M, N, K]`` (tensor, numpy array or list).

        Returns:
            The scaled logits, same shape; floating dtype of the input.
        """
        with torch.no_grad():
            return self(logits).detach()  # type: ignore[operator]

    def predict_proba(self, logits: Any) -> torch.Tensor:
        """Calibrated probabilities ``softmax(transform(logits))`` over the last axis.

        Args:
            logits: ``[N, K]`` or member logits ``[M, N, K]``.

        Returns:
            Probabilities of the input's shape: float32 / float64 as the input (half-precision
            and integer inputs give float32 / the default dtype), no gradients.
        """
        fn = f"{type(self).__name__}.predict_proba"
        raw = logits if isinstance(logits, torch.Tensor) else to_tensor(logits, "logits", fn)
        dtype = output_dtype(raw)
        with torch.no_grad():
            z = self(raw).detach()  # type: ignore[operator]
            return torch.softmax(z.to(torch.promote_types(z.dtype, dtype)), dim=-1).to(dtype)


def as_numpy(t: torch.Tensor) -> Any:
    """A float64 numpy copy of a parameter or buffer (the ``*_`` attributes)."""
    return t.detach().to(device="cpu", dtype=_F64).numpy().copy()


def check_fitted_layout(
    raw: torch.Tensor, fn: str, name: str, num_classes: int | None
) -> tuple[bool, int]:
    """``(binary_1d, K)`` of an input array: ``[N]`` (binary) or ``[N, K]``."""
    if raw.ndim not in (1, 2):
        raise ValueError(
            f"{fn}: `{name}` must be [N, K] class probabilities or, for a binary task, the "
            f"[N] positive-class probability (got shape {tuple(raw.shape)})"
        )
    k = 2 if raw.ndim == 1 else int(raw.shape[1])
    if num_classes is not None and k != num_classes:
        raise ValueError(
            f"{fn}: `{name}` must have the {num_classes} classes the calibrator was fitted on "
            f"(got shape {tuple(raw.shape)})"
        )
    return raw.ndim == 1, k


def read_probs(
    value: Any, fn: str, *, from_logits: bool, num_classes: int | None = None, name: str = "probs"
) -> tuple[torch.Tensor, torch.Tensor, bool, torch.dtype]:
    """Validated float64 ``(probs [N, K], log_probs [N, K])``, whether the input was ``[N]``, and
    the output dtype.

    A 1-D input is the positive-class probability of a binary task (its logit with
    ``from_logits=True``) and becomes ``[N, 2]``. From logits the log-probabilities are exact
    (``log_softmax``, ``logsigmoid``), not the logarithm of rounded probabilities; from
    probabilities they are ``log p`` (``-inf`` for an exact 0).
    """
    raw = to_tensor(value, name, fn)
    binary_1d, _ = check_fitted_layout(raw, fn, name, num_classes)
    dtype = output_dtype(raw)
    if not binary_1d:
        if from_logits:
            z = as_logits(raw, name, fn, ndim=2, dtype=_F64, min_classes=2, warn_on_simplex=True)
            log_p = torch.log_softmax(z, dim=1)
            return log_p.exp(), log_p, False, dtype
        p = as_probs(raw, name, fn, ndim=2, dtype=_F64)
        return p, p.log(), False, dtype
    t = as_float_tensor(raw, name, fn, ndim=1, dtype=_F64)
    if from_logits:
        log_p = torch.stack([F.logsigmoid(-t), F.logsigmoid(t)], dim=1)
        return log_p.exp(), log_p, True, dtype
    lo, hi = (float(v) for v in torch.aminmax(t))
    if not (lo >= 0.0 and hi <= 1.0):
        raise ValueError(
            f"{fn}: `{name}` must hold probabilities in [0, 1] (got values in [{lo:.4g}, "
            f"{hi:.4g}]); if these are logits pass from_logits=True"
        )
    p = torch.stack([1.0 - t, t], dim=1)
    return p, torch.stack([torch.log1p(-t), t.log()], dim=1), True, dtype


def log_complement(log_p: torch.Tensor) -> torch.Tensor:
    """``log(1 - p_k) = log sum_{j != k} p_j`` of every entry of ``log_p [N, K]``, without the
    cancellation of ``1 - p`` near 1 (prefix and suffix log-sum-exps of the other classes)."""
    neg_inf = torch.full_like(log_p[:, :1], -torch.inf)
    prefix = torch.cat([neg_inf, torch.logcumsumexp(log_p, dim=1)[:, :-1]], dim=1)
    suffix = torch.logcumsumexp(log_p.flip(1), dim=1).flip(1)
    suffix = torch.cat([suffix[:, 1:], neg_inf], dim=1)
    return torch.logaddexp(prefix, suffix)


def normalise_rows(q: torch.Tensor) -> torch.Tensor:
    """Rows of non-negative scores divided by their sums; an all-zero row becomes uniform.

    The one-vs-all calibrators' combination rule (as scikit-learn's ``CalibratedClassifierCV``).
    """
    total = q.sum(dim=1, keepdim=True)
    uniform = torch.full_like(q, 1.0 / q.shape[1])
    return torch.where(total > 0, q / total.clamp_min(torch.finfo(q.dtype).tiny), uniform)


class ProbabilityCalibrator(nn.Module):
    """Base of the calibrators of probabilities: input contract, fitted state, outputs.

    Subclasses set ``_name`` and ``_state_names`` (the buffers holding the fitted map) and
    implement ``_fit_map(p, log_p, y) -> dict`` (new buffer values, computed without touching
    ``self``), ``_apply_map(p, log_p) -> q`` (float64 ``[N, K]`` probabilities and their exact
    logarithms in, calibrated ``[N, K]`` out) and ``_check_state(state, k) -> None`` (semantic
    checks of a loaded state).

    The fitted state is the buffers plus an extra state ``{"num_classes": K}`` (``0``: not
    fitted); buffers take the shape of a loaded state, so a fresh instance loads any fit.
    """

    _name = "ProbabilityCalibrator"
    _state_names: tuple[str, ...] = ()

    def __init__(self, *, from_logits: bool = False) -> None:
        super().__init__()
        self.from_logits = check_bool(from_logits, "from_logits", self._name)
        self._num_classes = 0
        for name in self._state_names:
            self.register_buffer(name, torch.zeros(0, dtype=_F64))

    # ---------------------------------------------------------------- subclass hooks
    def _fit_map(self, p: torch.Tensor, log_p: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        raise NotImplementedError

    def _apply_map(self, p: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _check_state(self, state: dict[str, torch.Tensor], k: int, fn: str) -> None:
        raise NotImplementedError

    def _check_hyperparameters(self, fn: str) -> None:
        check_bool(self.from_logits, "from_logits", fn)

    # ---------------------------------------------------------------- public surface
    @property
    def num_classes_(self) -> int:
        """Number of classes of the fitted map (``2`` for a binary task)."""
        self._require_fit(f"{self._name}.num_classes_")
        return self._num_classes

    @property
    def is_fitted_(self) -> bool:
        """Whether :meth:`fit` (or ``load_state_dict`` of a fitted state) has run."""
        return self._num_classes > 0

    def fit(self, probs: Any, labels: Any) -> ProbabilityCalibrator:
        """Fit the map on held-out predictions.

        Args:
            probs: ``[N, K]`` class probabilities (logits with ``from_logits=True``), or the
                positive-class probability ``[N]`` of a binary task. Not modified.
            labels: Integer labels ``[N]`` in ``[0, K)`` (``{0, 1}`` for ``[N]`` input).

        Returns:
            ``self``. A refused input raises ``ValueError`` and leaves a previous fit in place.
        """
        fn = f"{self._name}.fit"
        self._check_hyperparameters(fn)
        p, log_p, _, _ = read_probs(probs, fn, from_logits=self.from_logits)
        y = as_labels(labels, "labels", fn, n=p.shape[0], num_classes=p.shape[1], device=p.device)
        values = self._fit_map(p, log_p, y)  # nothing of self changes before this returns
        for name in self._state_names:
            setattr(self, name, values.pop(name).to(device=self._device(), dtype=_F64))
        for name, value in values.items():  # fit diagnostics (converged_, n_iter_, ...)
            setattr(self, name, value)
        self._num_classes = int(p.shape[1])
        return self

    def transform(self, probs: Any) -> torch.Tensor:
        """Calibrated probabilities, in the layout of the input.

        Args:
            probs: ``[N, K]`` probabilities (logits with ``from_logits=True``) or ``[N]``
                positive-class probabilities, with the ``K`` the map was fitted on.

        Returns:
            ``[N, K]`` rows on the simplex (``[N]`` for ``[N]`` input), no gradients, on the
            input's device, float32 / float64 as the input (half precision gives float32).
        """
        fn = f"{self._name}.transform"
        self._require_fit(fn)
        p, log_p, binary_1d, dtype = read_probs(
            probs, fn, from_logits=self.from_logits, num_classes=self._num_classes
        )
        with torch.no_grad():
            device = self._device()
            q = self._apply_map(p.to(device), log_p.to(device)).to(p.device)
        return (q[:, 1] if binary_1d else q).to(dtype)

    def predict_proba(self, probs: Any) -> torch.Tensor:
        """The calibrated probabilities (the same as :meth:`transform`)."""
        return self.transform(probs)

    def forward(self, probs: Any) -> torch.Tensor:
        """Calling the module is :meth:`transform`."""
        return self.transform(probs)

    def extra_repr(self) -> str:
        fitted = f"num_classes={self._num_classes}" if self.is_fitted_ else "not fitted"
        options = self._repr_options()
        return ", ".join([*options, f"from_logits={self.from_logits}", fitted])

    def _repr_options(self) -> list[str]:
        return []

    # ---------------------------------------------------------------- helpers
    def _require_fit(self, fn: str) -> None:
        if not self.is_fitted_:
            raise ValueError(
                f"{fn}: the calibrator is not fitted (got an unfitted {self._name}); call "
                "fit(probs, labels) first, or load_state_dict a fitted state"
            )

    def _fitted(self, name: str) -> torch.Tensor:
        """A fitted buffer in float64, whatever the module was cast to (``.half()``, ...)."""
        return getattr(self, name).to(_F64)

    def _device(self) -> torch.device:
        for name in self._state_names:
            return getattr(self, name).device
        return torch.device("cpu")

    def get_extra_state(self) -> dict[str, int]:
        return {"num_classes": self._num_classes}

    def set_extra_state(self, state: Any) -> None:
        self._num_classes = int(state["num_classes"])

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        fn = f"{self._name}.load_state_dict"
        extra_key = prefix + "_extra_state"
        extra = state_dict.get(extra_key)
        if extra is None:
            raise ValueError(f"{fn}: `{extra_key}` must be in the state (got no such key)")
        k = extra.get("num_classes") if isinstance(extra, dict) else None
        if isinstance(k, bool) or not isinstance(k, int) or not (k == 0 or k >= 2):
            raise ValueError(
                f"{fn}: `{extra_key}` must be a dict with an int num_classes of 0 (not fitted) "
                f"or >= 2 (got {extra!r:.80})"
            )
        state = {}
        for name in self._state_names:
            key = prefix + name
            if key not in state_dict:
                raise ValueError(f"{fn}: `{key}` must be in the state (got no such key)")
            state[name] = table_state_tensor(state_dict[key], key, fn)
        if k == 0:
            for name, t in state.items():
                if t.numel():
                    raise ValueError(f"{fn}: `{prefix + name}` must be empty when not fitted")
        else:
            self._check_state(state, k, fn)
        for name, t in state.items():  # take the loaded shapes, then let nn.Module copy
            setattr(self, name, torch.empty(t.shape, dtype=_F64, device=self._device()))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def require(ok: bool, fn: str, key: str, expectation: str, got: Callable[[], str]) -> None:
    """Raise the state-check ``ValueError`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{fn}: `{key}` must {expectation} (got {got()})")


def shape_is(t: torch.Tensor, shape: tuple[int, ...], fn: str, key: str) -> None:
    require(tuple(t.shape) == shape, fn, key, f"have shape {shape}", lambda: f"{tuple(t.shape)}")


def in_unit_interval(t: torch.Tensor, fn: str, key: str) -> None:
    lo = float(t.min()) if t.numel() else 0.0
    hi = float(t.max()) if t.numel() else 1.0
    require(lo >= 0.0 and hi <= 1.0, fn, key, "lie in [0, 1]", lambda: f"values in [{lo}, {hi}]")


def check_min_prob(value: Any, fn: str) -> float:
    """The floor of the probabilities before a logarithm: a number in ``(0, 1)``."""
    return check_probability(value, "min_prob", fn)
