"""Greedy forward ensemble selection on cached validation predictions (Zaidi et al. 2021).

``ForwardSelect`` builds an ensemble of ``M`` members from a pool of ``P`` trained networks: start
empty, and at each step add the pool member (not yet chosen) that minimises the criterion of the
ensemble so far plus that member. The criterion depends on the members only through their
validation predictions, so each member is run over the validation data **once**: the
predictions are cached in one ``[P, N, *]`` tensor, and every greedy step scores all ``P``
candidates at once from a running sum of the chosen members' predictions (``O(P N K)`` per step,
no forward pass). Targets are read in the same pass as the inputs the members see, so a shuffling
loader cannot misalign them.

A *criterion* is a callable ``criterion(members, val_loader, device) -> float`` (lower is
better; bensemble 0.2 API). The built-in ones (:data:`classification_nll_criterion`,
:data:`regression_mse_criterion`) are :class:`CachedCriterion` objects, which also score cached
predictions; :func:`forward_select` uses that fast path for them and falls back to calling any
other criterion once per candidate and step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from bensemble._validation import (
    check_allocation,
    check_finite,
    check_option,
    check_positive_int,
    to_tensor,
)

__all__ = [
    "CachedCriterion",
    "ValidationSet",
    "classification_nll_criterion",
    "forward_select",
    "regression_mse_criterion",
    "select_on_predictions",
]

#: What :class:`CachedCriterion` averages over members: probabilities or raw outputs.
TRANSFORMS = ("softmax", "identity")
#: Probabilities are floored here in the NLL criterion, so one confidently wrong sample does not
#: make every candidate tie at +inf.
PROB_FLOOR = 1e-12


def _model_device(model: nn.Module, default) -> torch.device:
    param = next(model.parameters(), None)
    if param is not None:
        return param.device
    return torch.device(default) if default is not None else torch.device("cpu")


class ValidationSet:
    """A loader read once: its ``(x, y)`` batches kept in order, targets concatenated.

    Every member is evaluated on the same stored batches, so predictions and targets stay
    paired whatever the loader's sampler does. The inputs are held in memory.
    """

    def __init__(self, val_loader, fn: str = "ValidationSet") -> None:
        if isinstance(val_loader, ValidationSet):
            self.batches, self.targets = val_loader.batches, val_loader.targets
            return
        batches = []
        try:
            iterator = iter(val_loader)
        except TypeError:
            raise ValueError(
                f"{fn}: `val_loader` must be an iterable of (x, y) batches "
                f"(got {type(val_loader).__name__})"
            ) from None
        for i, batch in enumerate(iterator):
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                raise ValueError(
                    f"{fn}: each batch of `val_loader` must be a pair (x, y) "
                    f"(got {type(batch).__name__})"
                )
            x, y = batch[0], to_tensor(batch[1], "y", fn)
            if isinstance(x, np.ndarray):
                x = to_tensor(x, "x", fn)
            for name, t in (("inputs x", x), ("targets y", y)):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    if not bool(torch.isfinite(t).all()):
                        raise ValueError(
                            f"{fn}: `val_loader` must yield finite {name} (got NaN or infinity "
                            f"in batch {i})"
                        )
            if y.ndim == 0:
                raise ValueError(
                    f"{fn}: `val_loader` must yield targets y with one entry per row (got a "
                    f"scalar in batch {i})"
                )
            batches.append((x, y))
        if not batches:
            raise ValueError(f"{fn}: `val_loader` must yield at least one batch (got none)")
        if sum(len(y) for _, y in batches) == 0:
            raise ValueError(f"{fn}: `val_loader` must yield at least one sample (got 0 rows)")
        self.batches = batches
        try:
            self.targets = torch.cat([y for _, y in batches])
        except RuntimeError as exc:
            raise ValueError(
                f"{fn}: `val_loader` must yield targets of one shape and dtype in every batch "
                f"({str(exc).splitlines()[0]})"
            ) from None

    def predict(self, model: nn.Module, transform: str = "identity", device=None) -> torch.Tensor:
        """Outputs ``[N, *]`` of ``model`` (eval mode, no grad; modes restored) in float64 on CPU.

        The model stays on its device; each batch is moved there. ``transform="softmax"``
        applies a softmax over the last axis.
        """
        target = _model_device(model, device)
        flags = [(m, m.training) for m in model.modules()]
        outs = []
        try:
            model.eval()
            with torch.no_grad():
                for x, _ in self.batches:
                    out = model(x.to(target) if isinstance(x, torch.Tensor) else x)
                    if transform == "softmax":
                        out = torch.softmax(out.double(), dim=-1)
                    outs.append(out.detach().to("cpu", torch.float64))
        finally:
            for m, flag in flags:
                m.training = flag
        return torch.cat(outs)


class CachedCriterion:
    """A selection criterion that can also score cached member predictions.

    Args:
        name: the criterion's name (used in messages).
        transform: what is averaged over members: ``"softmax"`` (probabilities) or
            ``"identity"`` (raw outputs).
        score: ``score(combined [C, N, *], targets [N, ...]) -> [C]``, the criterion of ``C``
            candidate ensembles whose averaged predictions are ``combined``.
    """

    def __init__(self, name: str, transform: str, score: Callable) -> None:
        fn = "CachedCriterion"
        if not isinstance(name, str) or not name:
            raise ValueError(f"{fn}: `name` must be a non-empty string (got {name!r})")
        self.transform = check_option(transform, "transform", TRANSFORMS, fn)
        if not callable(score):
            raise ValueError(f"{fn}: `score` must be callable (got {type(score).__name__})")
        self.name = name
        self.score = score
        self.__name__ = name
        self.__doc__ = score.__doc__

    def __call__(self, members: Sequence[nn.Module], val_loader, device=None) -> float:
        """The criterion of the ensemble ``members`` (mean of their transformed outputs)."""
        fn = self.name
        if len(members) == 0:
            raise ValueError(f"{fn}: `members` must hold at least one model (got none)")
        data = ValidationSet(val_loader, fn)
        preds = torch.stack([data.predict(m, self.transform, device) for m in members])
        return float(self.score(preds.mean(dim=0)[None], data.targets)[0])

    def __repr__(self) -> str:
        return f"<criterion {self.name}>"


def _nll_score(combined: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean NLL ``-1/N sum_i log p_{i, y_i}`` of averaged member probabilities, per candidate."""
    fn = "classification_nll_criterion"
    if targets.is_floating_point() or targets.ndim != 1 or targets.shape[0] != combined.shape[1]:
        raise ValueError(
            f"{fn}: the targets must be integer labels [N] matching the {combined.shape[1]} "
            f"predictions (got {targets.dtype} of shape {tuple(targets.shape)})"
        )
    if combined.ndim != 3:
        raise ValueError(
            f"{fn}: the model outputs must be logits [N, K] (got {combined.ndim - 1}-D)"
        )
    labels = targets.long().to(combined.device)
    if int(labels.min()) < 0 or int(labels.max()) >= combined.shape[2]:
        raise ValueError(
            f"{fn}: the labels must lie in [0, {combined.shape[2] - 1}] "
            f"(got values in [{int(labels.min())}, {int(labels.max())}])"
        )
    index = labels[None, :, None].expand(combined.shape[0], -1, 1)
    picked = combined.gather(2, index)[..., 0]
    return -torch.log(picked.clamp_min(PROB_FLOOR)).mean(dim=1)


