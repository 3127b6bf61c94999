"""The :class:`Ensemble`: member predictions from any source, combined.

An ensemble does not care where its members come from: explicit networks (a deep ensemble),
random forward passes of one network (MC dropout, DropConnect), draws from a posterior
approximation, or the trees of a scikit-learn forest. Every source goes through a
:class:`~bensemble.core.member.MemberAdapter` and yields raw member outputs ``[M, B, *]``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from bensemble._validation import check_option, check_positive_int
from bensemble.core.member import ExplicitMembers, MemberAdapter, StochasticMembers
from bensemble.core.packed import PACKED_OPTIONS, PackedMembers, packable
from bensemble.core.sklearn_members import SklearnMembers
from bensemble.core.types import MemberPredictions, PosteriorSource, Predictions

__all__ = ["Ensemble"]


class Ensemble(nn.Module):
    """A collection of predictors whose outputs are combined.

    Members are predicted under :func:`torch.no_grad` (as in bensemble 0.2): the ensemble is an
    inference object; train its members directly.

    Args:
        members: a :class:`~bensemble.core.member.MemberAdapter` (or a list of ``nn.Module``,
            wrapped in :class:`~bensemble.core.member.ExplicitMembers`).
        combiner: maps raw member outputs ``[M, B, *]`` to one prediction ``[B, *]``; default
            ``None`` is the mean over members of the raw outputs (bensemble 0.2's forward). Use a
            module-level function or an ``nn.Module`` (a lambda cannot be pickled by
            :func:`torch.save`).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> members = [nn.Linear(4, 3) for _ in range(5)]
        >>> ens = Ensemble.from_models(members)
        >>> x = torch.randn(8, 4)
        >>> ens.predict_members(x).shape, ens.predict_proba(x).shape
        (torch.Size([5, 8, 3]), torch.Size([8, 3]))
    """

    def __init__(
        self,
        members: MemberAdapter | Sequence[nn.Module],
        combiner: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(members, (list, tuple, nn.ModuleList)):
            members = ExplicitMembers(members)
        if not isinstance(members, MemberAdapter):
            raise ValueError(
                "Ensemble: `members` must be a MemberAdapter or a list of nn.Module "
                f"(got {type(members).__name__})"
            )
        if combiner is not None and not callable(combiner):
            raise ValueError(
                f"Ensemble: `combiner` must be callable or None (got {type(combiner).__name__})"
            )
        self.members = members
        self.combiner = combiner

    # ------------------------------------------------------------------ predictions
    def predict_members(self, x: Any) -> MemberPredictions:
        """Raw member outputs ``[M, B, *]`` (logits for networks, probabilities for trees)."""
        return self.members.predict_all(x)

    def predict_member_probs(self, x: Any) -> torch.Tensor:
        """Member probabilities ``[M, B, K]``: softmax of logits; probabilities as they are."""
        preds = self.predict_members(x)
        return preds.softmax(dim=-1) if self.members.output_kind == "logits" else preds

    def forward(self, x: Any) -> Predictions:
        """The combined raw prediction ``[B, *]`` (default: mean of the raw member outputs)."""
        preds = self.predict_members(x)
        if self.combiner is None:
            return preds.mean(dim=0)
        return self.combiner(preds)

    def predict_proba(self, x: Any) -> torch.Tensor:
        """The Bayesian model average ``[B, K]``: the mean over members of their probabilities.

        ``p(y | x) = (1/M) sum_m p_m(y | x)``; not the softmax of the mean logits.
        """
        return self.predict_member_probs(x).mean(dim=0)

    def sample_masks(self) -> contextlib.AbstractContextManager:
        """Keep the same members for every call inside the context (see
        :meth:`bensemble.core.member.StochasticMembers.sample_masks`); a no-op for fixed members.
        """
        return self.members.sample_masks()

    # ------------------------------------------------------------------ properties
    @property
    def num_members(self) -> int:
        """Number of members ``M``."""
        return self.members.size

    @property
    def member_modules(self) -> list[nn.Module]:
        """The underlying networks (for KL terms, parameters, devices)."""
        return self.members.member_modules

    @property
    def output_kind(self) -> str:
        """``"logits"`` or ``"probs"``: what :meth:`predict_members` returns."""
        return self.members.output_kind

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_models(
        cls, models: Sequence[nn.Module], output_kind: str = "logits", packed: Any = "auto"
    ) -> Ensemble:
        """An explicit ensemble of independent networks (e.g. a deep ensemble).

        Args:
            models: the member networks.
            output_kind: ``"logits"`` or ``"probs"``.
            packed: ``"auto"`` (default) evaluates tiny ``nn.Sequential`` Linear / activation
                members of one architecture together (:class:`~bensemble.core.packed.
                PackedMembers`, chosen per call by a size rule) and loops otherwise; ``True``
                requires packable members; ``False`` always loops (bensemble 0.2). Packed and
                looped outputs agree up to float rounding (about 1e-7 in float32).
        """
        packed = check_option(packed, "packed", PACKED_OPTIONS, "Ensemble.from_models")
        models = list(models) if not isinstance(models, nn.Module) else models
        if packed is True or (
            packed == "auto" and not isinstance(models, nn.Module) and packable(models)
        ):
            return cls(members=PackedMembers(models, output_kind=output_kind, packed=packed))
        return cls(members=ExplicitMembers(models, output_kind=output_kind))

    @classmethod
    def from_stochastic(
        cls,
        model: nn.Module,
        num_samples: int = 30,
        mode: str = "auto",
        mask: str = "per_pass",
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> Ensemble:
        """An implicit ensemble: ``num_samples`` random forward passes of one network.

        See :class:`~bensemble.core.member.StochasticMembers` for ``mode``, ``mask``,
        ``generator`` and the keyword options (``trunk``, ``head``, ``strategy``, ...).
        """
        return cls(
            members=StochasticMembers(
                model, num_samples=num_samples, mode=mode, mask=mask, generator=generator, **kwargs
            )
        )

    @classmethod
    def from_posterior(
        cls, source: PosteriorSource, n_members: int = 10, **kwargs: Any
    ) -> Ensemble:
        """An explicit ensemble of ``n_members`` networks sampled by ``source.sample_models``."""
        fn = "Ensemble.from_posterior"
        if not isinstance(source, PosteriorSource):
            raise ValueError(
                f"{fn}: `source` must have a sample_models(n_models) method "
                f"(got {type(source).__name__})"
            )
        n_members = check_positive_int(n_members, "n_members", fn)
        models = source.sample_models(n_members, **kwargs)
        return cls(members=ExplicitMembers(models))

    @classmethod
    def from_sklearn(cls, estimator: Any) -> Ensemble:
        """Members are the sub-estimators of a fitted scikit-learn forest or bagging classifier.

        See :class:`~bensemble.core.sklearn_members.SklearnMembers`; members give probabilities.
        """
        return cls(members=SklearnMembers(estimator))
