"""Generalised Gauss-Newton machinery shared by the Laplace approximations.

* :func:`iterate_pairs` reads training data given as a ``DataLoader`` or a tuple ``(X, y)``.
* :func:`inference_mode` puts a model in eval mode and restores every module's flag afterwards.
* :func:`output_hessian_sqrt` factors the Hessian ``Lambda`` of the negative log-likelihood with
  respect to the network outputs, ``Lambda = L L^T`` (softmax cross-entropy or Gaussian noise).
* :class:`LinearTaps` hooks every ``nn.Linear`` (and ``nn.Conv2d``) of a model: it records the
  layer inputs ``a`` and adds a zero leaf ``e`` to the layer outputs ``s``, so
  ``d out / d e = d out / d s`` gives the back-propagated vectors of the GGN ``g = J_s^T L``
  for *any* graph (branches, heads, shared layers), with the activation derivatives included.
* :class:`KroneckerFactor` is one layer's K-FAC curvature ``H ~= n A (x) G`` over
  ``[W | b]``, kept as the eigen-decompositions of ``A`` and ``G``: the posterior precision
  ``n A (x) G + delta I`` is diagonal in the basis ``Q_G (x) Q_A``, which gives exact samples
  and exact linearised predictive variances without forming the ``P x P`` matrix.
* :func:`probit_predictive` turns Gaussian logits into class probabilities (probit approximation).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bensemble._validation import check_same_length, to_tensor

__all__ = [
    "KroneckerFactor",
    "layer_theta",
    "load_layers",
    "supported_layer",
    "LinearTaps",
    "inference_mode",
    "iterate_pairs",
    "output_hessian_sqrt",
    "probit_predictive",
]

#: Rows per batch when data is given as one tensor.
BATCH = 4096


def iterate_pairs(
    data, fn: str, convert_y=None, name: str = "data"
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches ``(x, y)``: a tuple ``(X, y)`` is one data set, other iterables yield batches.

    ``convert_y(y, name, fn)`` converts the targets of a tuple (default: :func:`to_tensor`);
    ``name`` is the argument named in error messages.
    """
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(f"{fn}: `{name}` as a tuple must be (X, y) (got {len(data)} items)")
        x = to_tensor(data[0], "X", fn)
        y = (convert_y or to_tensor)(data[1], "y", fn)
        if x.ndim == 0 or x.shape[0] == 0:
            raise ValueError(
                f"{fn}: `{name}` must hold at least one sample (got X of shape {tuple(x.shape)})"
            )
        check_same_length(fn, X=x, y=y)
        yield from zip(x.split(BATCH), y.split(BATCH))
        return
    if isinstance(data, (torch.Tensor, np.ndarray)) or not isinstance(data, Iterable):
        raise ValueError(
            f"{fn}: `{name}` must be a DataLoader of (x, y) batches or a tuple (X, y) "
            f"(got {type(data).__name__})"
        )
    for batch in data:
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            raise ValueError(
                f"{fn}: each batch of `{name}` must be a pair (x, y) (got {type(batch).__name__})"
            )
        yield batch[0], batch[1]


@contextlib.contextmanager
def inference_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode inside the block; every module's training flag restored afterwards."""
    flags = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        yield model
    finally:
        for module, flag in flags:
            module.training = flag


def output_hessian_sqrt(outputs: torch.Tensor, likelihood: str) -> torch.Tensor:
    """``L [B, K, K]`` with ``L L^T = Lambda``, the NLL Hessian w.r.t. the outputs ``[B, K]``.

    Classification (softmax cross-entropy): ``Lambda = diag(p) - p p^T`` and
    ``L = (I - p 1^T) diag(sqrt p)``. Regression (Gaussian, unit noise): ``L = I``; the caller
    divides the curvature by the noise variance.
    """
    n, k = outputs.shape
    if likelihood == "regression":
        return torch.eye(k, dtype=outputs.dtype, device=outputs.device).expand(n, k, k)
    probs = torch.softmax(outputs, dim=-1)
    root = probs.sqrt()
    return torch.diag_embed(root) - probs[:, :, None] * root[:, None, :]


