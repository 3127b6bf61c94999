"""The binning protocol: how member predictions are cut into the EECE's bins.

A binning partitions the points of a task by their member predictions. Every binning offers:

* ``fit(member_probs, *, multiclass="classwise", binary=False) -> self`` - learn the partition
  (K-means centroids, quantile edges; a no-op for fixed ones);
* ``assign(member_probs) -> bin ids`` - the bin of every point: ``[N]`` int64 for a binary task
  or ``multiclass="top_label"``, ``[K, N]`` (one row per class) for ``"classwise"``;
* ``n_bins_`` - bin ids lie in ``[0, n_bins_)``; ``centroids_`` - the fitted centres (``None``
  for binnings without centres);
* ``state_dict()`` / ``load_state_dict(state)`` - plain tensors and numbers (``torch.save``-able)
  to ship a fitted binning to another process or rank; ``repr`` - its options.

**What is binned.** ``"classwise"`` bins each class ``k`` by the member vectors
``p[:, n, k]`` (one partition per class); ``"top_label"`` by the members' probabilities of the
class the mean prediction ranks first; a binary task (``binary=True``, ``[M, N]``
positive-class probabilities) by ``p[:, n]``. A fitted binning remembers which, and ``assign``
needs predictions of the same kind (members, classes).

**Member order.** Members are exchangeable: binnings sort them into the data-derived canonical
order of :func:`~bensemble.metrics.epistemic` (by the bytes of each member's predictions) before
anything order-sensitive, and keep centres in the order of the members as given - so
permuting the members changes nothing, and a binning fitted on one split applies to another.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from bensemble._validation import check_bool, check_option
from bensemble.metrics._epistemic_checks import canonical_member_order, check_member_probs

__all__ = ["MULTICLASS", "Binning", "MemberColumns"]

#: How a multi-class task is binned.
MULTICLASS = ("classwise", "top_label")
_MODES = ("binary", *MULTICLASS)


class MemberColumns:
    """Validated member predictions in the canonical member order, as the groups a binning cuts.

    Attributes:
        p: ``[M, N, K]`` or ``[M, N]`` float64 probabilities, members in canonical order.
        order: the canonical permutation of the members as given (``None``: already in order).
        mode: ``"binary"``, ``"classwise"`` or ``"top_label"``.
        groups: number of partitions (``K`` for "classwise", else 1).
        n: points ``N``.
    """

    def __init__(self, p: torch.Tensor, order: torch.Tensor | None, mode: str) -> None:
        self.p, self.order, self.mode = p, order, mode
        self.n = p.shape[1]
        self.groups = p.shape[2] if mode == "classwise" else 1
        self._single: torch.Tensor | None = None

    @classmethod
    def from_input(cls, member_probs: Any, fn: str, multiclass: str, binary: Any) -> MemberColumns:
        """Check ``member_probs`` (the EECE's shape rule) and put the members in canonical
        order."""
        p = check_member_probs(member_probs, fn, binary)
        mode = "binary" if p.ndim == 2 else check_option(multiclass, "multiclass", MULTICLASS, fn)
        order = canonical_member_order(p)
        return cls(p if order is None else p[order], order, mode)

    @property
    def n_members(self) -> int:
        return self.p.shape[0]

    @property
    def n_classes(self) -> int | None:
        return self.p.shape[2] if self.p.ndim == 3 else None

    def single(self) -> torch.Tensor:
        """``[M, N]`` the one binned column (binary: ``p``; top-label: the members'
        probabilities of the top class of the mean prediction)."""
        if self._single is None:
            if self.mode == "binary":
                self._single = self.p
            else:
                top = self.p.mean(dim=0).argmax(dim=1)
                index = top[None, :, None].expand(self.n_members, self.n, 1)
                self._single = self.p.gather(2, index).squeeze(2)
        return self._single

    def vectors(self, k: int) -> torch.Tensor:
        """``[N, M]`` member vectors of group ``k`` (a view)."""
        return self.p[:, :, k].T if self.mode == "classwise" else self.single().T

    def to_canonical(self, centres: torch.Tensor) -> torch.Tensor:
        """Centre columns in the given member order -> canonical order."""
        return centres if self.order is None else centres[:, self.order.to(centres.device)]

    def to_given(self, centres: torch.Tensor) -> torch.Tensor:
        """Centre columns in canonical order -> the given member order."""
        if self.order is None:
            return centres
        inverse = torch.empty_like(self.order).scatter_(
            0, self.order, torch.arange(self.order.numel(), device=self.order.device)
        )
        return centres[:, inverse.to(centres.device)]


class Binning:
    """Base class of the binnings (the protocol in :mod:`bensemble.metrics.binning.base`).

    Subclasses set ``_name`` and implement ``_options()`` (constructor arguments, for ``repr``
    and ``state_dict``), ``_fit_columns(columns) -> (fitted state, bin ids per group)`` and
    ``_assign_columns(columns) -> bin ids per group``, and the state's (de)serialisation.
    """

    _name = "Binning"

    def __init__(self) -> None:
        self._state: dict[str, Any] | None = None

    # ------------------------------------------------------------------ the protocol

    def fit(self, member_probs: Any, *, multiclass: str = "classwise", binary: bool = False):
        """Fit the partition on member predictions.

        Args:
            member_probs: ``[M, N, K]`` member probabilities, or ``[M, N]`` positive-class
                probabilities with ``binary=True``.
            multiclass: ``"classwise"`` (one partition per class) or ``"top_label"``.
            binary: ``member_probs`` is the binary form ``[M, N]``.

        Returns:
            ``self``, fitted.
        """
        fn = f"{self._name}.fit"
        binary = check_bool(binary, "binary", fn)
        columns = MemberColumns.from_input(member_probs, fn, multiclass, binary)
        self._fit_columns(columns, fn)
        return self

    def assign(self, member_probs: Any) -> torch.Tensor:
        """Bin id of every point: ``[N]`` int64 (binary, top-label) or ``[K, N]`` (classwise).

        Args:
            member_probs: predictions of the kind the binning was fitted on (``[M, N, K]`` with
                the same ``M`` and ``K``, or ``[M, N]`` for a binary fit).
        """
        fn = f"{self._name}.assign"
        state = self._fitted_state(fn)
        columns = MemberColumns.from_input(
            member_probs, fn, state["multiclass"], state["mode"] == "binary"
        )
        self._check_compatible(columns, fn)
        ids = self._assign_columns(columns, fn)
        return torch.stack(ids) if columns.mode == "classwise" else ids[0]

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`load_state_dict`) has run."""
        return self._state is not None

    @property
    def n_bins_(self) -> int:
        """Bin ids of :meth:`assign` lie in ``[0, n_bins_)`` (for "classwise", the largest number
        of bins of any class)."""
        return int(self._fitted_state(f"{self._name}.n_bins_")["n_bins"])

    @property
    def centroids_(self) -> torch.Tensor | list[torch.Tensor] | None:
        """Fitted centres ``[B, M]`` (members in the given order), a list of ``K`` of them for
        "classwise", or ``None`` for a binning without centres."""
        return self._fitted_state(f"{self._name}.centroids_").get("centroids")

    @property
    def multiclass_(self) -> str:
        """What the fitted binning bins: ``"binary"``, ``"classwise"`` or ``"top_label"``."""
        return self._fitted_state(f"{self._name}.multiclass_")["mode"]

    def state_dict(self) -> dict[str, Any]:
        """The options and the fitted state: tensors, numbers and strings only."""
        state = {"type": self._name, "options": dict(self._options())}
        if self._state is not None:
            state["fitted"] = copy.copy(self._state)
        return state

    def load_state_dict(self, state: dict[str, Any]):
        """Restore what :meth:`state_dict` returned (of a binning of the same type); returns
        ``self``."""
        fn = f"{self._name}.load_state_dict"
        if not isinstance(state, dict) or state.get("type") != self._name:
            got = state.get("type") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{fn}: `state` must be a {self._name} state_dict (got {got!r})")
        fresh = type(self)(**state.get("options", {}))
        self.__dict__.update(fresh.__dict__)
        fitted = state.get("fitted")
        self._state = None if fitted is None else self._check_state(dict(fitted), fn)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._options(changed_only=True).items())
        return f"{self._name}({args})"

    # ------------------------------------------------------------------ for subclasses

    def _options(self, changed_only: bool = False) -> dict[str, Any]:
        raise NotImplementedError

    def _fit_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        raise NotImplementedError

    def _assign_columns(self, columns: MemberColumns, fn: str) -> list[torch.Tensor]:
        raise NotImplementedError

    def _check_state(self, state: dict[str, Any], fn: str) -> dict[str, Any]:
        """Validate a loaded fitted state (its mode, group count, bin count)."""
        check_option(state.get("mode"), "state['fitted']['mode']", _MODES, fn)
        for key in ("n_bins", "groups"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{fn}: `state['fitted']['{key}']` must be an integer >= 1 (got {value!r})"
                )
        return state

    def _fitted_state(self, fn: str) -> dict[str, Any]:
        if self._state is None:
            raise ValueError(
                f"{fn}: the binning must be fitted first - call fit(member_probs) or pass it "
                "unfitted to expected_epistemic_calibration_error (got an unfitted "
                f"{self._name})"
            )
        return self._state

    def _base_state(self, columns: MemberColumns, n_bins: int) -> dict[str, Any]:
        return {
            "mode": columns.mode,
            "multiclass": "classwise" if columns.mode == "binary" else columns.mode,
            "groups": columns.groups,
            "n_members": columns.n_members,
            "n_classes": columns.n_classes,
            "n_bins": int(n_bins),
        }

    def _check_compatible(self, columns: MemberColumns, fn: str) -> None:
        """The predictions are of the kind the binning was fitted on."""
        state = self._fitted_state(fn)
        want = (state["n_members"], state["n_classes"])
        got = (columns.n_members, columns.n_classes)
        if state["mode"] != "binary" and state["n_classes"] is None:
            want = (want[0], got[1])  # cells given without a class count (from_centroids)
        if getattr(self, "_argument", None) == "centroids" and state["mode"] == columns.mode:
            # fixed cells passed as the EECE's deprecated `centroids`: name them
            if want[0] != got[0]:
                raise ValueError(
                    f"{fn}: `centroids` must have {got[0]} columns, one per member (got {want[0]})"
                )
            if want[1] != got[1]:
                raise ValueError(
                    f"{fn}: `centroids` must have one centroid set per class, {got[1]} sets "
                    f"(got {want[1]})"
                )
        if state["mode"] != columns.mode or want != got:
            shape = "[M, N]" if state["mode"] == "binary" else "[M, N, K]"
            raise ValueError(
                f"{fn}: `member_probs` must be {shape} predictions like the ones the binning was "
                f"fitted on ({state['mode']}, M = {want[0]}, K = {want[1]}) (got {columns.mode}, "
                f"M = {got[0]}, K = {got[1]})"
            )
