"""The linearised (GLM) predictive of the K-FAC Laplace approximation, chunk by chunk.

Linearised around the trained weights, ``f(x; theta) ~= f(x; theta*) + J(x) (theta - theta*)``,
the outputs are Gaussian under the posterior with covariance ``sum_l J_l Sigma_l J_l^T`` (one
term per layer, the layers being independent). :func:`linearise` computes, for a chunk of rows,
the outputs and each layer's Jacobian in its Kronecker eigenbasis; :func:`output_covariance`
turns those into ``[B, K, K]`` for any precision eigenvalues, so a prior-precision search
forms the Jacobians once and scores every candidate on them. :func:`linearised_chunks` sizes the
chunks so that their temporaries stay near :data:`ROW_BUDGET` elements.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from bensemble._validation import check_finite, check_same_length, to_tensor
from bensemble.core._inputs import iter_batches
from bensemble.methods._kfac_curvature import as_outputs, to_model
from bensemble.methods._kronecker import (
    KroneckerFactor,
    LinearTaps,
    inference_mode,
    load_layers,
    probit_predictive,
)
from bensemble.methods._laplace_checks import check_finite_outputs, check_targets

__all__ = [
    "ROW_BUDGET",
    "LinearisedChunk",
    "linearise",
    "linearised_chunks",
    "output_covariance",
    "predictive_nll",
    "point_nll",
    "nll_curve",
    "predict",
]

#: Elements (float64) of the temporaries of one chunk of the linearised predictive.
ROW_BUDGET = 2**24
_FIRST_ROWS = 16
_MAX_ROWS = 1024


@dataclass
class LinearisedChunk:
    """Outputs ``[B, K]`` (float64) and each layer's projected Jacobian for one chunk."""

    outputs: torch.Tensor
    projections: dict[str, tuple[torch.Tensor, ...]]
    elements_per_row: int