def _mse_score(combined: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the averaged member outputs (per candidate)."""
    shape = combined.shape[1:]
    if targets.shape != shape:
        if targets.numel() != shape.numel():
            raise ValueError(
                f"regression_mse_criterion: the targets must have one value per model output "
                f"{tuple(shape)} (got shape {tuple(targets.shape)})"
            )
        targets = targets.reshape(shape)  # e.g. [N] targets for [N, 1] outputs
    diff = combined - targets.to(combined.device, torch.float64)[None]
    return diff.pow(2).reshape(combined.shape[0], -1).mean(dim=1)


#: Mean negative log-likelihood of the ensemble's average softmax probabilities (classification).
classification_nll_criterion = CachedCriterion(
    "classification_nll_criterion", "softmax", _nll_score
)
#: Mean squared error of the ensemble's average raw output (regression).
regression_mse_criterion = CachedCriterion("regression_mse_criterion", "identity", _mse_score)


def rank_nan_last(scores: torch.Tensor, nan: torch.Tensor, message: str, stacklevel: int) -> None:
    """Give the scores flagged ``nan`` the worst value, ``+inf``, in place, with a
    ``RuntimeWarning`` ``message.format(count)`` when there are any (``stacklevel`` counted
    from the caller)."""
    if bool(nan.any()):
        warnings.warn(message.format(int(nan.sum())), RuntimeWarning, stacklevel=stacklevel + 1)
    scores[nan] = float("inf")


def _pick(scores: torch.Tensor, taken: torch.Tensor, fn: str, name: str = "pool") -> int:
    """Index of the lowest score among the untaken candidates; NaN ranks last (with a warning)."""
    scores = scores.clone()
    nan = torch.isnan(scores) & ~taken
    if bool(nan[~taken].all()):
        raise ValueError(
            f"{fn}: `{name}` must hold a member with a finite score on the validation data (got "
            "NaN for every remaining candidate; check the pool members' weights and outputs)"
        )
    rank_nan_last(scores, nan, f"{fn}: {{}} candidate(s) scored NaN and were ranked last", 3)
    scores[taken] = float("inf")
    order = torch.argsort(scores, stable=True)
    return int(order[0])


def select_on_predictions(
    member_preds: torch.Tensor,
    targets: torch.Tensor,
    ensemble_size: int,
    criterion: CachedCriterion,
) -> list[int]:
    """Greedy forward selection without replacement on cached predictions.

    Args:
        member_preds: transformed member predictions ``[P, N, *]`` (probabilities for the NLL
            criterion, raw outputs for MSE); a tensor or numpy array. A member whose predictions
            hold NaN scores NaN and is ranked last (with a ``RuntimeWarning``).
        targets: ``[N]`` labels or ``[N, *]`` targets, paired with ``member_preds``.
        ensemble_size: members to choose (``<= P``).
        criterion: a :class:`CachedCriterion`.

    Returns:
        The chosen pool indices in the order chosen. Ties go to the lower index.
    """
    fn = "select_on_predictions"
    if not isinstance(criterion, CachedCriterion):
        raise ValueError(
            f"{fn}: `criterion` must be a CachedCriterion such as classification_nll_criterion "
            f"or regression_mse_criterion (got {type(criterion).__name__})"
        )
    member_preds = to_tensor(member_preds, "member_preds", fn)
    if not member_preds.is_floating_point() or member_preds.ndim < 2 or 0 in member_preds.shape:
        raise ValueError(
            f"{fn}: `member_preds` must be non-empty floating predictions [P, N, *] (got "
            f"{member_preds.dtype} of shape {tuple(member_preds.shape)})"
        )
    targets = to_tensor(targets, "targets", fn)
    if targets.is_floating_point():
        check_finite(targets, "targets", fn)
    if targets.ndim == 0 or targets.shape[0] != member_preds.shape[1]:
        raise ValueError(
            f"{fn}: `targets` must have one entry per prediction, {member_preds.shape[1]} "
            f"(got shape {tuple(targets.shape)})"
        )
    n_pool = member_preds.shape[0]
    # float64 copies: the predictions, the running sum and each step's [P, N, *] candidates
    check_allocation(fn, "member_preds", member_preds.numel(), per_count=3, itemsize=8)
    ensemble_size = check_positive_int(ensemble_size, "ensemble_size", fn)
    if ensemble_size > n_pool:
        raise ValueError(
            f"{fn}: `ensemble_size` must be at most the pool size {n_pool} (got {ensemble_size})"
        )
    preds = member_preds.to(torch.float64)
    running = torch.zeros_like(preds[0])
    taken = torch.zeros(n_pool, dtype=torch.bool)
    chosen: list[int] = []
    for step in range(ensemble_size):
        combined = (running[None] + preds) / (step + 1)
        best = _pick(criterion.score(combined, targets).cpu(), taken, fn, "member_preds")
        chosen.append(best)
        taken[best] = True
        running = running + preds[best]
    return chosen


def forward_select(
    pool: Sequence[nn.Module],
    val_loader,
    ensemble_size: int,
    device=None,
    criterion: Callable | None = None,
) -> list[nn.Module]:
    """Greedy forward stepwise selection without replacement (Zaidi et al. 2021, Algorithm 3).

    Args:
        pool: trained networks (never moved to another device; each batch goes to the model).
        val_loader: ``(x, y)`` batches; read once.
        ensemble_size: members to choose (``<= len(pool)``).
        device: device for models without parameters (bensemble 0.2 argument).
        criterion: lower-is-better ``criterion(members, val_loader, device)``; default
            :data:`classification_nll_criterion`. A :class:`CachedCriterion` selects on cached
            predictions; any other callable is called once per candidate and step, with the
            batches of one pass over ``val_loader`` (a list of ``(x, y)``) in its place, so every
            call sees the same samples in the same order.

    Returns:
        The chosen members, in the order chosen.
    """
    fn = "forward_select"
    pool = list(pool)
    if not pool or not all(isinstance(m, nn.Module) for m in pool):
        raise ValueError(f"{fn}: `pool` must be a non-empty list of nn.Module")
    ensemble_size = check_positive_int(ensemble_size, "ensemble_size", fn)
    if ensemble_size > len(pool):
        raise ValueError(
            f"{fn}: `ensemble_size` must be at most the pool size {len(pool)} (got {ensemble_size})"
        )
    criterion = classification_nll_criterion if criterion is None else criterion
    if not callable(criterion):
        raise ValueError(f"{fn}: `criterion` must be callable (got {type(criterion).__name__})")
    if isinstance(criterion, CachedCriterion):
        data = ValidationSet(val_loader, fn)
        preds = torch.stack([data.predict(m, criterion.transform, device) for m in pool])
        return [
            pool[i] for i in select_on_predictions(preds, data.targets, ensemble_size, criterion)
        ]
    data = ValidationSet(val_loader, fn)  # one pass, replayed for every call
    chosen: list[int] = []
    taken = torch.zeros(len(pool), dtype=torch.bool)
    for _ in range(ensemble_size):
        scores = torch.full((len(pool),), float("inf"), dtype=torch.float64)
        for i, candidate in enumerate(pool):
            if not taken[i]:
                members = [pool[j] for j in chosen] + [candidate]
                scores[i] = float(criterion(members, data.batches, device))
        best = _pick(scores, taken, fn)
        chosen.append(best)
        taken[best] = True
    return [pool[i] for i in chosen]
