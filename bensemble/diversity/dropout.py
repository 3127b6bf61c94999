"""MC dropout as an ensemble (bensemble 0.2's ``MCDropoutEnsembler``)."""

from __future__ import annotations

from torch import nn

from bensemble.core.ensemble import Ensemble

__all__ = ["MCDropoutEnsembler"]


class MCDropoutEnsembler:
    """Builds an implicit ensemble from the dropout modules of a trained network.

    Under a dropout-training and variational interpretation (Gal & Ghahramani, 2016) the
    passes approximate posterior samples; arbitrary inference-time dropout is not automatically a
    posterior. Batch norm stays in eval mode and every flag is restored after sampling.

    Args:
        model: a network with at least one dropout module (any torch dropout kind).
    """

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(
                "MCDropoutEnsembler: `model` must be a torch.nn.Module "
                f"(got {type(model).__name__})"
            )
        self.model = model

    def build_ensemble(
        self, num_samples: int = 30, mask: str = "per_pass", generator=None, **kwargs
    ) -> Ensemble:
        """An :class:`~bensemble.core.ensemble.Ensemble` of ``num_samples`` dropout passes.

        Args:
            num_samples: number of members (forward passes).
            mask: ``"per_pass"`` (one mask per pass, shared by the batch: each member is one
                coherent function) or ``"per_sample"`` (torch's per-row masks).
            generator: ``torch.Generator`` that draws the members (its state advances).
            **kwargs: further options of :class:`~bensemble.core.member.StochasticMembers`,
                e.g. ``seed`` (default 0: identical calls give identical members; ``None``:
                torch's global random state).
        """
        return Ensemble.from_stochastic(
            self.model,
            num_samples=num_samples,
            mode="dropout",
            mask=mask,
            generator=generator,
            **kwargs,
        )
