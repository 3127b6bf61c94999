""":class:`StochasticMembers`: the fixed hypotheses of one random network (MC dropout, ...).

Also importable from :mod:`bensemble.core.member` (bensemble 0.2's path).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from bensemble._seeds import DEFAULT_SEED, is_default_seed
from bensemble._validation import (
    check_allocation,
    check_count,
    check_generator,
    check_option,
    check_positive_int,
)
from bensemble.core._adapter import OUTPUT_KINDS, check_module
from bensemble.core._checks import all_modules, check_member_stack, input_rows, member_output
from bensemble.core._member_seeds import SeededMembers
from bensemble.core._stochastic import (
    DEGENERATE_MESSAGE,
    SamplingSession,
    draw_seeds,
    is_active,
    kinds_present,
    pass_generators,
    resolved_mode,
    stochastic_kind,
)
from bensemble.core.types import MemberPredictions
from bensemble.layers.base import StochasticLayer

__all__ = ["StochasticMembers", "STOCHASTIC_MODES", "MASK_MODES", "STRATEGIES"]

#: Modes of :class:`StochasticMembers` (``"both"`` is bensemble 0.2's bayesian + dropout).
STOCHASTIC_MODES = ("auto", "dropout", "dropconnect", "bayesian", "both", "all")
#: Dropout masks: one per forward pass (shared by the batch) or one per row.
MASK_MODES = ("per_pass", "per_sample")
#: How :class:`StochasticMembers` runs its passes.
STRATEGIES = ("loop", "repeat")
# Memory one member holds besides its outputs: its seed, its torch.Generator (~5 KB of CPU
# state) and the saved state that resets it on every call (5,056 bytes).
_BYTES_PER_MEMBER = 12_000
# Rows per forward pass when strategy="repeat" picks its own chunk size.
_REPEAT_MAX_ROWS = 4096


class StochasticMembers(SeededMembers):
    """One network whose fixed random draws are the members (MC dropout, DropConnect, ...).

    **Members are fixed hypotheses.** At construction ``num_samples`` per-member seeds are drawn
    from ``generator``, else from ``seed`` (default 0: ensembles built alike have the same
    members), else (``seed=None``) from torch's global random state. Member ``m`` draws all its
    noise (dropout and DropConnect masks, Bayesian weight samples) from its own seed on every
    call, with shapes free of the batch axis: the same function of ``x`` whatever the batch size
    or a row's position, until :meth:`resample` (batched and one-shot outputs agree up to the
    rounding batch size causes in matrix products). A dropout mask has the shape of one row
    (``[1, *features]``): pad inputs whose non-batch shape varies to one length.

    Sampling puts every module in eval mode (batch norm uses its running statistics, which never
    change), switches on only the selected stochastic modules, runs ``num_samples`` passes and
    restores every module's own flags in ``finally`` (also when the forward raises).

    Stochastic kinds:

    * ``"dropout"`` - every torch dropout module: ``Dropout``, ``Dropout1d/2d/3d``,
      ``AlphaDropout``, ``FeatureAlphaDropout``, and functional dropout calls
      (``F.dropout``, ``F.dropout1d/2d/3d``, ``F.alpha_dropout``, ``F.feature_alpha_dropout``)
      made in ``forward``, each switched on with its ``p`` whatever its ``training`` argument;
      a model with only functional dropout needs ``mode="dropout"`` (it cannot be seen before a
      forward pass);
    * any :class:`~bensemble.layers.StochasticLayer` by its ``stochastic_kind``
      (``"dropconnect"`` for :class:`~bensemble.layers.DropConnectLinear`, ``"bayesian"`` for
      variational layers), switched on through its ``force_sample`` flag.

    Modes: ``"auto"`` switches on every kind the model has and is then replaced by what it found
    (``"dropout"``, ``"dropconnect"``, ``"bayesian"``, ``"both"`` for bayesian + dropout, or
    ``"all"``), as bensemble 0.2 reports it; ``"all"`` switches on every kind; ``"dropout"``,
    ``"dropconnect"`` and ``"bayesian"`` one kind; ``"both"`` bayesian and dropout. Degenerate
    ensembles are errors, since they would return ``M`` identical copies of one prediction: a
    mode that finds nothing to switch on, selected modules that are all inactive (dropout with
    ``p`` 0 or 1, DropConnect with ``p = 0``, Bayesian layers whose every ``sigma`` is 0), or a
    forward pass that calls none of them.

    Masks: with ``mask="per_pass"`` (default) each dropout module draws **one** mask per member
    (shape ``[1, *features]``, or ``[1, C, 1, ...]`` for channel dropout), shared by every row.
    ``mask="per_sample"`` is torch's usual dropout, an independent mask per row: an explicit
    opt-in that is **not** coherent (a row's noise depends on the batch it is in, so member ``m``
    is not one function and batched predictions mix hypotheses; epistemic metrics of such members
    are not meaningful). With ``seed=None`` and no ``generator`` it uses torch's own kernel and
    global random state (fresh noise on every call); otherwise the per-row masks are drawn from
    the members' seeds (reproducible). Stochastic layers always use one weight draw per
    member.

    Speed: for an ``nn.Sequential`` model the deterministic prefix (every layer before the first
    stochastic one) is computed once per call and only the rest is sampled (``reuse_prefix``);
    other models can give the split as ``trunk`` and ``head`` with ``model(x) ==
    head(trunk(x))``. ``strategy="repeat"`` evaluates several members per forward pass by stacking
    ``chunk_size`` copies of the batch (helps on GPUs; slower than the loop on CPUs). Outputs are
    the same in every case (bit-identical for the prefix; up to float rounding for "repeat").

    Args:
        model: the network.
        num_samples: number of members ``M``.
        mode: which stochastic kinds to switch on (see above).
        mask: ``"per_pass"`` or ``"per_sample"`` dropout masks.
        generator: source of the per-member seeds (a stream :meth:`resample` continues).
        seed: their seed without ``generator`` (default 0; ``None``: torch's global state).
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
        seed: int | None = DEFAULT_SEED,
        output_kind: str = "logits",
        trunk: nn.Module | None = None,
        head: nn.Module | None = None,
        reuse_prefix: bool = True,
        strategy: str = "loop",
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        fn = "StochasticMembers"
        self.model = check_module(model, "model", fn)
        self.num_samples = check_count(num_samples, "num_samples", fn, itemsize=_BYTES_PER_MEMBER)
        self.mode = check_option(mode, "mode", STOCHASTIC_MODES, fn)
        self.mask = check_option(mask, "mask", MASK_MODES, fn)
        self.generator = check_generator(generator, seed, fn)
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
        self.trunk = None if trunk is None else check_module(trunk, "trunk", fn)
        self.head = None if head is None else check_module(head, "head", fn)
        self.kinds = self._resolve_kinds()
        if self.mode == "auto":
            self.mode = resolved_mode(set(self.kinds))
        # None: not known yet whether forward calls functional dropout (found on the first call)
        self._functional_dropout: bool | None = None if "dropout" in self.kinds else False
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
        self._check_active(fn)
        # per_sample with seed=None is torch's own dropout: fresh noise on every call
        self._fresh = self.mask == "per_sample" and self.generator is None
        self._seeds = None if self._fresh else draw_seeds(self.num_samples, self.generator)

    # ------------------------------------------------------------------ set-up helpers
    def _all_modules(self) -> list[nn.Module]:
        return all_modules(r for r in (self.model, self.trunk, self.head) if r is not None)

    def _resolve_kinds(self) -> tuple[str, ...]:
        fn = "StochasticMembers"
        present = kinds_present(self._all_modules())
        if self.mode in ("auto", "all"):
            kinds = present
        elif self.mode == "both":
            kinds = present & {"bayesian", "dropout"}
        elif self.mode == "dropout":
            kinds = {"dropout"}  # functional dropout is found on the first forward pass
        else:
            kinds = present & {self.mode}
        if not kinds:
            found = sorted(present) if present else "none"
            raise ValueError(
                f"{fn}: `model` must contain a stochastic layer for mode={self.mode!r} "
                f"(dropout modules, DropConnect or Bayesian layers; found kinds: {found}; "
                f"functional dropout needs mode='dropout'); {DEGENERATE_MESSAGE}"
            )
        return tuple(sorted(kinds))

    def _check_active(self, fn: str) -> None:
        """Refuse selected stochastic modules that are all inactive (a degenerate ensemble)."""
        modules = [m for m in self._all_modules() if stochastic_kind(m) in self.kinds]
        if not modules:
            return  # mode="dropout" without modules: checked on the first forward pass
        if any(is_active(m) for m in modules):
            return
        names = sorted({f"{type(m).__name__}(p={getattr(m, 'p', '?')})" for m in modules})
        raise ValueError(
            f"{fn}: `model` must have an active stochastic layer (got only inactive ones: "
            f"{', '.join(names)}); {DEGENERATE_MESSAGE}"
        )

    def _split(self) -> tuple[nn.Module | None, nn.Module]:
        """``(trunk, head)`` with ``model(x) == head(trunk(x))``; trunk ``None`` if no prefix."""
        if getattr(self, "_whole_model", False):
            return None, self.model
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

    # ------------------------------------------------------------------ hypotheses
    @property
    def seeds(self) -> list[int]:
        """The per-member seeds: member ``m`` draws all its noise from ``seeds[m]`` (empty for
        ``mask="per_sample"`` without a generator, which draws fresh noise on every call)."""
        return list(self._seeds or [])

    def resample(
        self, generator: torch.Generator | None = None, *, seed: int | None = DEFAULT_SEED
    ) -> StochasticMembers:
        """Draw ``M`` new members (new per-member seeds); returns ``self``.

        Args:
            generator: source of the new seeds.
            seed: the same seed gives the same members; ``None``: torch's global random state.
                Left at its default (with no ``generator``), the new seeds continue the stream
                the construction started (its ``generator``, or the one its ``seed`` seeded):
                each call gives new members, and a program making the same calls gets the same
                ones.
        """
        fn = "StochasticMembers.resample"
        if generator is None and is_default_seed(seed):
            gen = self.generator
        else:
            gen = check_generator(generator, seed, fn)
        if gen is not None and self._fresh:
            self.generator, self._fresh = gen, False  # reproducible per-row masks from now on
        if not self._fresh:
            self._seeds = draw_seeds(self.num_samples, gen)
        return self

    @contextlib.contextmanager
    def sample_masks(self) -> Iterator[StochasticMembers]:
        """bensemble 0.2 compatibility: the members inside the context are the same.

        Members are fixed hypotheses on every call anyway (see :meth:`resample`), so this
        changes nothing; it still refuses ``mask="per_sample"``, whose members depend on the
        batch.
        """
        if self.mask != "per_pass":
            raise ValueError(
                "StochasticMembers.sample_masks: `mask` must be 'per_pass' to freeze members "
                f"(got {self.mask!r}: per-row masks depend on the batch)"
            )
        yield self

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def predict_all(self, x: Any) -> MemberPredictions:
        fn = "StochasticMembers.predict_all"
        per_pass = self.mask == "per_pass"
        # torch's own per-row dropout when no generator asks for reproducible masks
        native = not per_pass and self.generator is None
        session = SamplingSession(
            self._all_modules(),
            self.kinds,
            per_pass=per_pass,
            native_dropout=native,
            functional=self._functional_dropout is not False and not native,
        )
        if native and not session.layers:
            # Only torch's dropout draws noise: leave the global random stream untouched by seeds
            # (so results match a plain loop of train-mode dropout under torch.manual_seed).
            gens: list[torch.Generator | None] = [None] * self.num_samples
        else:
            seeds = self._seeds or draw_seeds(self.num_samples, None)
            gens = self._generators(seeds, self._noise_device(x))
        with session:
            trunk, head = self._split()
            h = x
            if trunk is not None:
                # the prefix must be deterministic: functional dropout in it (seen only now)
                # means the whole model is sampled instead; a throwaway stream keeps the
                # members' streams and torch's global state untouched
                if session.functional:
                    session.set_generators(pass_generators([0], self._noise_device(x)))
                h = trunk(x)
                if session.functional_calls:
                    session.functional_calls = session.noise_draws = 0
                    trunk, head, h = None, self.model, x
                    self._whole_model = True  # no prefix from now on
            rows = input_rows(x)
            if self.strategy == "loop":
                outputs = []
                for m, g in enumerate(gens):
                    session.set_generators([g])
                    outputs.append(member_output(head(h), m, rows, fn))
                    if m == 0:
                        self._after_first_pass(session, native, fn)
                        _check_stack(outputs[0], self.num_samples, fn)
                preds = torch.stack(outputs)
            else:
                preds = self._predict_repeat(session, head, h, gens, native, fn)
        return check_member_stack(preds, self.output_kind, fn)

    def _after_first_pass(self, session: SamplingSession, native: bool, fn: str) -> None:
        if session.functional:
            self._functional_dropout = session.functional_calls > 0
        if not native and session.noise_draws == 0:
            raise ValueError(
                f"{fn}: `model` must call an active stochastic layer in forward (mode="
                f"{self.mode!r} found {list(self.kinds)} but the forward pass drew no noise); "
                f"{DEGENERATE_MESSAGE}"
            )

    def _predict_repeat(
        self,
        session: SamplingSession,
        head: nn.Module,
        h: Any,
        gens: list[torch.Generator | None],
        native: bool,
        fn: str,
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
            out = member_output(head(h.repeat(len(part), *([1] * (h.ndim - 1)))), start, None, fn)
            if start == 0:
                self._after_first_pass(session, native, fn)
                _check_stack(out[: out.shape[0] // len(part)], self.num_samples, fn)
            outputs.append(out.reshape(len(part), rows, *out.shape[1:]))
        return torch.cat(outputs)

    @property
    def size(self) -> int:
        return self.num_samples

    @property
    def member_modules(self) -> list[nn.Module]:
        return [self.model]


def _check_stack(first: torch.Tensor, num_samples: int, fn: str) -> None:
    """The ``[M, B, *]`` stack of ``num_samples`` outputs like ``first`` must fit in memory."""
    check_allocation(
        fn, "num_samples", num_samples, per_count=2 * first.numel(), itemsize=first.element_size()
    )  # the outputs and their stack
