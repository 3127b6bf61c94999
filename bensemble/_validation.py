"""Input checks shared by the whole library.

Every checker *returns the converted tensor* (or value) and raises :class:`ValueError`
with one message shape::

    "<function>: `<argument>` must <expectation> (got <what came>)"

Conventions
-----------
* Arrays may be torch tensors, numpy arrays or (nested) Python sequences; they come back as
  torch tensors on their original device (numpy/list inputs land on the CPU).
* Probabilities must be finite, lie in ``[0, 1]`` and, along the class axis, sum to 1 within
  :data:`SUM_TOLERANCE` (``1e-4``; ``1e-2`` for float16/bfloat16 inputs). A matrix whose rows
  do not sum to 1 is never guessed to be logits: rows within ``0.01`` of 1 are told to be
  renormalised (a softmax of probabilities would be wrong), others that ``from_logits=True``
  is the remedy if they are logits.
  The tolerance is that of the *original* dtype: a layer that already converted float16 data to
  float64 passes ``source_dtype=torch.float16`` on (:func:`as_probs`).
* ``from_logits=True`` applies the softmax and never second-guesses the caller, but when every
  row already lies on the simplex (values in ``[0, 1]``, rows summing to 1) it warns with a
  ``UserWarning``: the softmax of probabilities is a silently wrong input.
* Member predictions are ``[M, N, K]`` (:func:`as_member_stack`). A 2-D array is never guessed:
  it is the binary positive-class form ``[M, N]`` only when the caller passes ``binary=True``,
  otherwise an error (a single model's ``[N, K]`` probabilities need a member axis,
  ``probs[None]``).
* Labels must have an integer (or bool) dtype; a float array of labels is rejected even when its
  values are integral, because a float label array is nearly always a bug upstream.
* Bin counts are capped at :data:`MAX_N_BINS` so that an absurd ``n_bins`` is a ``ValueError``
  before it reaches the allocator.
"""

from __future__ import annotations

from bensemble._scalar_checks import (
    MAX_BIN_SLOTS,
    MAX_N_BINS,
    MIN_MEMBER_BYTES,
    check_allocation,
    check_bool,
    check_count,
    check_generator,
    check_n_bins,
    check_option,
    check_positive,
    check_positive_int,
    check_probability,
    machine_memory_bytes,
    warn_user,
)
from bensemble._validation_members import (
    as_binary,
    as_binary_member_probs,
    as_confidences,
    as_labels,
    as_member_probs,
    as_member_stack,
    check_same_length,
)
from bensemble._validation_tensors import (
    SUM_TOLERANCE,
    as_float_tensor,
    as_logits,
    as_probs,
    check_finite,
    output_dtype,
    to_tensor,
)

__all__ = [
    "SUM_TOLERANCE",
    "MAX_N_BINS",
    "MAX_BIN_SLOTS",
    "MIN_MEMBER_BYTES",
    "to_tensor",
    "as_float_tensor",
    "as_probs",
    "as_member_probs",
    "as_member_stack",
    "as_binary_member_probs",
    "as_logits",
    "as_labels",
    "as_binary",
    "as_confidences",
    "check_allocation",
    "check_count",
    "machine_memory_bytes",
    "check_n_bins",
    "check_option",
    "check_positive",
    "check_positive_int",
    "check_probability",
    "check_same_length",
    "check_finite",
    "check_generator",
    "check_bool",
    "output_dtype",
    "warn_user",
]
