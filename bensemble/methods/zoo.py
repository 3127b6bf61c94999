"""The nine uncertainty methods of Hoarau's epistemic-calibration paper, behind one call.

:func:`member_probs` trains one method on ``(x_train, y_train)`` and returns its member
predictions ``[H, N, K]`` on ``x_eval``: the currency every metric consumes. It is glue over the
public API only (``bensemble.methods``, ``bensemble.core.Ensemble``); the experiments, the demo
and the tests share it so that every table uses the same settings.

Hyper-parameters follow the paper's appendix B.1.1: hidden layers ``(100, 20)``, Adam, 20
epochs, 10 deep-ensemble members, MC dropout ``p = (0.3, 0.2)`` on the last two layers,
DropConnect ``p = 0.3``, last-layer Laplace with 100 samples, 100 trees with
``min_samples_leaf = 5``, Bayesian logistic regression with prior ``N(0, 0.5)``, centroids with
``sigma = sqrt(10)`` and DUQ's kernel (squared distance averaged over the features), 10-NN
relative likelihood, EK-NN with ``k = 12, alpha = 0.4, beta = 0.5``. The illustrative methods are
binary only (as in the paper).

Two of the paper's definitions leave a choice, exposed as settings with the reading closest to
the paper's published numbers as default: ``centroids_distance`` (``"mean"``, DUQ's, which gives
the paper's Centroids ECE of about 0.37; ``"sum"``) and ``likelihood`` (a name of
:data:`~bensemble.methods.relative_likelihood.READINGS`; ``"rescaled-distance"``, the only
reading measured near the paper's Likelihood EECE of 0.14).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from bensemble._options import check_count, check_seed
from bensemble._validation import as_float_tensor, as_labels, check_option
from bensemble.core import Ensemble
from bensemble.methods.bayesian_logistic import BayesianLogisticRegression
from bensemble.methods.centroids import DISTANCES, Centroids
from bensemble.methods.deep_ensemble import train_ensemble, train_model
from bensemble.methods.evidential_knn import EvidentialKNN
from bensemble.methods.forest import RandomForestMembers
from bensemble.methods.laplace import LastLayerLaplace
from bensemble.methods.mlp import make_mlp
from bensemble.methods.relative_likelihood import READINGS, RelativeLikelihood

__all__ = [
    "ACTIVE_METHODS",
    "ILLUSTRATIVE_METHODS",
    "PAPER_ORDER",
    "LossLog",
    "ZooSettings",
    "illustrative_outputs",
    "member_probs",
]

#: The paper's column order (tables 1 and 2).
PAPER_ORDER = (
    "Centroids",
    "DropConnect",
    "Bayesian Log. Reg.",
    "Likelihood",
    "EK-NN",
    "Random Forest",
    "MC-Dropout",
    "Deep Ensemble",
    "Bayesian Deep",
)
#: Methods whose EU is the variance of a second-order distribution.
ACTIVE_METHODS = (
    "Deep Ensemble",
    "MC-Dropout",
    "DropConnect",
    "Bayesian Deep",
    "Bayesian Log. Reg.",
    "Random Forest",
)
#: Methods with another notion of EU, turned into members by phi ~ N(h(x), sqrt(EU(x))).
ILLUSTRATIVE_METHODS = ("Centroids", "Likelihood", "EK-NN")


@dataclass(frozen=True)
class ZooSettings:
    """Settings shared by the nine methods (defaults: the paper's appendix B.1.1).

    ``batch_size=None`` trains the networks full batch (one Adam step per epoch); ``lr`` is
    Adam's learning rate (the paper does not give one; 1e-3 is Adam's default).
    ``centroids_distance`` and ``likelihood`` choose the illustrative methods' readings (see the
    module docstring).
    """

    epochs: int = 20
    batch_size: int | None = 32
    lr: float = 1e-3
    hidden: tuple[int, ...] = (100, 20)
    n_members: int = 10
    n_samples: int = 100
    dropout: tuple[float, ...] = (0.3, 0.2)
    dropconnect_p: float = 0.3
    n_trees: int = 100
    min_samples_leaf: int = 5
    blr_draws: int = 1000
    blr_burn_in: int = 500
    centroids_distance: str = "mean"
    likelihood: str = "rescaled-distance"
    progress: bool = False

    def __post_init__(self) -> None:
        fn = "ZooSettings"
        for name in ("epochs", "n_members", "n_samples", "n_trees", "blr_draws"):
            check_count(getattr(self, name), name, fn)
        if self.batch_size is not None:  # None: full batch
            check_count(self.batch_size, "batch_size", fn)
        check_count(self.min_samples_leaf, "min_samples_leaf", fn)
        check_count(self.blr_burn_in, "blr_burn_in", fn, minimum=0)
        if not isinstance(self.hidden, tuple) or not self.hidden:
            raise ValueError(f"{fn}: `hidden` must be a non-empty tuple (got {self.hidden!r})")
        for width in self.hidden:
            check_count(width, "hidden", fn)
        probabilities = {"dropconnect_p": (self.dropconnect_p,), "dropout": self.dropout}
        for name, values in probabilities.items():
            for p in values:
                if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
                    raise ValueError(f"{fn}: `{name}` must lie in [0, 1) (got {p!r})")
        check_option(self.centroids_distance, "centroids_distance", DISTANCES, fn)
        check_option(self.likelihood, "likelihood", tuple(READINGS), fn)
        if not isinstance(self.progress, bool):
            raise ValueError(f"{fn}: `progress` must be True or False (got {self.progress!r})")

    @classmethod
    def quick(cls, **overrides: Any) -> ZooSettings:
        """Smaller settings for tests and ``--quick`` runs (same structure, fewer draws)."""
        base = cls(epochs=10, n_members=5, n_samples=30, n_trees=30, blr_draws=300, blr_burn_in=200)
        return replace(base, **overrides)


class LossLog:
    """Cross-entropy loss that records the value of every training step (a ``loss_fn``).

    ``curves(steps)`` splits the record into one curve per network of ``steps`` steps;
    :meth:`flatness` is how much the loss still moved at the end of training.
    """

    def __init__(self) -> None:
        self.values: list[float] = []

    def __call__(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.values.append(float(loss.detach()))
        return loss

    @staticmethod
    def flatness(curve: list[float]) -> tuple[float, float]:
        """``(final loss, change)`` of one curve: the final loss is the mean over the last 10%
        of steps, the change ``|mean(last 10%) - mean(previous 10%)| / loss(step 1)`` (the
        loss of a net that interpolates its training points goes to 0, so a change relative
        to the final value would never be small; relative to the start it says the curve is
        flat)."""
        k = max(1, len(curve) // 10)
        last = sum(curve[-k:]) / k
        prev_window = curve[-2 * k : -k] or curve[:1]
        prev = sum(prev_window) / len(prev_window)
        return last, abs(last - prev) / max(curve[0], 1e-12)


def _batch_size(settings: ZooSettings, n: int) -> int:
    return n if settings.batch_size is None else min(settings.batch_size, n)


def _optimizer(settings: ZooSettings):
    return lambda params: torch.optim.Adam(params, lr=settings.lr)


def _training(settings: ZooSettings, n: int, seed: int, log: LossLog | None) -> dict[str, Any]:
    """The keyword arguments every network of the zoo is trained with."""
    return {
        "epochs": settings.epochs, "batch_size": _batch_size(settings, n),
        "optimizer": _optimizer(settings), "loss_fn": log, "seed": seed,
        "progress": settings.progress,
    }  # fmt: skip


def _train_net(model, x, y, settings: ZooSettings, seed: int, log: LossLog | None = None):
    return train_model(model, (x, y), **_training(settings, x.shape[0], seed, log))


#: The paper's EK-NN neighbourhood (appendix B.1.1).
EKNN_NEIGHBOURS = 12


def _illustrative_estimator(method: str, settings: ZooSettings, n_train: int):
    """The unfitted estimator of an illustrative method and a note (EK-NN on < 12 points)."""
    if method == "Centroids":
        return Centroids(distance=settings.centroids_distance), None
    if method == "Likelihood":
        return RelativeLikelihood.reading(settings.likelihood), None
    k = min(EKNN_NEIGHBOURS, n_train)
    note = None
    if k < EKNN_NEIGHBOURS:
        note = (
            f"EK-NN: k = {k} (all training points); the paper's k = {EKNN_NEIGHBOURS} "
            f"needs at least {EKNN_NEIGHBOURS} training points"
        )
    return EvidentialKNN(n_neighbors=k), note


def illustrative_outputs(
    method: str,
    x_train: Any,
    y_train: Any,
    x_eval: Any,
    *,
    settings: ZooSettings | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str | None]:
    """Fit an illustrative method; return ``(h(x) [N], EU(x) [N], note or None)`` on ``x_eval``.

    EK-NN uses the paper's ``k = 12`` neighbours, or every training point when there are fewer
    (the note says so); the Likelihood's reading (``settings.likelihood``) needs at least its
    ``n_neighbors`` training points.
    """
    fn = "illustrative_outputs"
    method = check_option(method, "method", ILLUSTRATIVE_METHODS, fn)
    x_tr = as_float_tensor(x_train, "x_train", fn, ndim=2)
    y_tr = as_labels(y_train, "y_train", fn, n=x_tr.shape[0])
    x_ev = as_float_tensor(x_eval, "x_eval", fn, ndim=2)
    estimator, note = _illustrative_estimator(method, settings or ZooSettings(), x_tr.shape[0])
    estimator.fit(x_tr, y_tr)
    probs = estimator.predict_proba(x_ev)
    return probs[:, 1], estimator.epistemic_uncertainty(x_ev), note


def member_probs(
    method: str,
    x_train: Any,
    y_train: Any,
    x_eval: Any,
    *,
    settings: ZooSettings | None = None,
    seed: int = 0,
    training_log: list[list[float]] | None = None,
) -> torch.Tensor:
    """Train ``method`` and return its member probabilities on ``x_eval``.

    Args:
        method: one of :data:`PAPER_ORDER`.
        x_train: training inputs ``[N_train, D]``.
        y_train: integer labels ``[N_train]``.
        x_eval: evaluation inputs ``[N, D]``; pass every split you will score (calibration and
            test) in one call so that all of them see the *same* members.
        settings: hyper-parameters (default: the paper's).
        seed: seeds training, sampling and data order.
        training_log: if a list, one loss curve (the loss of every step) per trained network
            is appended to it (nothing for methods without a network).

    Returns:
        member probabilities ``[H, N, K]`` (float64).
    """
    fn = "member_probs"
    method = check_option(method, "method", PAPER_ORDER, fn)
    seed = check_seed(seed, "seed", fn)
    settings = settings or ZooSettings()
    x_tr = as_float_tensor(x_train, "x_train", fn, ndim=2, dtype=torch.float32)
    y_tr = as_labels(y_train, "y_train", fn, n=x_tr.shape[0])
    x_ev = as_float_tensor(x_eval, "x_eval", fn, ndim=2, dtype=torch.float32)
    n_features, n_classes = x_tr.shape[1], int(y_tr.max()) + 1
    n_classes = max(n_classes, 2)
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    log = LossLog() if training_log is not None else None

    if method == "Deep Ensemble":
        members = train_ensemble(
            lambda: make_mlp(n_features, n_classes, settings.hidden),
            (x_tr, y_tr),
            n_members=settings.n_members,
            **_training(settings, x_tr.shape[0], seed, log),
        )
        with torch.no_grad():
            out = Ensemble.from_models(members).predict_member_probs(x_ev)
    elif method in ("MC-Dropout", "DropConnect"):
        if method == "MC-Dropout":
            net = make_mlp(n_features, n_classes, settings.hidden, dropout=settings.dropout)
            mode = "dropout"
        else:
            net = make_mlp(
                n_features, n_classes, settings.hidden, dropconnect_p=settings.dropconnect_p
            )
            mode = "dropconnect"
        net = _train_net(net, x_tr, y_tr, settings, seed, log)
        ensemble = Ensemble.from_stochastic(
            net, num_samples=settings.n_samples, mode=mode, mask="per_pass", generator=g
        )
        out = ensemble.predict_member_probs(x_ev)
    elif method == "Bayesian Deep":
        net = _train_net(
            make_mlp(n_features, n_classes, settings.hidden), x_tr, y_tr, settings, seed, log
        )
        laplace = LastLayerLaplace(net, generator=g).fit((x_tr, y_tr))
        out = laplace.sample_members(x_ev, settings.n_samples, generator=g)
    elif method == "Random Forest":
        forest = RandomForestMembers(
            n_estimators=settings.n_trees,
            min_samples_leaf=settings.min_samples_leaf,
            random_state=seed,
        ).fit(x_tr.double(), y_tr)
        out = forest.sample_members(x_ev.double())
    elif method == "Bayesian Log. Reg.":
        blr = BayesianLogisticRegression(
            prior_var=0.5, n_samples=settings.blr_draws, burn_in=settings.blr_burn_in, seed=seed
        ).fit(x_tr.double(), y_tr)
        out = blr.sample_members(x_ev.double(), n=min(settings.n_samples, settings.blr_draws))
    else:
        estimator, _ = _illustrative_estimator(method, settings, x_tr.shape[0])
        estimator.fit(x_tr.double(), y_tr)
        out = estimator.sample_members(x_ev.double(), settings.n_samples, generator=g)
    if log is not None and log.values:
        n_nets = settings.n_members if method == "Deep Ensemble" else 1
        steps = len(log.values) // n_nets
        training_log.extend(log.values[i * steps : (i + 1) * steps] for i in range(n_nets))
    return out.detach().to(torch.float64)
