"""A small, honest training helper for deep ensembles (Lakshminarayanan et al. 2017).

Members share the architecture, the data, the optimiser and the number of epochs; they differ
*only* by their random initialisation and the order in which the training data is visited, as in
the epistemic-calibration paper (appendix B.1.1). Member ``m`` is a deterministic function of two
seeds drawn from the ensemble's generator: one seeds the initialisation (``make_model()`` runs
under a forked, seeded global RNG) and one the shuffling of every epoch (and any stochastic layer,
such as dropout, during its training). The ensemble's predictive is the member average
``p(y | x) = (1/M) sum_m softmax(f_m(x))``. This is a convenience, not a framework: train members
however you like and wrap them with ``Ensemble.from_models``.

Reference: B. Lakshminarayanan, A. Pritzel and C. Blundell (2017), "Simple and scalable predictive
uncertainty estimation using deep ensembles", NeurIPS 30.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.utils.data import Dataset

from bensemble import _progress
from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import (
    MIN_MEMBER_BYTES,
    as_labels,
    check_count,
    check_finite,
    check_generator,
    check_same_length,
    to_tensor,
)
from bensemble.methods._member_training import (
    TrainConfig,
    build_member,
    check_module,
    train_member,
)
from bensemble.methods._parallel import MemberBackend, run_members

__all__ = ["train_model", "train_ensemble"]

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_SEED_HIGH = 2**62


def train_model(
    model: nn.Module,
    data,
    *,
    epochs: int = 20,
    batch_size: int = 32,
    optimizer: OptimizerFactory | None = None,
    loss_fn: LossFn | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
    progress: bool = False,
) -> nn.Module:
    """Train one classifier by minibatch gradient descent; return it in eval mode.

    Args:
        model: the network (trained in place) mapping a batch of inputs to logits ``[B, K]``.
        data: a pair ``(X, y)`` of tensors / arrays (``y`` integer labels ``[N]``) or a torch
            ``Dataset`` of ``(x, y)`` items.
        epochs: passes over the data.
        batch_size: minibatch size (the last batch of an epoch may be smaller).
        optimizer: factory ``params -> torch.optim.Optimizer`` (default Adam, ``lr = 1e-3``).
        loss_fn: ``loss_fn(logits, y) -> scalar`` (default cross-entropy, mean over the batch).
        generator: random source of the data order and of stochastic layers during training
            (its state advances).
        seed: seed of that source when no ``generator`` is given (default 0: identical calls
            train identical networks); ``None``: torch's global random state.
        progress: show a tqdm bar over epochs.

    The global RNG is forked (and restored afterwards), so training draws nothing from it unless
    ``seed=None``.
    """
    fn = "train_model"
    check_module(model, "model", fn)
    g = check_generator(generator, seed, fn)
    config = TrainConfig(fn, epochs, batch_size, optimizer, loss_fn)
    dataset = _as_dataset(data, fn)
    with _progress.progress(
        total=config.epochs, enabled=progress, desc="training", leave=False
    ) as bar:
        train_member(model, dataset, config, _draw_seed(g), bar)
    return model


def train_ensemble(
    make_model: Callable[[], nn.Module],
    data,
    n_members: int = 10,
    epochs: int = 20,
    batch_size: int = 32,
    optimizer: OptimizerFactory | None = None,
    loss_fn: LossFn | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
    progress: bool = True,
    *,
    backend: str | MemberBackend = "sequential",
) -> list[nn.Module]:
    """Train ``n_members`` networks that differ only by initialisation and data order.

    Args:
        make_model: callable with no argument returning a fresh (randomly initialised) network.
        data: a pair ``(X, y)`` of tensors / arrays or a torch ``Dataset`` of ``(x, y)`` items.
        n_members: ensemble size (the paper uses 10).
        epochs, batch_size, optimizer, loss_fn: as in :func:`train_model`.
        generator: random source of the per-member seeds (its state advances).
        seed: seed of the per-member seeds when no ``generator`` is given (default 0: identical
            calls train identical members); ``None``: torch's global random state.
        progress: show a tqdm bar over all members' epochs.
        backend: where members train: ``"sequential"`` (this process), ``"joblib"``, ``"ray"``,
            or a :class:`MemberBackend` that also sets ``n_jobs`` and ``temp_dir``
            (``MemberBackend("ray", n_jobs=4)``). Every backend returns the same members,
            member for member, under the same seeds; the parallel ones train each member with
            one torch thread.

    Returns:
        the trained members, in eval mode.

    Example:
        >>> x, y = torch.randn(30, 2), torch.randint(0, 2, (30,))
        >>> members = train_ensemble(lambda: nn.Linear(2, 2), (x, y), n_members=3, epochs=2,
        ...                          seed=0, progress=False)
        >>> len(members), members[0].training
        (3, False)
    """
    fn = "train_ensemble"
    if not callable(make_model):
        raise ValueError(f"{fn}: `make_model` must be callable (got {type(make_model).__name__})")
    # at least one network per member (MIN_MEMBER_BYTES) before any is built
    n_members = check_count(n_members, "n_members", fn, itemsize=MIN_MEMBER_BYTES)
    g = check_generator(generator, seed, fn)
    config = TrainConfig(fn, epochs, batch_size, optimizer, loss_fn)
    dataset = _as_dataset(data, fn)
    backend = MemberBackend.of(backend, fn)
    seeds = torch.randint(0, _SEED_HIGH, (n_members, 2), generator=g).tolist()
    total = n_members * config.epochs
    with _progress.progress(total=total, enabled=progress, desc="deep ensemble") as bar:
        if backend.name != "sequential":
            return run_members(
                backend.name,
                make_model,
                dataset,
                config,
                seeds,
                n_jobs=backend.n_jobs,
                temp_dir=backend.temp_dir,
                bar=bar,
            )
        return [build_member(make_model, dataset, config, a, b, bar) for a, b in seeds]


def _as_dataset(data, fn: str):
    """``(X, y)`` tensors (validated) or a torch ``Dataset`` passed through."""
    if isinstance(data, Dataset):
        if len(data) == 0:  # type: ignore[arg-type]
            raise ValueError(f"{fn}: `data` must not be empty (got an empty Dataset)")
        return data
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x = to_tensor(data[0], "X", fn)
        if x.ndim == 0 or x.shape[0] == 0:
            raise ValueError(f"{fn}: `X` must be a non-empty batch (got shape {tuple(x.shape)})")
        if x.is_floating_point():
            check_finite(x, "X", fn)
        y = as_labels(data[1], "y", fn)
        check_same_length(fn, X=x, y=y)
        return (x, y)
    raise ValueError(
        f"{fn}: `data` must be a pair (X, y) or a torch Dataset (got {type(data).__name__})"
    )


def _draw_seed(g: torch.Generator | None) -> int:
    return int(torch.randint(0, _SEED_HIGH, (1,), generator=g))
