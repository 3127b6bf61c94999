"""The nn.Module battery's cases: one line per module the package ships (issue 19, item 1).

A :class:`ModuleCase` says how to build the module from a seed (two seeds give two different
modules of one architecture, so a state_dict round trip is a real test), what to feed it and how
to read its output. ``name`` is the public name the case covers (``"Ensemble[dropout]"`` also
covers ``Ensemble``); names with ``()`` are modules a public function returns (sampled posterior
networks, search results, pruned networks). test_battery_modules.py runs every check on every case.

Adding a module: one ``ModuleCase(...)`` line below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bensemble import Ensemble, losses
from bensemble.calibration import (
    BetaCalibration,
    DirichletCalibration,
    EpistemicRecalibrator,
    HistogramBinningCalibration,
    IsotonicCalibration,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
)
from bensemble.core import ExplicitMembers, PackedMembers, SklearnMembers, StochasticMembers
from bensemble.layers import BayesianConv2d, BayesianLinear, DropConnectLinear
from bensemble.methods import PBPEngine, PBPNet, ProbLinear, make_mlp
from bensemble.regression import QuantileRecalibration, VarianceScaling
from bensemble.search import RandomSearcher, SearchSpace
from bensemble.utils import prune_model


@dataclass(frozen=True)
class ModuleCase:
    """How the battery builds, feeds and reads one module.

    Attributes:
        name: the public name covered (``"Name[variant]"`` or ``"function()"``).
        build: ``build(seed)`` -> a fresh module; different seeds, different parameters/members.
        inputs: ``inputs()`` -> the positional arguments of ``call`` (float32 tensors).
        call: ``call(module, *inputs)`` -> a tensor or a tuple of tensors (default: forward).
        meta_forward: whether a forward pass on the ``"meta"`` device must work.
        state_complete: whether the ``state_dict`` holds everything the output depends on.
        why: the reason for a ``False`` flag above.
    """

    name: str
    build: Callable[[int], nn.Module]
    inputs: Callable[[], tuple]
    call: Callable[..., Any] | None = None
    meta_forward: bool = True
    state_complete: bool = True
    why: str = ""

    def output(self, module: nn.Module, *inputs: Any) -> Any:
        with torch.no_grad():
            return module(*inputs) if self.call is None else self.call(module, *inputs)


def _seeded(factory: Callable[[], nn.Module]) -> Callable[[int], nn.Module]:
    def build(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return factory().eval()

    return build


def _x(*shape: int) -> Callable[[], tuple]:
    return lambda: (torch.randn(*shape, generator=torch.Generator().manual_seed(99)),)


def _sampled(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One forced draw of a stochastic layer from a fixed generator (a member's function)."""
    module.force_sample, module.sample_generator = True, torch.Generator().manual_seed(7)
    try:
        return module(x)
    finally:
        module.force_sample, module.sample_generator = False, None


