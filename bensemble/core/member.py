"""Member adapters: turn a prediction source into member predictions ``[M, B, *]``.

* :class:`ExplicitMembers` - a list of independent networks (a deep ensemble).
* :class:`StochasticMembers` - one network with random forward passes (MC dropout, DropConnect,
  Bayesian layers); each pass is a member.
* :class:`~bensemble.core.sklearn_members.SklearnMembers` (in its own module) - the fitted
  sub-estimators of a scikit-learn bagging-style ensemble (random forest, extra trees, bagging).

All adapters predict under :func:`torch.no_grad` (as bensemble 0.2 does for sampled members):
an ensemble is an inference object; train its members directly.

Unlike bensemble 0.2, adapters have no ``modules`` property (it shadowed
:meth:`torch.nn.Module.modules`); use :attr:`MemberAdapter.member_modules`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from bensemble._validation import (
    check_generator,
    check_option,
    check_positive_int,
)
from bensemble.core._stochastic import (
    DROPOUT_TYPES,
    SamplingSession,
    draw_seeds,
    kinds_present,
    pass_generators,
    stochastic_kind,
)
from bensemble.core.types import MemberPredictions
from bensemble.layers.base import StochasticLayer

__all__ = [
    "MemberAdapter",
    "ExplicitMembers",
    "StochasticMembers",
    "DROPOUT_TYPES",
    "OUTPUT_KINDS",
    "STOCHASTIC_MODES",
    "MASK_MODES",
    "STRATEGIES",
]

#: What a member returns: unnormalised ``"logits"`` or class ``"probs"``.
OUTPUT_KINDS = ("logits", "probs")
#: Modes of :class:`StochasticMembers` (``"both"`` is bensemble 0.2's bayesian + dropout).
STOCHASTIC_MODES = ("auto", "dropout", "dropconnect", "bayesian", "both", "all")
#: Dropout masks: one per forward pass (shared by the batch) or one per row.
MASK_MODES = ("per_pass", "per_sample")
#: How :class:`StochasticMembers` runs its passes.
STRATEGIES = ("loop", "repeat")
# Rows per forward pass when strategy="repeat" picks its own chunk size.
_REPEAT_MAX_ROWS = 4096


class MemberAdapter(nn.Module):
    """Adapts a prediction source to the uniform ``[M, B, *]`` interface.

    Subclasses implement :meth:`predict_all`, :attr:`size` and :attr:`member_modules`, and set
    :attr:`output_kind`.
    """

    #: ``"logits"`` (softmax gives probabilities) or ``"probs"`` (already probabilities).
    output_kind: str = "logits"

    def predict_all(self, x: Any) -> MemberPredictions:
        """Raw outputs of every member, ``[M, B, *]``."""
        raise NotImplementedError

    def forward(self, x: Any) -> MemberPredictions:
        return self.predict_all(x)

    @property
    def size(self) -> int:
        """Number of members ``M``."""
        raise NotImplementedError

    @property
    def member_modules(self) -> list[nn.Module]:
        """The underlying networks (for KL terms, parameters, devices)."""
        raise NotImplementedError

    def sample_masks(self) -> contextlib.AbstractContextManager:
        """Context in which repeated calls see the same members (a no-op for fixed members)."""
        return contextlib.nullcontext(self)


def _check_module(value: Any, name: str, fn: str) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise ValueError(f"{fn}: `{name}` must be a torch.nn.Module (got {type(value).__name__})")
    return value


class ExplicitMembers(MemberAdapter):
    """Independent networks, evaluated one after the other.

    A Python loop over members is the fastest way on CPU for realistic members; see
    :class:`bensemble.core.ensemble.Ensemble.from_models` for the packed form of tiny MLPs.

    Args:
        models: the member networks (at least one), each mapping ``x`` to ``[B, *]``.
        output_kind: ``"logits"`` or ``"probs"``.
    """

    def __init__(self, models: Sequence[nn.Module], output_kind: str = "logits") -> None:
        super().__init__()
        fn = "ExplicitMembers"
        if isinstance(models, nn.Module) and not isinstance(models, nn.ModuleList):
            raise ValueError(f"{fn}: `models` must be a sequence of nn.Module (got one module)")
        models = list(models)
        if not models:
            raise ValueError(f"{fn}: `models` must hold at least one model (got an empty list)")
        for i, model in enumerate(models):
            _check_module(model, f"models[{i}]", fn)
        self.output_kind = check_option(output_kind, "output_kind", OUTPUT_KINDS, fn)
        self.models = nn.ModuleList(models)

    @torch.no_grad()
    def predict_all(self, x: Any) -> MemberPredictions:
        outputs = [model(x) for model in self.models]
        shapes = {tuple(o.shape) for o in outputs}
        if len(shapes) > 1:
            raise ValueError(
                "ExplicitMembers.predict_all: every member must return the same shape "
                f"(got shapes {sorted(shapes)})"
            )
        return torch.stack(outputs)

    @property
    def size(self) -> int:
        return len(self.models)

    @property
    def member_modules(self) -> list[nn.Module]:
        return list(self.models)


class StochasticMembers(MemberAdapter):
    """One network whose random forward passes are the members (MC dropout, DropConnect, ...).

    Sampling puts every module in eval mode (batch norm uses its running statistics, which never
    change), switches on only the selected stochastic modules, runs ``num_samples`` passes and
    restores every module's own training flag in ``finally`` (also when the forward raises).

    Stochastic kinds:

    * ``"dropout"`` - every torch dropout module: ``Dropout``, ``Dropout1d/2d/3d``,
      ``AlphaDropout``, ``FeatureAlphaDropout``;
    * any :class:`~bensemble.layers.StochasticLayer` by its ``stochastic_kind``
      (``"dropconnect"`` for :class:`~bensemble.layers.DropConnectLinear`, ``"bayesian"`` for
      variational layers), switched on through its ``force_sample`` flag.

    Modes: ``"auto"`` (and its alias ``"all"``) switch on every kind the model has; ``"dropout"``,
    ``"dropconnect"`` and ``"bayesian"`` one kind; ``"both"`` bayesian and dropout (bensemble
    0.2). A mode that finds nothing to switch on is an error: it would return ``M`` identical
    copies of one prediction.

    Masks: with ``mask="per_pass"`` (default) each dropout module draws **one** mask per forward
    pass (shape ``[1, *features]``, or ``[1, C, 1, ...]`` for channel dropout), shared by every row
    of the batch, so member ``m`` is one function: it gives the same output for the same ``x``
    whichever batch ``x`` is in. ``mask="per_sample"`` is torch's usual dropout (an independent
    mask per row). Stochastic layers always use their own mechanism (DropConnect: one weight mask
    per pass).

    Randomness: pass ``m`` draws all its noise from its own generator seeded by the ``m``-th of
    ``num_samples`` seeds drawn from ``generator`` (or from torch's global state), so the same
    seeded generator gives the same members. Inside :meth:`sample_masks` the seeds are drawn once
    and reused, so a whole test loader sees the same ``M`` hypotheses.

    Speed: for an ``nn.Sequential`` model the deterministic prefix (every layer before the first
    stochastic one) is computed once per call and only the rest is sampled (``reuse_prefix``);
    other models can give the split as ``trunk`` and ``head`` with ``model(x) ==
    head(trunk(x))``. ``strategy="repeat"`` evaluates several members per forward pass by stacking
    ``chunk_size`` copies of the batch (helps on GPUs; slower than the loop on CPUs). Outputs are
    the same in every case (bit-identical for the prefix; up to float rounding for "repeat").

    Args:
        model: the network.
        num_samples: number of members ``M`` (forward passes).
        mode: which stochastic kinds to switch on (see above).
        mask: ``"per_pass"`` or ``"per_sample"`` dropout masks.
        generator: source of the per-pass seeds (``None``: torch's global random state).
        output_kind: ``"logits"`` or ``"probs"``.
        trunk: deterministic first part of the model (given together with ``head``).
        head: the rest of the model, containing every stochastic module.
        reuse_prefix: compute the deterministic prefix of an ``nn.Sequential`` once.
        strategy: ``"loop"`` (one pass per member) or ``"repeat"``.
        chunk_size: members per forward pass for ``"repeat"`` (default: as many as fit in
            4096 rows).
    """

    ACTIVATORS = STOCHASTIC_MODES  # bensemble 0.2 exposed its valid modes under this name

    def __init__(
        self,
        model: nn.Module,
        num_samples: int = 30,
        mode: str = "auto",
        mask: str = "per_pass",
        generator: torch.Generator | None = None,
        *,
        output_kind: str = "logits",
        trunk: nn.Module | None = None,
        head: nn.Module | None = None,
        reuse_prefix: bool = True,
        strategy: str = "loop",
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        fn = "StochasticMembers"
        self.model = _check_module(model, "model", fn)
        self.num_samples = check_positive_int(num_samples, "num_samples", fn)
        self.mode = check_option(mode, "mode", STOCHASTIC_MODES, fn)
        self.mask = check_option(mask, "mask", MASK_MODES, fn)
        self.generator = check_generator(generator, None, fn)
        self.output_kind = check_option(output_kind, "output_kind", OUTPUT_KINDS, fn)
        self.strategy = check_option(strategy, "strategy", STRATEGIES, fn)
        self.chunk_size = (
            None if chunk_size is None else check_positive_int(chunk_size, "chunk_size", fn)
        )
        self.reuse_prefix = bool(reuse_prefix)
        if (trunk is None) != (head is None):
            raise ValueError(
                f"{fn}: `trunk` and `head` must be given together "
                f"(got trunk={type(trunk).__name__}, head={type(head).__name__})"
            )
        self.trunk = None if trunk is None else _check_module(trunk, "trunk", fn)
        self.head = None if head is None else _check_module(head, "head", fn)
        self.kinds = self._resolve_kinds()
        self._frozen_seeds: list[int] | None = None
        if self.trunk is not None and kinds_present(self.trunk.modules()) & set(self.kinds):
            raise ValueError(
                f"{fn}: `trunk` must be deterministic (got a trunk with stochastic modules of "
                f"kind {sorted(kinds_present(self.trunk.modules()) & set(self.kinds))})"
            )
        if self.strategy == "repeat":
            unsupported = sorted(
                {
                    type(m).__name__
                    for m in self._all_modules()
                    if isinstance(m, StochasticLayer)
                    and m.stochastic_kind in self.kinds
                    and not m.supports_replicas
                }
            )
            if unsupported:
                raise ValueError(
                    f"{fn}: `strategy` must be 'loop' for layers without replica support "
                    f"(got 'repeat' with {unsupported})"
                )

    # ------------------------------------------------------------------ set-up helpers
    def _all_modules(self) -> list[nn.Module]:
        seen: dict[int, nn.Module] = {}
        for root in (self.model, self.trunk, self.head):
            if root is not None:
                for m in root.modules():
                    seen.setdefault(id(m), m)
        return list(seen.values())

    def _resolve_kinds(self) -> tuple[str, ...]:
        fn = "StochasticMembers"
        present = kinds_present(self._all_modules())
        if self.mode in ("auto", "all"):
            kinds = present
        elif self.mode == "both":
            kinds = present & {"bayesian", "dropout"}
        else:
            kinds = present & {self.mode}
        if not kinds:
            found = sorted(present) if present else "none"
            raise ValueError(
                f"{fn}: `model` must contain a stochastic layer for mode={self.mode!r} "
                f"(dropout modules, DropConnect or Bayesian layers; found kinds: {found}); "
                "without one every member would be the same prediction"
            )
        return tuple(sorted(kinds))

    def _split(self) -> tuple[nn.Module | None, nn.Module]:
        """``(trunk, head)`` with ``model(x) == head(trunk(x))``; trunk ``None`` if no prefix."""
        if self.trunk is not None:
            return self.trunk, self.head
        model = self.model
        if not (
            self.reuse_prefix
            and isinstance(model, nn.Sequential)
            and type(model).forward is nn.Sequential.forward
        ):
            return None, model
        kinds = set(self.kinds)
        for i, child in enumerate(model):
            if any(stochastic_kind(m) in kinds for m in child.modules()):
                return (None, model) if i == 0 else (model[:i], model[i:])
        return None, model

    def _noise_device(self, x: Any) -> torch.device:
        if isinstance(x, torch.Tensor):
            return x.device
        param = next(self.model.parameters(), None)
        return param.device if param is not None else torch.device("cpu")

    def _seeds(self) -> list[int]:
        if self._frozen_seeds is not None:
            return self._frozen_seeds
        return draw_seeds(self.num_samples, self.generator)

    # ------------------------------------------------------------------ sampling
    @contextlib.contextmanager
    def sample_masks(self) -> Iterator[StochasticMembers]:
        """Freeze the ``M`` members: every call inside the context reuses the same seeds.

        With per-pass masks this makes member ``m`` the same function for every batch (given
        the same feature shapes), so a test set can be scored in batches::

            with members.sample_masks():
                preds = torch.cat([members.predict_all(xb) for xb in batches], dim=1)
        """
        if self.mask != "per_pass":
            raise ValueError(
                "StochasticMembers.sample_masks: `mask` must be 'per_pass' to freeze members "
                f"(got {self.mask!r}: per-row masks depend on the batch)"
            )
        previous = self._frozen_seeds
        self._frozen_seeds = draw_seeds(self.num_samples, self.generator)
        try:
            yield self
        finally:
            self._frozen_seeds = previous

    @torch.no_grad()
    def predict_all(self, x: Any) -> MemberPredictions:
        per_pass = self.mask == "per_pass"
        # torch's own per-row dropout when no generator asks for reproducible masks
        native = not per_pass and self.generator is None
        session = SamplingSession(
            self._all_modules(), self.kinds, per_pass=per_pass, native_dropout=native
        )
        if native and not session.layers:
            # Only torch's dropout draws noise: leave the global random stream untouched by seeds
            # (so results match a plain loop of train-mode dropout under torch.manual_seed).
            gens: list[torch.Generator | None] = [None] * self.num_samples
        else:
            gens = pass_generators(self._seeds(), self._noise_device(x))
        with session:
            trunk, head = self._split()
            h = trunk(x) if trunk is not None else x
            if self.strategy == "loop":
                outputs = []
                for g in gens:
                    session.set_generators([g])
                    outputs.append(head(h))
                return torch.stack(outputs)
            return self._predict_repeat(session, head, h, gens)

    def _predict_repeat(
        self, session: SamplingSession, head: nn.Module, h: Any, gens: list[torch.Generator | None]
    ) -> torch.Tensor:
        if not isinstance(h, torch.Tensor) or h.ndim < 1:
            raise ValueError(
                "StochasticMembers: `strategy` 'repeat' needs a batched tensor input "
                f"(got {type(h).__name__})"
            )
        rows = h.shape[0]
        chunk = self.chunk_size or max(1, _REPEAT_MAX_ROWS // max(rows, 1))
        outputs = []
        for start in range(0, len(gens), chunk):
            part = gens[start : start + chunk]
            session.set_generators(part)
            out = head(h.repeat(len(part), *([1] * (h.ndim - 1))))
            outputs.append(out.reshape(len(part), rows, *out.shape[1:]))
        return torch.cat(outputs)

    @property
    def size(self) -> int:
        return self.num_samples

    @property
    def member_modules(self) -> list[nn.Module]:
        return [self.model]
