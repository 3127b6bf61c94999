"""Machinery behind :class:`bensemble.core.member.StochasticMembers`.

* :data:`DROPOUT_TYPES` - every torch dropout module kind (defined in :mod:`bensemble.utils`).
* :func:`stochastic_kind` / :func:`kinds_present` - what a model can sample.
* :class:`SamplingSession` - a context manager that puts every module in eval mode, switches on
  only the selected stochastic modules, and restores every module's own flags in ``finally``.
* Per-pass dropout masks: dropout modules stay in eval mode (an identity) and a forward hook
  multiplies their input by a mask drawn from the current pass's generator. With
  ``mask="per_pass"`` the mask has a batch axis of size 1, so all rows of a batch share it, and
  it depends only on the pass's seed and the feature shape, never on the batch.
* Functional dropout (``F.dropout`` and its kinds called in a ``forward``) is intercepted by a
  :class:`torch.overrides.TorchFunctionMode` while ``functional`` is set and gets the same masks.
* ``noise_draws`` counts the random draws of a pass (active dropout, active stochastic layers),
  so a forward pass that draws none (a degenerate ensemble) can be refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from bensemble.core._checks import set_training
from bensemble.layers.base import StochasticLayer, draw_mask
from bensemble.utils import DROPOUT_TYPES  # every torch dropout kind: mode="dropout" uses them

__all__ = [
    "DROPOUT_TYPES",
    "stochastic_kind",
    "kinds_present",
    "draw_seeds",
    "pass_generators",
    "SamplingSession",
    "DEGENERATE_MESSAGE",
    "resolved_mode",
    "is_active",
]

# Kinds that drop whole channels: the mask is [N, C, 1, ..., 1].
_CHANNEL_TYPES = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.FeatureAlphaDropout)
# Kinds that keep SELU's mean and variance: dropped units go to the saturation value.
_ALPHA_TYPES = (nn.AlphaDropout, nn.FeatureAlphaDropout)
# -(SELU's negative saturation): lambda * alpha of Klambauer et al. (2017).
_SELU_SATURATION = 1.7580993408473766
# Functional dropout calls and the module kind whose mask shape and values they follow.
_FUNCTIONAL = {
    F.dropout: nn.Dropout,
    F.dropout1d: nn.Dropout1d,
    F.dropout2d: nn.Dropout2d,
    F.dropout3d: nn.Dropout3d,
    F.alpha_dropout: nn.AlphaDropout,
    F.feature_alpha_dropout: nn.FeatureAlphaDropout,
}


def stochastic_kind(module: nn.Module) -> str | None:
    """``"dropout"`` for torch dropout modules, ``stochastic_kind`` for a StochasticLayer."""
    if isinstance(module, DROPOUT_TYPES):
        return "dropout"
    if isinstance(module, StochasticLayer):
        return module.stochastic_kind
    return None


def kinds_present(modules: Iterable[nn.Module]) -> set[str]:
    """The set of stochastic kinds among ``modules``."""
    return {k for k in map(stochastic_kind, modules) if k is not None}


#: The end of every "degenerate ensemble" error.
DEGENERATE_MESSAGE = (
    "without one every member would be the same prediction (M identical copies, no "
    "uncertainty at all)"
)
_SINGLE_MODES = ("dropout", "dropconnect", "bayesian")


def resolved_mode(kinds: set[str]) -> str:
    """The mode name of a set of kinds, as bensemble 0.2 reports ``mode="auto"``."""
    if kinds == {"bayesian", "dropout"}:
        return "both"
    if len(kinds) == 1 and next(iter(kinds)) in _SINGLE_MODES:
        return next(iter(kinds))
    return "all"


def is_active(module: nn.Module) -> bool:
    """Whether a stochastic module's draws can change its output (dropout: ``0 < p < 1``)."""
    if isinstance(module, DROPOUT_TYPES):
        return 0.0 < float(module.p) < 1.0
    if isinstance(module, StochasticLayer):
        return module.stochastic_active()
    return True


def draw_seeds(n: int, generator: torch.Generator | None) -> list[int]:
    """``n`` seeds, one per forward pass, from ``generator`` (or torch's global state)."""
    if generator is None:
        seeds = torch.randint(0, 2**62, (n,), dtype=torch.int64)
    else:
        seeds = torch.randint(
            0, 2**62, (n,), dtype=torch.int64, generator=generator, device=generator.device
        )
    return seeds.tolist()


def pass_generators(seeds: Sequence[int], device: torch.device) -> list[torch.Generator]:
    """One generator per forward pass: pass ``m`` draws all its noise from ``seeds[m]``.

    Giving every pass its own stream makes member ``m`` depend only on its seed, not on the
    order in which members are computed (loop or several members per forward pass).
    """
    return [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]


def _mask_shape(kind: type[nn.Module], shape: Sequence[int], per_pass: bool) -> list[int]:
    """Shape of a dropout mask for an input of ``shape`` (batch axis first when there is one)."""
    shape = list(shape)
    ndim = len(shape)
    if issubclass(kind, _CHANNEL_TYPES):
        unbatched = (issubclass(kind, nn.Dropout1d) and ndim == 2) or (
            issubclass(kind, nn.Dropout3d) and ndim == 4
        )
        if unbatched:  # [C, *spatial]: one input, one channel mask
            return [shape[0]] + [1] * (ndim - 1)
        mask = shape[:2] + [1] * (ndim - 2)
    else:
        if ndim < 2:  # a single unbatched feature vector
            return shape
        mask = shape
    if per_pass:
        mask[0] = 1
    return mask


