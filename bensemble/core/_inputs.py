"""What an :class:`~bensemble.core.Ensemble` accepts as input, turned into batches.

``x`` may be

* one array: a tensor, a numpy array or a nested list of numbers (``[N, *features]``), predicted
  in one call or, with ``batch_size``, in consecutive slices of ``batch_size`` rows;
* an iterable of batches: a :class:`torch.utils.data.DataLoader` (or any iterable, a list or
  tuple of tensors or of ``(x, y)`` tuples included) yielding ``x`` or ``(x, y, ...)`` per batch;
  ``y`` is the labels. A list of nested lists of numbers is one array (give nested-list batches
  through a generator);
* a mapping (e.g. ``{"input_ids": ..., "attention_mask": ...}``), alone or as the batches of
  an iterable: given to the members as it is (no labels, no row check).

Batches of another shape are read with a :class:`BatchSpec` (the ``input_key=``, ``label_key=``
and ``batch_fn=`` options of ``Ensemble.predict_*``): ``input_key`` / ``label_key`` name the
entries of dict batches (``{"image": x, "label": y}``: ``input_key="image",
label_key="label"``) or the positions in tuple batches (``(y, x)``: ``input_key=1,
label_key=0``); ``batch_fn(batch)`` returns ``x`` or ``(x, y)`` for anything else. Nothing is
guessed from key names: a dict batch without ``input_key`` goes to the members whole, and a
member that cannot take it gets an error naming ``input_key``.

Every batch is converted to the members' dtype and device (floating inputs only: integer
inputs such as token ids keep their dtype). Batches are consumed one at a time, so memory holds
one input batch and the per-batch results.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from bensemble._validation import check_positive_int, to_tensor

__all__ = ["BatchSpec", "member_input_spec", "iter_batches", "to_member_input"]

_ARRAY_TYPES = (torch.Tensor, np.ndarray)


def member_input_spec(
    modules: Iterable[nn.Module],
) -> tuple[torch.dtype | None, torch.device | None]:
    """``(dtype, device)`` of the first floating parameter or buffer of ``modules``."""
    for module in modules:
        for t in itertools.chain(module.parameters(), module.buffers()):
            if t.is_floating_point():
                return t.dtype, t.device
    return None, None


def to_member_input(
    value: Any, dtype: torch.dtype | None, device: torch.device | None, name: str, fn: str
) -> Any:
    """One batch as a tensor with the members' dtype (if floating) and device."""
    if isinstance(value, torch.Tensor):
        t = value
    elif isinstance(value, (np.ndarray, list, tuple)):
        t = to_tensor(value, name, fn)
    else:
        return value  # a structured input (dict, custom object): the members' business
    if t.is_floating_point() and dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if device is not None and t.device != device:
        t = t.to(device)
    return t


def _is_array(value: Any) -> bool:
    """True for one array; False for an iterable of batches."""
    if isinstance(value, _ARRAY_TYPES):
        return True
    if isinstance(value, (list, tuple)):
        if not value:
            return True  # an empty array: rejected with a clear message below
        first = value[0]
        if isinstance(first, (*_ARRAY_TYPES, Mapping)):
            return False
        if isinstance(first, (list, tuple)):
            return not _holds_arrays(first)
        return True
    return False


def _holds_arrays(value: Any) -> bool:
    """An ``(x, y, ...)`` batch starts with an array; a nested list of numbers is an array."""
    return bool(value) and isinstance(value[0], (*_ARRAY_TYPES, Mapping))


def _split_batch(batch: Any) -> tuple[Any, Any]:
    """``(x, y)`` of a ``(x, y, ...)`` batch (first item an array or mapping), else ``(batch,
    None)``: a tensor, an array, a nested list of numbers or a mapping is the input itself."""
    if (
        isinstance(batch, (tuple, list))
        and batch
        and isinstance(batch[0], (*_ARRAY_TYPES, Mapping))
    ):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None


def _check_key(value: Any, name: str, fn: str) -> Any:
    if value is None or (isinstance(value, (str, int)) and not isinstance(value, bool)):
        return value
    raise ValueError(
        f"{fn}: `{name}` must be a dict key (str), a tuple position (int) or None "
        f"(got {type(value).__name__})"
    )


