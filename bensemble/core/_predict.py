"""How an :class:`~bensemble.core.Ensemble` predicts its input batch by batch.

:func:`stream_predictions` reads the batches (:mod:`bensemble.core._inputs`), converts each to
the members' dtype and device, asks the member adapter for ``[M, B, *]`` outputs, reduces them
per batch when asked (a model average needs ``[B, K]`` only) and gathers the labels of labelled
batches in prediction order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from bensemble._validation import to_tensor
from bensemble.core._inputs import BatchSpec, iter_batches, to_member_input

__all__ = ["predict_batch", "stream_predictions"]


def stream_predictions(
    members: Any,
    x: Any,
    fn: str,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None,
    *,
    batch_size: Any,
    progress: bool,
    labels: bool = False,
    keys: tuple[Any, Any, Any] = (None, None, None),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Predict every batch of ``x``; ``reduce`` maps ``[M, B, *]`` to ``[B, *]`` per batch;
    ``keys`` are ``(input_key, label_key, batch_fn)`` (:class:`~bensemble.core._inputs.
    BatchSpec`)."""
    dtype, device = members.input_spec()
    spec = BatchSpec.checked(*keys, fn)
    if isinstance(x, torch.Tensor) and batch_size is None and not labels and spec.plain:
        if x.numel() == 0:
            raise ValueError(f"{fn}: `x` must not be empty (got shape {tuple(x.shape)})")
        preds = members.predict_all(to_member_input(x, dtype, device, "x", fn))
        return (preds if reduce is None else reduce(preds)), None  # one tensor: no batching
    outs: list[torch.Tensor] = []
    ys: list[torch.Tensor] = []
    batches = iter_batches(
        x, fn, batch_size=batch_size, progress=progress, name="data" if labels else "x",
        spec=spec,
    )  # fmt: skip
    for i, (xb, yb) in enumerate(batches):
        preds = predict_batch(members, to_member_input(xb, dtype, device, "x", fn), fn, spec)
        outs.append(preds if reduce is None else reduce(preds))
        if labels:
            if yb is None:
                raise ValueError(
                    f"{fn}: `data` must yield (x, y) batches with labels (got batch {i} "
                    "without labels; for dict batches pass label_key=, e.g. "
                    "label_key='label', or a batch_fn returning (x, y))"
                )
            y = to_tensor(yb, "y", fn).reshape(-1).cpu()
            rows = preds.shape[1] if preds.ndim > 1 else 1
            if len(y) != rows:
                raise ValueError(
                    f"{fn}: `data` must yield one label per row (got {len(y)} labels for "
                    f"{rows} rows in batch {i})"
                )
            ys.append(y)
    dim = 1 if reduce is None else 0
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=dim)
    return out, (torch.cat(ys) if labels else None)


def predict_batch(members: Any, xb: Any, fn: str, spec: BatchSpec) -> torch.Tensor:
    """The members' outputs for one batch; a dict they cannot take is a ValueError that
    names ``input_key``."""
    if not isinstance(xb, Mapping) or spec.input_key is not None or spec.batch_fn:
        return members.predict_all(xb)
    try:
        return members.predict_all(xb)
    except (TypeError, AttributeError) as exc:
        keys = ", ".join(repr(k) for k in xb)
        raise ValueError(
            f"{fn}: the members must take the batches as given: a dict batch (keys {keys}) "
            f"went to them whole and failed ({type(exc).__name__}: {exc}); pass input_key= "
            "(and label_key=) to name its entries, or batch_fn="
        ) from exc
