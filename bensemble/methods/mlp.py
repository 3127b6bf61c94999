"""The multilayer perceptrons of the epistemic-calibration paper (appendix B.1.1), as nn.Sequential.

``make_mlp(2, 2)`` is the paper's network: ``Linear(2, 100) - ReLU - Linear(100, 20) - ReLU -
Linear(20, 2)``. ``dropout=(0.3, 0.2)`` gives its MC-dropout variant (a ``Dropout`` after the
activation of each hidden layer), ``dropconnect_p=0.3`` its DropConnect variant (every hidden
``Linear`` replaced by :class:`bensemble.layers.DropConnectLinear`). The output layer is always a
plain ``nn.Linear`` and the last module, so :class:`~bensemble.methods.LastLayerLaplace` finds it.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from bensemble._validation import (
    check_positive_int,
    check_probability,
    machine_memory_bytes,
)

__all__ = ["make_mlp"]


def make_mlp(
    in_features: int,
    num_classes: int,
    hidden: Sequence[int] = (100, 20),
    dropout: float | Sequence[float] | None = None,
    dropconnect_p: float | Sequence[float] | None = None,
) -> nn.Sequential:
    """A ReLU multilayer perceptron returning logits ``[N, num_classes]``.

    Args:
        in_features: input dimension.
        num_classes: number of logits ``K``.
        hidden: widths of the hidden layers (the paper: ``(100, 20)``).
        dropout: dropout probability after each hidden layer's activation, one value for all or
            one per hidden layer (``0`` skips a layer); the paper's MC dropout uses ``(0.3, 0.2)``.
        dropconnect_p: weight-drop probability of each hidden layer (one value or one per layer;
            ``0`` keeps a plain ``nn.Linear``); the paper's DropConnect uses ``0.3``.

    Example:
        >>> make_mlp(2, 2, dropout=(0.3, 0.2))
        Sequential(
          (0): Linear(in_features=2, out_features=100, bias=True)
          (1): ReLU()
          (2): Dropout(p=0.3, inplace=False)
          (3): Linear(in_features=100, out_features=20, bias=True)
          (4): ReLU()
          (5): Dropout(p=0.2, inplace=False)
          (6): Linear(in_features=20, out_features=2, bias=True)
        )
    """
    fn = "make_mlp"
    in_features = check_positive_int(in_features, "in_features", fn)
    num_classes = check_positive_int(num_classes, "num_classes", fn)
    if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence):
        raise ValueError(f"{fn}: `hidden` must be a sequence of widths (got {hidden!r})")
    widths = [check_positive_int(h, "hidden", fn) for h in hidden]
    drop = _per_layer(dropout, "dropout", len(widths), fn)
    connect = _per_layer(dropconnect_p, "dropconnect_p", len(widths), fn)
    sizes = [in_features, *widths, num_classes]
    weights = sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))
    needed, memory = 4 * weights, machine_memory_bytes()
    if needed > memory:
        raise ValueError(
            f"{fn}: `in_features`, `hidden` and `num_classes` must give a network whose {weights} "
            f"float32 weights fit in this machine's memory ({memory} bytes; {needed} needed) "
            f"(got sizes {sizes})"
        )

    layers: list[nn.Module] = []
    previous = in_features
    for width, p_drop, p_connect in zip(widths, drop, connect):
        if p_connect > 0.0:
            from bensemble.layers import DropConnectLinear  # only needed for this variant

            layers.append(DropConnectLinear(previous, width, p_connect))
        else:
            layers.append(nn.Linear(previous, width))
        layers.append(nn.ReLU())
        if p_drop > 0.0:
            layers.append(nn.Dropout(p_drop))
        previous = width
    layers.append(nn.Linear(previous, num_classes))
    return nn.Sequential(*layers)


def _per_layer(value, name: str, n_layers: int, fn: str) -> list[float]:
    if value is None:
        return [0.0] * n_layers
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if len(value) != n_layers:
            raise ValueError(
                f"{fn}: `{name}` must have one value per hidden layer ({n_layers}) "
                f"(got {len(value)})"
            )
        values = list(value)
    else:
        values = [value] * n_layers
    probs = [check_probability(v, name, fn, open_interval=False) for v in values]
    if any(p >= 1.0 for p in probs):
        raise ValueError(f"{fn}: `{name}` must lie in [0, 1) (got {value!r})")
    return probs