def _members(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module.predict_members(x) if isinstance(module, Ensemble) else module.predict_all(x)


def _mlp(dropout=None, dropconnect_p=None) -> nn.Module:
    return make_mlp(4, 3, hidden=(8,), dropout=dropout, dropconnect_p=dropconnect_p)


def _bayes_net() -> nn.Module:
    return nn.Sequential(BayesianLinear(4, 8), nn.ReLU(), BayesianLinear(8, 3))


def _stochastic(factory: Callable[[], nn.Module], **kw: Any) -> Callable[[int], nn.Module]:
    def build(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return StochasticMembers(factory(), num_samples=3, seed=seed, **kw)

    return build


def _forest(seed: int) -> nn.Module:
    from sklearn.ensemble import RandomForestClassifier

    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(40, 4, generator=g).numpy(), torch.randint(0, 3, (40,), generator=g).numpy()
    forest = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=seed).fit(x, y)
    return SklearnMembers(forest)


def _pbp_net() -> nn.Module:
    return PBPNet([4, 6, 2])


def _pbp_sample(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 4, generator=g)
    engine = PBPEngine(layer_sizes=[4, 6, 1])
    engine.fit([(x, x.sum(1))], num_epochs=1, seed=0)
    return engine.sample_models(1, generator=g)[0]


def _laplace_sample(seed: int) -> nn.Module:
    from bensemble.methods import LaplaceApproximation

    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    x = torch.randn(24, 4, generator=torch.Generator().manual_seed(seed))
    laplace = LaplaceApproximation(net, likelihood="regression", seed=seed)
    laplace.compute_curvature((x, x[:, :2]))
    return laplace.sample_models(1)[0]


def _last_layer_sample(seed: int) -> nn.Module:
    from bensemble.methods import LastLayerLaplace

    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(24, 4, generator=g), torch.randint(0, 3, (24,), generator=g)
    laplace = LastLayerLaplace(net, prior_precision=1.0).fit((x, y))
    return laplace.sample_models(1, generator=g)[0]


class _TinySpace(SearchSpace):
    def sample(self, generator=None) -> dict:
        return {"hidden": 6}

    def mutate(self, config: dict, generator=None) -> dict:
        return dict(config)

    def build(self, config: dict) -> nn.Module:
        return make_mlp(4, 3, hidden=(config["hidden"],))


def _searched(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(12, 4, generator=g), torch.randint(0, 3, (12,), generator=g))]
    searcher = RandomSearcher(_TinySpace(), 3, 2, train_fn=lambda m: None, seed=0)
    return searcher.search(data)


def _pruned() -> nn.Module:
    net = _bayes_net()
    prune_model(net, threshold=5.0)
    return net


def _prob_linear_moments(module: nn.Module) -> torch.Tensor:
    return torch.cat([module.m, module.v])


def _gaussian_nll(module: nn.Module, preds: torch.Tensor) -> torch.Tensor:
    return module(preds, preds.flip(0))


def _variational(module: nn.Module, preds: torch.Tensor) -> torch.Tensor:
    return module(preds[None], preds.flip(0), torch.tensor(0.5, dtype=preds.dtype))


