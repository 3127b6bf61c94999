"""One deep-ensemble member, trained from its two seeds (see `methods.deep_ensemble`).

Member ``m`` is a pure function of ``(make_model, data, config, init_seed, order_seed)``: the
initialisation runs under torch's global RNG forked and seeded with ``init_seed``, the epochs visit
the data in the order drawn from ``order_seed``. The sequential loop of
:func:`~bensemble.methods.train_ensemble` and the worker processes of
:mod:`bensemble.methods._parallel` both build members here, so every backend returns the same
members.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader

from bensemble._validation import check_positive_int
from bensemble.core._adapter import check_module

__all__ = ["TrainConfig", "build_member", "check_module", "forked_rng", "NullBar", "train_member"]

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)


def build_member(make_model, dataset, config, init_seed: int, order_seed: int, bar) -> nn.Module:
    """Member ``(init_seed, order_seed)``: a pure function of its seeds (any process)."""
    with forked_rng(init_seed):
        model = make_model()
    check_module(model, "make_model()", config.fn)
    train_member(model, dataset, config, order_seed, bar)
    return model


class NullBar:
    """A progress bar that shows nothing (for workers)."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **kwargs) -> None:
        pass


class TrainConfig:
    """Validated training hyper-parameters shared by the two entry points."""

    def __init__(self, fn, epochs, batch_size, optimizer, loss_fn) -> None:
        self.epochs = check_positive_int(epochs, "epochs", fn)
        self.batch_size = check_positive_int(batch_size, "batch_size", fn)
        if optimizer is not None and not callable(optimizer):
            raise ValueError(
                f"{fn}: `optimizer` must be a factory params -> Optimizer (got {optimizer!r:.60})"
            )
        if loss_fn is not None and not callable(loss_fn):
            raise ValueError(f"{fn}: `loss_fn` must be callable (got {loss_fn!r:.60})")
        self.optimizer = optimizer or _default_optimizer
        self.loss_fn = loss_fn or nn.functional.cross_entropy
        self.fn = fn


def train_member(model: nn.Module, dataset, config: TrainConfig, seed: int, bar) -> None:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{config.fn}: the model must have trainable parameters (got none)")
    opt = config.optimizer(params)
    if not isinstance(opt, torch.optim.Optimizer):
        raise ValueError(
            f"{config.fn}: `optimizer` must return a torch.optim.Optimizer "
            f"(got {type(opt).__name__})"
        )
    reference = params[0]
    order = torch.Generator().manual_seed(seed)
    with forked_rng(seed ^ 0x5EED):
        model.train()
        try:
            for _ in range(config.epochs):
                total, count = 0.0, 0
                for xb, yb in _batches(dataset, config.batch_size, order):
                    if xb.is_floating_point():
                        xb = xb.to(device=reference.device, dtype=reference.dtype)
                    else:
                        xb = xb.to(reference.device)
                    yb = yb.to(reference.device)
                    opt.zero_grad(set_to_none=True)
                    loss = config.loss_fn(model(xb), yb)
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * int(yb.shape[0])
                    count += int(yb.shape[0])
                bar.update(1)
                bar.set_postfix(loss=f"{total / max(count, 1):.4f}")
        finally:
            model.eval()


def _batches(dataset, batch_size: int, order: torch.Generator) -> Iterator[tuple]:
    if isinstance(dataset, tuple):
        x, y = dataset
        perm = torch.randperm(x.shape[0], generator=order)
        for idx in perm.split(batch_size):
            yield x[idx], y[idx]
        return
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=order)
    for batch in loader:
        yield batch[0], batch[1]


@contextlib.contextmanager
def forked_rng(seed: int):
    """Run a block under torch's global RNG seeded with ``seed``; restore the state afterwards."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    devices = list(range(torch.cuda.device_count())) if cuda else []
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)
        if cuda:  # seed CUDA only where its state is forked (restored) as well
            torch.cuda.manual_seed_all(seed)
        yield