def _apply_dropout(
    session: SamplingSession, kind: type[nn.Module], p: float, x: torch.Tensor
) -> torch.Tensor:
    """Dropout of ``kind`` with probability ``p`` on ``x``, masks from the session's generators."""
    if p == 0.0:
        return x
    if p == 1.0:
        return torch.zeros_like(x)
    session.noise_draws += 1
    per_pass = session.per_pass
    gens = session.generators
    k = len(gens)

    def draw(shape: Sequence[int], g: torch.Generator | None) -> torch.Tensor:
        return draw_mask(shape, 1.0 - p, device=x.device, dtype=x.dtype, generator=g)

    if k == 1:
        keep = draw(_mask_shape(kind, x.shape, per_pass), gens[0])
    else:  # x holds k stacked copies of the batch; copy i uses generator i
        rows = x.shape[0] // k
        one = _mask_shape(kind, (rows, *x.shape[1:]), per_pass)
        keep = torch.cat([draw(one, g) for g in gens])
        if per_pass:
            keep = keep.repeat_interleave(rows, dim=0)
    if issubclass(kind, _ALPHA_TYPES):
        # Kept units: a * x + a * s * p; dropped units: a * s * (p - 1), s = SELU saturation.
        a = 1.0 / math.sqrt((_SELU_SATURATION**2 * p + 1.0) * (1.0 - p))
        return a * (x * keep + _SELU_SATURATION * (keep - 1.0 + p))
    return x * (keep / (1.0 - p))


class _DropoutMask:
    """Forward hook on a dropout module in eval mode: applies a mask from the session."""

    def __init__(self, session: SamplingSession) -> None:
        self.session = session

    def __call__(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        if self.session.inside_module:
            self.session.inside_module -= 1
        return _apply_dropout(self.session, type(module), float(module.p), inputs[0])


class _FunctionalDropout(TorchFunctionMode):
    """Switches on functional dropout calls made outside dropout modules, with session masks."""

    def __init__(self, session: SamplingSession) -> None:
        super().__init__()
        self.session = session

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _FUNCTIONAL.get(func)
        if kind is None or self.session.inside_module:
            return func(*args, **kwargs)
        x = args[0] if args else kwargs["input"]
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        self.session.functional_calls += 1
        return _apply_dropout(self.session, kind, float(p), x)


class SamplingSession:
    """Eval mode for every module, selected stochastic modules on; exact restore on exit.

    Args:
        modules: every module whose flags the session may touch (deduplicated by the caller).
        kinds: stochastic kinds to switch on (``"dropout"`` and/or StochasticLayer kinds).
        per_pass: one dropout mask per pass shared by the batch (else one per row).
        native_dropout: for per-row masks without a generator, use torch's own dropout (the
            dropout modules are put in train mode) instead of the masking hook.
        functional: intercept functional dropout calls (``functional_calls`` counts them).
    """

    def __init__(
        self,
        modules: Sequence[nn.Module],
        kinds: Iterable[str],
        *,
        per_pass: bool,
        native_dropout: bool = False,
        functional: bool = False,
    ) -> None:
        self.modules = list(modules)
        self.functional = functional and "dropout" in frozenset(kinds)
        self.noise_draws = 0
        self.functional_calls = 0
        self.inside_module = 0
        self._mode: _FunctionalDropout | None = None
        self.kinds = frozenset(kinds)
        self.per_pass = per_pass
        self.native_dropout = native_dropout and not per_pass
        self.generators: list[torch.Generator | None] = [None]
        self.layers = [
            m
            for m in self.modules
            if isinstance(m, StochasticLayer) and m.stochastic_kind in self.kinds
        ]
        self.dropouts = (
            [m for m in self.modules if isinstance(m, DROPOUT_TYPES)]
            if "dropout" in self.kinds
            else []
        )
        self._flags: list[tuple[nn.Module, bool]] = []
        self._layer_state: list[tuple] = []
        self._hooks: list = []

    def __enter__(self) -> SamplingSession:
        self._flags = [(m, m.training) for m in self.modules]
        self._layer_state = [
            (m, m.force_sample, m.sample_generator, m.sample_replicas) for m in self.layers
        ]
        try:
            for m, flag in self._flags:
                if flag:
                    set_training(m, False)
            for m in self.layers:
                m.force_sample = True
            for m in self.dropouts:
                if self.native_dropout:
                    set_training(m, True)
                else:
                    if self.functional:  # tell module calls from functional ones
                        self._hooks.append(m.register_forward_pre_hook(self._enter_module))
                    self._hooks.append(m.register_forward_hook(_DropoutMask(self)))
            active = [m for m in self.layers if m.stochastic_active()]
            for m in active:
                self._hooks.append(m.register_forward_pre_hook(self._count_layer))
            if self.functional:
                self._mode = _FunctionalDropout(self)
                self._mode.__enter__()
        except BaseException:
            self._restore()
            raise
        return self

    def set_generators(self, generators: Sequence[torch.Generator | None]) -> None:
        """Noise source of the next forward pass: one generator, or one per stacked copy."""
        self.generators = list(generators)
        replicas = len(self.generators) > 1
        for m in self.layers:
            m.sample_generator = None if replicas else self.generators[0]
            m.sample_replicas = self.generators if replicas else None

    def _enter_module(self, module: nn.Module, inputs: tuple) -> None:
        self.inside_module += 1

    def _count_layer(self, module: nn.Module, inputs: tuple) -> None:
        self.noise_draws += 1

    def _restore(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        self.inside_module = 0
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        for m, force, gen, replicas in self._layer_state:
            m.force_sample = force
            m.sample_generator = gen
            m.sample_replicas = replicas
        for m, flag in self._flags:
            if m.training is not flag:
                set_training(m, flag)

    def __exit__(self, *exc: object) -> None:
        self._restore()