def linearise(
    model: nn.Module,
    layers: list[tuple[str, nn.Module]],
    factors: dict[str, KroneckerFactor],
    x: Any,
    likelihood: str,
    fn: str,
    name: str = "x",
) -> LinearisedChunk:
    """Outputs and projected Jacobians of one chunk (eval mode, flags restored afterwards)."""
    with inference_mode(model), LinearTaps(layers) as taps, torch.enable_grad():
        out = as_outputs(model(to_model(x, model)), likelihood, fn)
        check_finite_outputs(out, name, fn)
        n, k = out.shape
        names = [layer for layer in taps.called() if layer in factors]
        eye = torch.eye(k, dtype=torch.float64, device=out.device).expand(n, k, k)
        grads = taps.backprop(out, eye, names)
        projections, elements = {}, 0
        for layer in names:
            factor = factors[layer]
            a = taps.per_example(layer, n, factor.has_bias)
            projections[layer] = factor.project(grads[layer], a)
            elements += grads[layer].numel() + a.numel()
            elements += sum(p.numel() for p in projections[layer])
    return LinearisedChunk(out.detach().double(), projections, elements // max(n, 1))


def linearised_chunks(x: Any, work) -> Iterator[LinearisedChunk]:
    """``work(chunk)`` over row chunks of one batch ``x``: 16 rows first, then as many as
    :data:`ROW_BUDGET` allows (at most 1024); a mapping is one chunk."""
    if isinstance(x, Mapping):
        yield work(x)
        return
    start, rows = 0, _FIRST_ROWS
    while start < x.shape[0]:
        chunk = work(x[start : start + rows])
        yield chunk
        start += rows
        rows = max(1, min(_MAX_ROWS, ROW_BUDGET // max(chunk.elements_per_row, 1)))


def output_covariance(
    chunk: LinearisedChunk, factors: dict[str, KroneckerFactor], eigs: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Covariance ``[B, K, K]`` of the linearised outputs for precision eigenvalues ``eigs``."""
    n, k = chunk.outputs.shape
    cov = torch.zeros(n, k, k, dtype=torch.float64, device=chunk.outputs.device)
    for layer, projection in chunk.projections.items():
        cov = cov + factors[layer].projected_covariance(projection, eigs[layer])
    return cov


def predictive_nll(
    mean: torch.Tensor, cov: torch.Tensor, target: torch.Tensor, likelihood: str, noise_var: float
) -> float:
    """Summed NLL (nats) of the linearised predictive: probit for classification (``target``
    labels ``[B]``), Gaussian ``N(mean, diag(cov) + noise_var)`` for regression (``[B, K]``)."""
    if likelihood == "classification":
        probs = probit_predictive(mean, cov)[torch.arange(target.shape[0]), target]
        return -float(torch.log(probs.clamp_min(torch.finfo(torch.float64).tiny)).sum())
    var = torch.diagonal(cov, dim1=1, dim2=2) + noise_var
    return float(0.5 * (torch.log(2 * math.pi * var) + (target - mean) ** 2 / var).sum())


def point_nll(mean: torch.Tensor, target: torch.Tensor, likelihood: str, noise_var: float) -> float:
    """Summed NLL of the trained network itself (softmax, or Gaussian with ``noise_var``)."""
    if likelihood == "classification":
        return float(torch.nn.functional.cross_entropy(mean, target, reduction="sum"))
    residual = float(((target - mean) ** 2).sum())
    return 0.5 * (target.numel() * math.log(2 * math.pi * noise_var) + residual / noise_var)


def _work(approx, fn: str, name: str):
    def work(chunk):
        return linearise(
            approx.model, approx.layers, approx.factors_, chunk, approx.likelihood, fn, name
        )

    return work


def _checked_input(x: Any, name: str, fn: str) -> Any:
    if isinstance(x, Mapping):
        return x
    x = check_finite(to_tensor(x, name, fn), name, fn)
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(f"{fn}: `{name}` must be a non-empty batch (got shape {tuple(x.shape)})")
    return x


def nll_curve(approx, pairs, deltas, fn: str, name: str) -> tuple[np.ndarray, float, int]:
    """Summed NLL of ``approx``'s linearised predictive for each prior precision ``[G]``, of
    the network itself, and the number of points, over the ``(x, y)`` batches ``pairs``.

    The Jacobians are formed once per chunk and scored for every ``delta``.
    """
    totals, map_total, n = np.zeros(len(deltas)), 0.0, 0
    likelihood, noise_var = approx.likelihood, approx._noise_var
    for x, y in pairs:
        x = _checked_input(x, name, fn)
        y = to_tensor(y, "y", fn)
        if not isinstance(x, Mapping):
            check_same_length(fn, x=x, y=y)
        start = 0
        for chunk in linearised_chunks(x, _work(approx, fn, name)):
            mean = chunk.outputs
            target = check_targets(y[start : start + mean.shape[0]], mean, likelihood, fn)
            start += mean.shape[0]
            map_total += point_nll(mean, target, likelihood, noise_var)
            for g, delta in enumerate(deltas):
                cov = output_covariance(chunk, approx.factors_, approx._eigs(float(delta)))
                totals[g] += predictive_nll(mean, cov, target, likelihood, noise_var)
            n += mean.shape[0]
    return totals, map_total, n


def predict(approx, x: Any, n_samples: int | None, generator, fn: str):
    """``approx.predictive``: linearised (``n_samples=None``) or over sampled networks."""
    if n_samples is not None:
        draws = approx.sample_parameters(n_samples, generator=generator)
        member = copy.deepcopy(approx.model).eval()  # one copy, reloaded per draw
    means, variances = [], []
    for xb, _ in iter_batches(x, fn):
        xb = _checked_input(xb, "x", fn)
        if n_samples is None:
            for chunk in linearised_chunks(xb, _work(approx, fn, "x")):
                cov = output_covariance(chunk, approx.factors_, approx._eig)
                means.append(chunk.outputs)
                variances.append(cov)
            continue
        outs = []
        with torch.no_grad():
            for s in range(n_samples):
                load_layers(member, {name: theta[s] for name, theta in draws.items()})
                out = as_outputs(member(to_model(xb, member)), approx.likelihood, fn).double()
                check_finite_outputs(out, "x", fn)
                outs.append(out)
        stack = torch.stack(outs)
        if approx.likelihood == "classification":
            means.append(torch.softmax(stack, dim=-1).mean(dim=0))
        else:
            means.append(stack.mean(dim=0))
            variances.append(stack.var(dim=0) + approx._noise_var)
    mean = torch.cat(means)
    if n_samples is not None:
        return mean if approx.likelihood == "classification" else (mean, torch.cat(variances))
    cov = torch.cat(variances)
    if approx.likelihood == "classification":
        return probit_predictive(mean, cov)
    return mean, torch.diagonal(cov, dim1=1, dim2=2) + approx._noise_var
