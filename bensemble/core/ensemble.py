"""The :class:`Ensemble`: member predictions from any source, combined.

An ensemble does not care where its members come from: explicit networks (a deep ensemble),
fixed random draws of one network (MC dropout, DropConnect, Bayesian layers), draws from a
posterior approximation, or fitted scikit-learn classifiers. Every source goes through a
:class:`~bensemble.core.member.MemberAdapter` and yields raw member outputs ``[M, B, *]``; the
ensemble streams inputs batch by batch (:mod:`bensemble.core._inputs`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import MIN_MEMBER_BYTES, check_count, check_option
from bensemble.core._predict import stream_predictions
from bensemble.core.member import ExplicitMembers, MemberAdapter, StochasticMembers
from bensemble.core.packed import PACKED_OPTIONS, PackedMembers, packable
from bensemble.core.sklearn_members import SklearnMembers
from bensemble.core.types import MemberPredictions, PosteriorSource, Predictions

__all__ = ["Ensemble"]


def _mean_over_members(preds: torch.Tensor) -> torch.Tensor:
    return preds.mean(dim=0)


class Ensemble(nn.Module):
    """A collection of predictors whose outputs are combined.

    Guarantees of every prediction method (``predict_members``, ``predict_member_probs``,
    ``predict_proba``, ``predict_log_proba``, ``predict_with_labels``, ``forward``):

    * **Side-effect free.** Members run in eval mode (dropout off, BatchNorm on its running
      statistics; a stochastic ensemble switches on only the random layers it samples) under
      :func:`torch.no_grad`; every module's ``training`` flag and the grad mode are restored
      exactly afterwards, also when a member raises; BatchNorm statistics never change.
    * **Fixed members.** Member ``m`` is the same function of ``x`` on every call, whatever the
      batch size, split or row order; for stochastic ensembles until :meth:`resample` (except
      the explicit, incoherent ``mask="per_sample"`` opt-in of :meth:`from_stochastic`).
    * **Any input.** A tensor, numpy array or nested list, or an iterable of batches (a
      ``DataLoader`` yielding ``x`` or ``(x, y, ...)``); floating inputs are converted to the
      members' dtype and device; ``batch_size`` slices an array, ``progress=True`` shows a tqdm
      bar. Bad members (a tuple or dict output, wrong rows, NaN / inf, probabilities off the
      simplex) raise a ``ValueError`` naming the member.

    Args:
        members: a :class:`~bensemble.core.member.MemberAdapter` (or a list of ``nn.Module``,
            wrapped in :class:`~bensemble.core.member.ExplicitMembers`).
        combiner: maps raw member outputs ``[M, B, *]`` to one prediction ``[B, *]``; default
            ``None`` is the mean over members of the raw outputs (bensemble 0.2's forward). Use a
            module-level function or an ``nn.Module`` (a lambda cannot be pickled by
            :func:`torch.save`).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> members = [nn.Linear(4, 3) for _ in range(5)]
        >>> ens = Ensemble.from_models(members)
        >>> x = torch.randn(8, 4)
        >>> ens.predict_members(x).shape, ens.predict_proba(x).shape
        (torch.Size([5, 8, 3]), torch.Size([8, 3]))
    """

    def __init__(
        self,
        members: MemberAdapter | Sequence[nn.Module],
        combiner: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(members, (list, tuple, nn.ModuleList)):
            members = ExplicitMembers(members)
        if not isinstance(members, MemberAdapter):
            raise ValueError(
                "Ensemble: `members` must be a MemberAdapter or a list of nn.Module "
                f"(got {type(members).__name__})"
            )
        if combiner is not None and not callable(combiner):
            raise ValueError(
                f"Ensemble: `combiner` must be callable or None (got {type(combiner).__name__})"
            )
        self.members = members
        self.combiner = combiner

    # ------------------------------------------------------------------ predictions
    def _stream(
        self, x: Any, fn: str, reduce: Any, *, batch_size: Any, progress: bool, **options: Any
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Predict every batch of ``x`` (:func:`~bensemble.core._predict.stream_predictions`)."""
        return stream_predictions(
            self.members, x, fn, reduce, batch_size=batch_size, progress=progress, **options
        )

    def predict_members(
        self,
        x: Any,
        *,
        batch_size: int | None = None,
        progress: bool = False,
        input_key: str | int | None = None,
        label_key: str | int | None = None,
        batch_fn: Callable[[Any], Any] | None = None,
    ) -> MemberPredictions:
        """Raw member outputs ``[M, N, *]`` (logits for networks, probabilities for trees).

        Args:
            x: a tensor, numpy array or nested list ``[N, *features]``, or an iterable of
                batches (a ``DataLoader`` yielding ``x`` or ``(x, y, ...)``). Floating inputs are
                converted to the members' dtype and device.
            batch_size: predict an array input in slices of this many rows (bounded memory);
                the result does not depend on it (member ``m`` is one fixed function).
            progress: show a tqdm bar over batches (hidden when the output is not a terminal).
            input_key, label_key: the entries of dict batches (``{"image": x, "label": y}``:
                ``input_key="image", label_key="label"``) or positions in tuple batches that
                hold the input and the labels (default: a dict goes to the members whole, a
                tuple is ``(x, y, ...)``).
            batch_fn: ``batch_fn(batch)`` returns ``x`` or ``(x, y)``: any other batch layout.
        """
        fn = "Ensemble.predict_members"
        keys = (input_key, label_key, batch_fn)
        return self._stream(x, fn, None, batch_size=batch_size, progress=progress, keys=keys)[0]

    def _member_probs(self, preds: torch.Tensor) -> torch.Tensor:
        return preds.softmax(dim=-1) if self.members.output_kind == "logits" else preds

    def _member_log_probs(self, preds: torch.Tensor) -> torch.Tensor:
        return preds.log_softmax(dim=-1) if self.members.output_kind == "logits" else preds.log()

    def predict_member_probs(
        self,
        x: Any,
        *,
        batch_size: int | None = None,
        progress: bool = False,
        input_key: str | int | None = None,
        label_key: str | int | None = None,
        batch_fn: Callable[[Any], Any] | None = None,
    ) -> torch.Tensor:
        """Member probabilities ``[M, N, K]``: softmax of logits; probabilities as they are.

        The arguments are those of :meth:`predict_members`.
        """
        fn = "Ensemble.predict_member_probs"
        keys = (input_key, label_key, batch_fn)
        preds = self._stream(x, fn, None, batch_size=batch_size, progress=progress, keys=keys)[0]
        return self._member_probs(preds)

    def predict_with_labels(
        self,
        data: Any,
        *,
        batch_size: int | None = None,
        progress: bool = False,
        input_key: str | int | None = None,
        label_key: str | int | None = None,
        batch_fn: Callable[[Any], Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Member probabilities ``[M, N, K]`` and the labels ``[N]``, gathered in one pass.

        ``data`` yields ``(x, y, ...)`` batches (a ``DataLoader`` over a labelled dataset), or
        dict / other batches read with ``input_key`` / ``label_key`` / ``batch_fn`` (see
        :meth:`predict_members`); the labels are concatenated in the order the predictions were
        made, so a shuffling loader cannot misalign them. Labels come back on the CPU with the
        dtype the loader gave.
        """
        fn = "Ensemble.predict_with_labels"
        keys = (input_key, label_key, batch_fn)
        preds, labels = self._stream(
            data, fn, None, batch_size=batch_size, progress=progress, labels=True, keys=keys
        )
        return self._member_probs(preds), labels

    def forward(self, x: Any) -> Predictions:
        """The combined raw prediction ``[N, *]`` (default: mean of the raw member outputs)."""
        combine = self.combiner if self.combiner is not None else _mean_over_members
        return self._stream(x, "Ensemble.forward", combine, batch_size=None, progress=False)[0]

    def predict_proba(
        self,
        x: Any,
        *,
        batch_size: int | None = None,
        progress: bool = False,
        input_key: str | int | None = None,
        label_key: str | int | None = None,
        batch_fn: Callable[[Any], Any] | None = None,
    ) -> torch.Tensor:
        """The Bayesian model average ``[N, K]``: the mean over members of their probabilities.

        ``p(y | x) = (1/M) sum_m p_m(y | x)``; not the softmax of the mean logits. The arguments
        are those of :meth:`predict_members`; member predictions are averaged batch by batch,
        so memory holds ``[N, K]``, not ``[M, N, K]``.
        """
        fn = "Ensemble.predict_proba"

        def reduce(preds: torch.Tensor) -> torch.Tensor:
            return self._member_probs(preds).mean(dim=0)

        keys = (input_key, label_key, batch_fn)
        return self._stream(x, fn, reduce, batch_size=batch_size, progress=progress, keys=keys)[0]

    def predict_log_proba(
        self,
        x: Any,
        *,
        batch_size: int | None = None,
        progress: bool = False,
        input_key: str | int | None = None,
        label_key: str | int | None = None,
        batch_fn: Callable[[Any], Any] | None = None,
    ) -> torch.Tensor:
        """``log p(y | x)`` ``[N, K]`` of the model average, computed stably (the arguments are
        those of :meth:`predict_members`).

        ``log((1/M) sum_m p_m) = logsumexp_m(log p_m) - log M`` from member log-probabilities
        (``log_softmax`` of logits), so it is finite wherever some member gives the class a
        positive probability, even where another member's softmax underflows to 0;
        ``predict_log_proba(x).exp()`` equals :meth:`predict_proba` up to rounding.

        These are the logits to give :class:`~bensemble.calibration.TemperatureScaling` for an
        ensemble: their softmax is the ensemble's probabilities, whereas the mean of the member
        logits is a different model (the softmax of mean logits is not the model average).
        """
        fn = "Ensemble.predict_log_proba"
        log_m = math.log(self.num_members)

        def reduce(preds: torch.Tensor) -> torch.Tensor:
            return torch.logsumexp(self._member_log_probs(preds), dim=0) - log_m

        keys = (input_key, label_key, batch_fn)
        return self._stream(x, fn, reduce, batch_size=batch_size, progress=progress, keys=keys)[0]

    def sample_masks(self) -> contextlib.AbstractContextManager:
        """bensemble 0.2 compatibility: a context in which the members stay the same.

        Members are fixed hypotheses anyway (see :meth:`resample`), so this changes nothing for
        per-pass masks; see :meth:`bensemble.core.member.StochasticMembers.sample_masks`.
        """
        return self.members.sample_masks()

    def resample(
        self, generator: torch.Generator | None = None, *, seed: int | None = DEFAULT_SEED
    ) -> Ensemble:
        """Draw ``M`` new hypotheses for a stochastic ensemble (MC dropout, DropConnect, ...).

        Until this is called, member ``m`` is the same function on every call. Returns ``self``.
        Explicit members (networks, trees, posterior draws) are fixed: build a new ensemble.
        ``generator`` / ``seed`` as in :meth:`~bensemble.core.member.StochasticMembers.resample`
        (by default the stream the construction started continues).
        """
        resample = getattr(self.members, "resample", None)
        if resample is None:
            raise ValueError(
                "Ensemble.resample: `members` must be stochastic (from_stochastic) to resample "
                f"(got {type(self.members).__name__}, whose members are fixed models; build a "
                "new ensemble instead)"
            )
        resample(generator, seed=seed)
        return self

    # ------------------------------------------------------------------ properties
    @property
    def num_members(self) -> int:
        """Number of members ``M``."""
        return self.members.size

    @property
    def member_modules(self) -> list[nn.Module]:
        """The underlying networks (for KL terms, parameters, devices)."""
        return self.members.member_modules

    @property
    def output_kind(self) -> str:
        """``"logits"`` or ``"probs"``: what :meth:`predict_members` returns."""
        return self.members.output_kind

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_models(
        cls, models: Sequence[nn.Module], output_kind: str = "logits", packed: Any = "auto"
    ) -> Ensemble:
        """An explicit ensemble of independent networks (e.g. a deep ensemble).

        Args:
            models: the member networks.
            output_kind: ``"logits"`` or ``"probs"``.
            packed: ``"auto"`` (default) evaluates tiny ``nn.Sequential`` Linear / activation
                members of one architecture together (:class:`~bensemble.core.packed.
                PackedMembers`, chosen per call by a size rule) and loops otherwise; ``True``
                requires packable members; ``False`` always loops (bensemble 0.2). Packed and
                looped outputs agree up to float rounding (about 1e-7 in float32).
        """
        packed = check_option(packed, "packed", PACKED_OPTIONS, "Ensemble.from_models")
        models = list(models) if not isinstance(models, nn.Module) else models
        if packed is True or (
            packed == "auto" and not isinstance(models, nn.Module) and packable(models)
        ):
            return cls(members=PackedMembers(models, output_kind=output_kind, packed=packed))
        return cls(members=ExplicitMembers(models, output_kind=output_kind))

    @classmethod
    def from_stochastic(
        cls,
        model: nn.Module,
        num_samples: int = 30,
        mode: str = "auto",
        mask: str = "per_pass",
        generator: torch.Generator | None = None,
        *,
        seed: int | None = DEFAULT_SEED,
        **kwargs: Any,
    ) -> Ensemble:
        """An implicit ensemble of ``num_samples`` fixed hypotheses of one random network.

        Member ``m`` is one mask / weight draw, derived from a per-member seed drawn here from
        ``generator``, else from ``seed`` (default 0: identical calls build identical members;
        ``seed=None``: torch's global random state): the same function of ``x`` on
        every call, however the data is batched, until :meth:`resample`. See
        :class:`~bensemble.core.member.StochasticMembers` for ``mode`` (``"auto"`` is resolved:
        ``ensemble.members.mode`` says what was found), ``mask`` (``"per_sample"``: per-row
        noise, an incoherent opt-in) and the keyword options (``trunk``, ``head``, ...).
        """
        return cls(
            members=StochasticMembers(
                model,
                num_samples=num_samples,
                mode=mode,
                mask=mask,
                generator=generator,
                seed=seed,
                **kwargs,
            )
        )

    @classmethod
    def from_posterior(
        cls, source: PosteriorSource, n_members: int = 10, **kwargs: Any
    ) -> Ensemble:
        """An explicit ensemble of ``n_members`` networks sampled by ``source.sample_models``."""
        fn = "Ensemble.from_posterior"
        if not isinstance(source, PosteriorSource):
            raise ValueError(
                f"{fn}: `source` must have a sample_models(n_models) method "
                f"(got {type(source).__name__})"
            )
        # at least one network object per member, before the source builds any
        n_members = check_count(n_members, "n_members", fn, per_count=1, itemsize=MIN_MEMBER_BYTES)
        models = source.sample_models(n_members, **kwargs)
        if isinstance(models, nn.Module) and not isinstance(models, nn.ModuleList):
            models = [models]
        models = list(models)
        if len(models) != n_members:
            raise ValueError(
                f"{fn}: `source.sample_models` must return n_members={n_members} models "
                f"(returned {len(models)} models)"
            )
        return cls(members=ExplicitMembers(models))

    @classmethod
    def from_sklearn(cls, estimator: Any) -> Ensemble:
        """Members from scikit-learn: the trees of a fitted forest / bagging classifier, or a
        list of fitted classifiers (pipelines included) with ``predict_proba``.

        See :class:`~bensemble.core.sklearn_members.SklearnMembers`; members give probabilities.
        """
        return cls(members=SklearnMembers(estimator))
