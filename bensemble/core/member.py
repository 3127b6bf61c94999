"""Member adapters: turn a prediction source into member predictions ``[M, B, *]``.

* :class:`ExplicitMembers` - a list of independent networks (a deep ensemble).
* :class:`~bensemble.core.stochastic_members.StochasticMembers` - one network with random
  forward passes (MC dropout, DropConnect, Bayesian layers); each fixed draw is a member.
* :class:`~bensemble.core.sklearn_members.SklearnMembers` (in its own module) - fitted
  scikit-learn classifiers: the trees of a forest, bagging members, or a list of estimators.

Prediction is side-effect free: every adapter runs its members in eval mode under
:func:`torch.no_grad` (a stochastic adapter switches on only the random layers it samples) and
restores every module's ``training`` flag and the grad mode afterwards, also when a member
raises; BatchNorm running statistics never change. A member output that is not one tensor with
a row per input row, or that holds NaN / infinity (or, with ``output_kind="probs"``, rows off the
probability simplex), is a ``ValueError`` naming the member index.

Unlike bensemble 0.2, adapters have no ``modules`` property (it shadowed
:meth:`torch.nn.Module.modules`); use :attr:`MemberAdapter.member_modules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from bensemble._validation import check_option
from bensemble.core._adapter import OUTPUT_KINDS, MemberAdapter, check_module
from bensemble.core._checks import (
    check_member_stack,
    inference_guard,
    input_rows,
    member_output,
)
from bensemble.core._stochastic import DROPOUT_TYPES
from bensemble.core.stochastic_members import (
    MASK_MODES,
    STOCHASTIC_MODES,
    STRATEGIES,
    StochasticMembers,
)
from bensemble.core.types import MemberPredictions

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


class ExplicitMembers(MemberAdapter):
    """Independent networks, evaluated one after the other in eval mode.

    A Python loop over members is the fastest way on CPU for realistic members; see
    :class:`bensemble.core.ensemble.Ensemble.from_models` for the packed form of tiny MLPs.
    Members left in train mode (straight after a training loop) are predicted in eval mode:
    dropout off, BatchNorm on its running statistics, which never change; their flags are
    restored afterwards.

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
            check_module(model, f"models[{i}]", fn)
        self.output_kind = check_option(output_kind, "output_kind", OUTPUT_KINDS, fn)
        self.models = nn.ModuleList(models)

    def predict_all(self, x: Any) -> MemberPredictions:
        fn = "ExplicitMembers.predict_all"
        rows = input_rows(x)
        with inference_guard(self.models):
            outputs = [member_output(model(x), i, rows, fn) for i, model in enumerate(self.models)]
        first = tuple(outputs[0].shape)
        for i, out in enumerate(outputs):
            if tuple(out.shape) != first:
                raise ValueError(
                    f"{fn}: member {i} must return the same shape as member 0 (got "
                    f"{tuple(out.shape)}, member 0 gave {first})"
                )
        return check_member_stack(torch.stack(outputs), self.output_kind, fn)

    @property
    def size(self) -> int:
        return len(self.models)

    @property
    def member_modules(self) -> list[nn.Module]:
        return list(self.models)