class LinearTaps:
    """Forward hooks on ``layers`` recording inputs and adding zero leaves to outputs.

    ``nn.Linear`` inputs are kept as they come (leading axes are positions sharing the weight);
    ``nn.Conv2d`` inputs are unfolded into patches ``[B, L, C kh kw]`` and their output gradients
    read as ``[B, L, C_out]``, so a convolution is a linear layer shared over ``L`` positions
    (Grosse & Martens 2016).

    Use as a context manager around a forward pass with gradients enabled; afterwards
    ``inputs[name]`` and ``leaves[name]`` are lists (one entry per call of the layer).
    """

    def __init__(self, layers: list[tuple[str, nn.Module]]) -> None:
        self.layers = layers
        self._conv = {name: isinstance(m, nn.Conv2d) for name, m in layers}
        self.inputs: dict[str, list[torch.Tensor]] = {}
        self.leaves: dict[str, list[torch.Tensor]] = {}
        self._handles: list = []

    def __enter__(self) -> LinearTaps:
        self.inputs = {name: [] for name, _ in self.layers}
        self.leaves = {name: [] for name, _ in self.layers}
        for name, layer in self.layers:
            self._handles.append(layer.register_forward_hook(self._hook(name)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, name: str):
        def hook(module, inputs, output):
            x = inputs[0].detach()
            if isinstance(module, nn.Conv2d):  # patches [B, L, C kh kw] (KFC: a position = a row)
                x = F.unfold(
                    x, module.kernel_size, module.dilation, module.padding, module.stride
                ).transpose(1, 2)
            self.inputs[name].append(x)
            leaf = torch.zeros_like(output, requires_grad=True)
            self.leaves[name].append(leaf)
            return output + leaf

        return hook

    def called(self) -> list[str]:
        return [name for name, _ in self.layers if self.leaves[name]]

    def rows(self, name: str, with_bias: bool) -> torch.Tensor:
        """Layer inputs of every call, leading axes flattened, ``[R, in (+1)]`` in float64."""
        a = torch.cat([t.reshape(-1, t.shape[-1]) for t in self.inputs[name]]).to(torch.float64)
        if with_bias:
            a = torch.cat([a, torch.ones_like(a[:, :1])], dim=1)
        return a

    def per_example(self, name: str, n: int, with_bias: bool) -> torch.Tensor:
        """Layer inputs grouped by example ``[n, T, in (+1)]`` (``T`` positions and calls)."""
        parts = [t.reshape(n, -1, t.shape[-1]) for t in self.inputs[name]]
        a = torch.cat(parts, dim=1).to(torch.float64)
        if with_bias:
            a = torch.cat([a, torch.ones_like(a[..., :1])], dim=-1)
        return a

    def backprop(
        self, outputs: torch.Tensor, vectors: torch.Tensor, names: list[str]
    ) -> dict[str, torch.Tensor]:
        """``J_s^T v`` for each column of ``vectors [B, K, R]``: per layer ``[R, B, T, out]``."""
        n, _, n_vec = vectors.shape
        leaves = [leaf for name in names for leaf in self.leaves[name]]
        result: dict[str, list[torch.Tensor]] = {name: [] for name in names}
        for r in range(n_vec):
            grads = torch.autograd.grad(
                outputs,
                leaves,
                grad_outputs=vectors[:, :, r].to(outputs.dtype),
                retain_graph=r < n_vec - 1,
                allow_unused=True,
            )
            it = iter(grads)
            for name in names:
                per_call = []
                for leaf in self.leaves[name]:
                    g = next(it)
                    g = torch.zeros_like(leaf) if g is None else g
                    if self._conv[name]:  # [B, C_out, H, W] -> [B, L, C_out]
                        g = g.flatten(2).transpose(1, 2)
                    per_call.append(g.reshape(n, -1, g.shape[-1]).to(torch.float64))
                result[name].append(torch.cat(per_call, dim=1))
        return {name: torch.stack(gs) for name, gs in result.items()}


@dataclass
class KroneckerFactor:
    """K-FAC curvature of one linear layer over ``[W | b]`` (``[out, in + 1]``, bias last).

    ``A = sum a a^T / rows`` and ``G = sum g g^T / n`` (``a`` the layer inputs with a constant 1
    when the layer has a bias, ``g`` the back-propagated GGN vectors) approximate the GGN of the
    summed NLL as ``n A (x) G``; stored as eigen-decompositions ``A = Q_A diag(lam_A) Q_A^T``.
    """

    name: str
    q_in: torch.Tensor
    lam_in: torch.Tensor
    q_out: torch.Tensor
    lam_out: torch.Tensor
    has_bias: bool

    @classmethod
    def from_factors(cls, name, a_factor, g_factor, has_bias) -> KroneckerFactor:
        lam_in, q_in = torch.linalg.eigh(0.5 * (a_factor + a_factor.T))
        lam_out, q_out = torch.linalg.eigh(0.5 * (g_factor + g_factor.T))
        return cls(name, q_in, lam_in.clamp_min(0.0), q_out, lam_out.clamp_min(0.0), has_bias)

    def precision(self, n: float, prior: float, damping: float, mode: str) -> torch.Tensor:
        """Eigenvalues ``[out, in + 1]`` of the posterior precision in the basis ``Q_G (x) Q_A``.

        ``"exact"``: ``n lam_G lam_A + prior + damping`` (the K-FAC GGN plus the isotropic prior,
        no further approximation); ``"paper"``: Ritter et al.'s factor-wise prior,
        ``(sqrt(n) lam_G + sqrt(prior)) (sqrt(n) lam_A + sqrt(prior)) + damping``; ``"legacy"``:
        bensemble 0.2's ``(n lam_G + prior) (n lam_A + prior) + damping``.
        """
        lg, la = self.lam_out[:, None], self.lam_in[None, :]
        if mode == "exact":
            return n * lg * la + prior + damping
        if mode == "paper":
            s, p = math.sqrt(n), math.sqrt(prior)
            return (s * lg + p) * (s * la + p) + damping
        return (n * lg + prior) * (n * la + prior) + damping

    def sample(self, eig: torch.Tensor, n_draws: int, generator, scale: float) -> torch.Tensor:
        """Deviations ``[n_draws, out, in + 1]`` from the mean, covariance ``scale^2 P^{-1}``."""
        z = torch.randn(n_draws, *eig.shape, generator=generator, dtype=torch.float64)
        y = z.to(eig.device) * (scale / eig.sqrt())
        return self.q_out @ y @ self.q_in.T

    def covariance(self, eig: torch.Tensor) -> torch.Tensor:
        """Dense covariance ``[P, P]`` of ``vec([W | b])`` (row-major), for small layers."""
        basis = torch.kron(
            self.q_out.contiguous(), self.q_in.contiguous()
        )  # row-major vec: out index major
        return basis @ torch.diag((1.0 / eig).reshape(-1)) @ basis.T

    def project(self, g: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The Jacobian of the outputs w.r.t. ``[W | b]`` in this factor's eigenbasis.

        ``g [K, B, T, out]`` are the Jacobians of the ``K`` outputs w.r.t. the layer outputs,
        ``a [B, T, in + 1]`` its inputs; the Jacobian w.r.t. ``[W | b]`` is ``sum_t g_t a_t^T``.
        One position (``T = 1``): ``(u [K, B, out], v^2 [B, in + 1])`` with ``u = g Q_G``,
        ``v = a Q_A`` (the Jacobian is their outer product); else ``(jac [K, B, out, in + 1],)``.
        Independent of the prior precision: a search reuses it for every candidate.
        """
        u = g @ self.q_out  # [K, B, T, out]
        v = a @ self.q_in  # [B, T, in + 1]
        if u.shape[2] == 1:
            return u[:, :, 0], v[:, 0, :] ** 2
        return (torch.einsum("kbti,btj->kbij", u, v),)

    def projected_covariance(self, projection: tuple, eig: torch.Tensor) -> torch.Tensor:
        """Covariance ``[B, K, K]`` of the outputs from this layer's weights, given
        :meth:`project`'s result and the precision eigenvalues ``eig [out, in + 1]``."""
        if len(projection) == 2:
            u, v_sq = projection
            w = v_sq @ (1.0 / eig).T  # [B, out]
            return torch.einsum("kbi,lbi,bi->bkl", u, u, w)
        (jac,) = projection
        return torch.einsum("kbij,lbij,ij->bkl", jac, jac, 1.0 / eig)

    def output_covariance(self, g: torch.Tensor, a: torch.Tensor, eig: torch.Tensor):
        """Covariance ``[B, K, K]`` of the outputs from this layer's weights (linearised)."""
        return self.projected_covariance(self.project(g, a), eig)


def probit_predictive(mean: torch.Tensor, cov: torch.Tensor) -> torch.Tensor:
    """Probit approximation of ``E[softmax(f)]`` for Gaussian logits ``f ~ N(mean, cov)``.

    ``mean [N, K]``, ``cov [N, K, K]``. For ``K = 2`` MacKay's binary form on ``d = f_1 - f_0``,
    ``P(y = 1) ~= sigmoid(E[d] / sqrt(1 + pi/8 Var[d]))``; for ``K > 2`` the generalised probit
    on the centred logits ``g_k = f_k - mean_j f_j``, ``softmax(E[g] / sqrt(1 + pi/8 Var[g]))``
    (the softmax ignores a common shift, so its variance must not flatten the prediction).
    """
    k = mean.shape[1]
    if k == 2:
        var = (cov[:, 1, 1] + cov[:, 0, 0] - 2.0 * cov[:, 0, 1]).clamp_min(0.0)
        p1 = torch.sigmoid((mean[:, 1] - mean[:, 0]) / torch.sqrt(1.0 + math.pi / 8.0 * var))
        return torch.stack([1.0 - p1, p1], dim=1)
    contrast = torch.eye(k, dtype=mean.dtype, device=mean.device) - 1.0 / k
    var = torch.einsum("rk,nkl,rl->nr", contrast, cov, contrast).clamp_min(0.0)
    centred = mean - mean.mean(dim=1, keepdim=True)
    return torch.softmax(centred / torch.sqrt(1.0 + math.pi / 8.0 * var), dim=1)


def supported_layer(module: nn.Module) -> bool:
    if isinstance(module, nn.Linear):
        return True
    return (
        isinstance(module, nn.Conv2d)
        and module.groups == 1
        and module.padding_mode == "zeros"
        and not isinstance(module.padding, str)
    )


def load_layers(model: nn.Module, thetas: dict[str, torch.Tensor]) -> None:
    """Copy ``[W | b]`` draws into the named layers of ``model`` (conv kernels reshaped)."""
    with torch.no_grad():
        for name, w in thetas.items():
            layer = model.get_submodule(name)
            if layer.bias is not None:
                layer.bias.copy_(w[:, -1].to(layer.bias))
                w = w[:, :-1]
            layer.weight.copy_(w.reshape(layer.weight.shape).to(layer.weight))


def layer_theta(layer: nn.Module) -> torch.Tensor:
    """``[W | b]`` ``[out, in (+1)]`` in float64 (a conv kernel flattened to ``[out, C kh kw]``)."""
    w = layer.weight.detach().to(torch.float64).reshape(layer.weight.shape[0], -1)
    if layer.bias is None:
        return w
    return torch.cat([w, layer.bias.detach().to(torch.float64)[:, None]], dim=1)