def _calibrate(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module(x)


def _fitted_calibrator(make: Callable[[], nn.Module]) -> Callable[[int], nn.Module]:
    """A calibrator of probabilities fitted on seed-dependent over-confident predictions."""

    def build(seed: int) -> nn.Module:
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(0, 3, (200,), generator=g)
        z = torch.randn(200, 3, generator=g) + 1.5 * torch.nn.functional.one_hot(y, 3)
        return make().fit((2.0 * z).softmax(-1), y)

    return build


def _probs_in(*shape: int) -> Callable[[], tuple]:
    return lambda: ((torch.randn(*shape, generator=torch.Generator().manual_seed(99))).softmax(-1),)


def _recalibrator(seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (200,), generator=g)
    z = torch.randn(200, 3, generator=g) + 1.5 * torch.nn.functional.one_hot(y, 3)
    members = (z + 0.8 * torch.randn(4, 200, 3, generator=g)).softmax(-1)
    return EpistemicRecalibrator().fit(members, y)


_VALUES = "checks the values of its input (finite logits), which meta tensors do not have"
_NO_META_NOISE = "draws its members from CPU generators: no noise can be drawn on 'meta'"
_SKLEARN = "the scikit-learn trees are Python objects outside the state_dict"


def _regression_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[3, 40, 2]`` (mean, variance) members and labels whose spread depends on the seed."""
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(3, 40, generator=g)
    variances = 0.1 + torch.rand(3, 40, generator=g)
    y = means.mean(0) + (1.0 + seed) * torch.randn(40, generator=g)
    return torch.stack([means, variances], -1), y


def _regression_x() -> tuple[torch.Tensor]:
    return (_regression_data(99)[0][:, :5],)


_RECALIBRATOR = "a recalibrator checks the values of its input (finite, variances >= 0)"

MODULE_CASES: list[ModuleCase] = [
    # layers
    ModuleCase("BayesianLinear", _seeded(lambda: BayesianLinear(4, 3)), _x(5, 4)),
    ModuleCase(
        "BayesianLinear[sampled]", _seeded(lambda: BayesianLinear(4, 3)), _x(5, 4), _sampled
    ),
    ModuleCase(
        "BayesianConv2d", _seeded(lambda: BayesianConv2d(2, 3, 3, padding=1)), _x(2, 2, 5, 5)
    ),
    ModuleCase(
        "BayesianConv2d[sampled]",
        _seeded(lambda: BayesianConv2d(2, 3, 3)),
        _x(2, 2, 5, 5),
        _sampled,
    ),
    ModuleCase("DropConnectLinear", _seeded(lambda: DropConnectLinear(4, 3, p=0.3)), _x(5, 4)),
    ModuleCase(
        "DropConnectLinear[sampled]", _seeded(lambda: DropConnectLinear(4, 3)), _x(5, 4), _sampled
    ),
    ModuleCase("prune_model()", _seeded(_pruned), _x(5, 4)),
    # regression recalibrators (fitted on seed-dependent data)
    ModuleCase(
        "VarianceScaling",
        lambda seed: VarianceScaling().fit(*_regression_data(seed)).eval(),
        _regression_x,
        meta_forward=False,
        why=_RECALIBRATOR,
    ),
    ModuleCase(
        "QuantileRecalibration",
        lambda seed: QuantileRecalibration(n_quantiles=5).fit(*_regression_data(seed)).eval(),
        _regression_x,
        meta_forward=False,
        why=_RECALIBRATOR,
    ),
    # member adapters and ensembles
    ModuleCase("ExplicitMembers", _seeded(lambda: ExplicitMembers([_mlp(), _mlp()])), _x(5, 4)),
    ModuleCase(
        "PackedMembers", _seeded(lambda: PackedMembers([_mlp(), _mlp()], packed=True)), _x(5, 4)
    ),
    ModuleCase(
        "StochasticMembers[dropout]",
        _stochastic(lambda: _mlp(dropout=0.3)),
        _x(5, 4),
        meta_forward=False,
        why=_NO_META_NOISE,
    ),
    ModuleCase(
        "StochasticMembers[dropconnect]",
        _stochastic(lambda: _mlp(dropconnect_p=0.3)),
        _x(5, 4),
        meta_forward=False,
        why=_NO_META_NOISE,
    ),
    ModuleCase(
        "StochasticMembers[bayesian]",
        _stochastic(_bayes_net),
        _x(5, 4),
        meta_forward=False,
        why=_NO_META_NOISE,
    ),
    ModuleCase(
        "StochasticMembers[repeat]",
        _stochastic(lambda: _mlp(dropconnect_p=0.3), strategy="repeat"),
        _x(5, 4),
        meta_forward=False,
        why=_NO_META_NOISE,
    ),
    ModuleCase(
        "SklearnMembers", _forest, _x(5, 4), meta_forward=False, state_complete=False, why=_SKLEARN
    ),
    ModuleCase(
        "Ensemble",
        _seeded(lambda: Ensemble.from_models([_mlp(), _mlp()], packed=False)),
        _x(5, 4),
        _members,
    ),
    ModuleCase(
        "Ensemble[stochastic]",
        lambda s: Ensemble(_stochastic(_bayes_net)(s)),
        _x(5, 4),
        _members,
        meta_forward=False,
        why=_NO_META_NOISE,
    ),
    ModuleCase("RandomSearcher.search()", _searched, _x(5, 4), _members),
    # calibration modules (module behaviour; fitting is the estimator battery's)
    ModuleCase(
        "TemperatureScaling",
        lambda s: TemperatureScaling(init_temp=1.7 + s),
        _x(5, 3),
        _calibrate,
        meta_forward=False,
        why=_VALUES,
    ),
    ModuleCase(
        "VectorScaling",
        _seeded(lambda: _perturbed(VectorScaling(3))),
        _x(5, 3),
        meta_forward=False,
        why=_VALUES,
    ),
    ModuleCase(
        "MatrixScaling",
        _seeded(lambda: _perturbed(MatrixScaling(3))),
        _x(5, 3),
        meta_forward=False,
        why=_VALUES,
    ),
    *[
        ModuleCase(
            cls.__name__, _fitted_calibrator(cls), _probs_in(5, 3), meta_forward=False, why=_VALUES
        )  # fmt: skip
        for cls in (
            IsotonicCalibration,
            HistogramBinningCalibration,
            BetaCalibration,
            DirichletCalibration,
        )
    ],
    ModuleCase(
        "EpistemicRecalibrator",
        _recalibrator,
        lambda: (torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(99)).softmax(-1),),
        meta_forward=False,
        why=_VALUES,
    ),
    # methods
    ModuleCase("PBPNet", _seeded(_pbp_net), _x(5, 4)),
    ModuleCase("ProbLinear", _seeded(lambda: ProbLinear(4, 3)), tuple, _prob_linear_moments),
    ModuleCase("PBPEngine.sample_models()", _pbp_sample, _x(5, 4)),
    ModuleCase("LaplaceApproximation.sample_models()", _laplace_sample, _x(5, 4)),
    ModuleCase("LastLayerLaplace.sample_models()", _last_layer_sample, _x(5, 4)),
    ModuleCase("make_mlp()", _seeded(lambda: _mlp(dropout=0.2, dropconnect_p=0.2)), _x(5, 4)),
    # losses
    ModuleCase(
        "GaussianLikelihood", lambda s: losses.GaussianLikelihood(-1.0 - s), _x(6, 2), _gaussian_nll
    ),
    ModuleCase(
        "VariationalLoss",
        lambda s: losses.VariationalLoss(losses.GaussianLikelihood(-1.0 - s), alpha=0.5),
        _x(6, 2),
        _variational,
    ),
]


def _perturbed(module: nn.Module) -> nn.Module:
    """Parameters moved off their identity initialisation (random, from the global seed)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return module


def _torchmetrics_cases() -> list[ModuleCase]:
    """The torchmetrics classes are nn.Modules too (their metric behaviour: battery_meters)."""
    try:
        from bensemble.integrations import torchmetrics as tm
    except ImportError:  # pragma: no cover - optional extra
        return []

    def probs() -> tuple:
        g = torch.Generator().manual_seed(3)
        return (
            torch.softmax(torch.randn(8, 3, generator=g), -1),
            torch.randint(0, 3, (8,), generator=g),
        )

    def members() -> tuple:
        g = torch.Generator().manual_seed(3)
        p = torch.softmax(torch.randn(4, 8, 3, generator=g), -1)
        return (p, torch.randint(0, 3, (8,), generator=g))

    def run(metric: nn.Module, *batch: torch.Tensor) -> torch.Tensor:
        metric.reset()
        metric.update(*batch)
        return metric.compute()

    def _centroids() -> torch.Tensor:
        return torch.tensor([[0.2, 0.3, 0.1, 0.2], [0.7, 0.6, 0.8, 0.9]])  # [bins, M]

    why = "a torchmetrics Metric keeps no parameters and states are re-initialised on 'meta'"
    cases = []
    for cls, data, kw in (
        (tm.ExpectedCalibrationError, probs, {}),
        (tm.ClasswiseCalibrationError, probs, {"num_classes": 3}),
        (tm.NegativeLogLikelihood, probs, {}),
        (tm.BrierScore, probs, {}),
    ):
        cases.append(
            ModuleCase(
                cls.__name__,
                lambda s, c=cls, kw=kw: c(**kw),
                data,
                run,
                meta_forward=False,
                why=why,
            )
        )

    def eece() -> nn.Module:
        return tm.ExpectedEpistemicCalibrationError(_centroids(), num_classes=3)

    name = "ExpectedEpistemicCalibrationError"
    cases.append(ModuleCase(name, lambda s: eece(), members, run, meta_forward=False, why=why))
    return cases


MODULE_CASES += _torchmetrics_cases()

#: Public names the module battery covers (a case "Name[variant]" covers "Name").
MODULE_NAMES = sorted({case.name.split("[")[0] for case in MODULE_CASES if "()" not in case.name})