@dataclass(frozen=True)
class BatchSpec:
    """How to read ``(x, y)`` out of one batch (module docstring); the default reads tensors,
    ``(x, y, ...)`` tuples and whole mappings."""

    input_key: str | int | None = None
    label_key: str | int | None = None
    batch_fn: Callable[[Any], Any] | None = None

    @classmethod
    def checked(cls, input_key: Any, label_key: Any, batch_fn: Any, fn: str) -> BatchSpec:
        """The options of ``fn``, validated (``batch_fn`` excludes the keys)."""
        if batch_fn is not None and not callable(batch_fn):
            raise ValueError(f"{fn}: `batch_fn` must be callable (got {type(batch_fn).__name__})")
        if batch_fn is not None and (input_key is not None or label_key is not None):
            raise ValueError(
                f"{fn}: `batch_fn` must be given without `input_key` / `label_key` (it returns "
                "x or (x, y) itself) (got both)"
            )
        return cls(
            _check_key(input_key, "input_key", fn), _check_key(label_key, "label_key", fn), batch_fn
        )

    @property
    def plain(self) -> bool:
        """No option given: the default reading."""
        return self.input_key is None and self.label_key is None and self.batch_fn is None

    def split(self, batch: Any, fn: str, index: int) -> tuple[Any, Any]:
        """``(x, y or None)`` of batch number ``index``."""
        if self.batch_fn is not None:
            out = self.batch_fn(batch)
            if isinstance(out, tuple) and len(out) == 2:
                return out
            return out, None
        if self.plain:
            return _split_batch(batch)
        x, y = _split_batch(batch) if not isinstance(batch, Mapping) else (batch, None)
        if self.input_key is not None:
            x = self._entry(batch, self.input_key, "input_key", fn, index)
        if self.label_key is not None:
            y = self._entry(batch, self.label_key, "label_key", fn, index)
        return x, y

    @staticmethod
    def _entry(batch: Any, key: Any, name: str, fn: str, index: int) -> Any:
        if isinstance(batch, Mapping):
            if key in batch:
                return batch[key]
            found = ", ".join(repr(k) for k in batch)
            raise ValueError(
                f"{fn}: `{name}` must name an entry of the batches (got {key!r}; batch {index} "
                f"has {found})"
            )
        if isinstance(batch, (tuple, list)) and isinstance(key, int):
            if -len(batch) <= key < len(batch):
                return batch[key]
            raise ValueError(
                f"{fn}: `{name}` must be a position in the batches (got {key}; batch {index} "
                f"has {len(batch)} items)"
            )
        what = "a str key" if isinstance(key, str) else "an int position"
        raise ValueError(
            f"{fn}: `{name}` must fit the batches: {what} needs "
            f"{'dict' if isinstance(key, str) else 'tuple'} batches (got a "
            f"{type(batch).__name__} batch {index})"
        )


def iter_batches(
    x: Any,
    fn: str,
    *,
    batch_size: Any = None,
    progress: bool = False,
    name: str = "x",
    spec: BatchSpec | None = None,
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(x_batch, y_batch or None)`` from one array or an iterable of batches, each
    batch read by ``spec`` (default: :class:`BatchSpec` ``()``)."""
    spec = BatchSpec() if spec is None else spec
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size", fn)
    if isinstance(x, Mapping):
        yield spec.split(x, fn, 0)  # structured input: one batch
        return
    if isinstance(x, (str, bytes)) or not (_is_array(x) or isinstance(x, Iterable)):
        raise ValueError(
            f"{fn}: `{name}` must be a tensor, a numpy array or an iterable of batches such as a "
            f"DataLoader (got {type(x).__name__})"
        )
    if _is_array(x) and not spec.plain and spec.batch_fn is None:
        raise ValueError(
            f"{fn}: `input_key` / `label_key` read dict or tuple batches of a loader (got one "
            f"{type(x).__name__} as `{name}`)"
        )
    if _is_array(x):
        data = x if isinstance(x, torch.Tensor) else to_tensor(x, name, fn)
        if data.numel() == 0:
            raise ValueError(f"{fn}: `{name}` must not be empty (got shape {tuple(data.shape)})")
        if batch_size is None or data.ndim == 0 or len(data) <= batch_size:
            batches: Iterable[Any] = [data]
        else:
            batches = data.split(batch_size)
    else:
        if batch_size is not None:
            raise ValueError(
                f"{fn}: `batch_size` applies to one array, not to an iterable of batches (got "
                f"batch_size={batch_size} with a {type(x).__name__}; batch the loader itself)"
            )
        batches = x
    total = len(batches) if hasattr(batches, "__len__") else None
    if progress:
        from bensemble._progress import progress as progress_bar

        batches = progress_bar(batches, total=total, desc=fn, leave=False)
    count = 0
    for batch in batches:
        xb, yb = spec.split(batch, fn, count)
        count += 1
        yield xb, yb
    if count == 0:
        raise ValueError(f"{fn}: `{name}` must hold at least one batch (got an empty iterable)")
