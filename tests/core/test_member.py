"""Member adapters: explicit networks and random forward passes of one network."""

import math

import pytest
import torch
from torch import nn

from bensemble.core.member import (
    DROPOUT_TYPES,
    ExplicitMembers,
    MemberAdapter,
    StochasticMembers,
)
from bensemble.layers import BaseBayesianLayer, DropConnectLinear


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _flags(model: nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


class _Bomb(nn.Module):
    """Identity that raises on its `fail_at`-th call."""

    def __init__(self, fail_at: int = 3) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("boom")
        return x


class _GaussianLinear(BaseBayesianLayer):
    """A minimal variational linear layer: one weight sample per pass while sampling."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(prior_sigma=1.0)
        g = _gen(5)
        self.weight_mu = nn.Parameter(torch.randn(n_out, n_in, generator=g))
        self.weight_rho = nn.Parameter(torch.full((n_out, n_in), -1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.sampling:
            return x @ self.weight_mu.T
        eps = torch.randn(self.weight_mu.shape, generator=self.sample_generator)
        w = self.weight_mu + nn.functional.softplus(self.weight_rho) * eps
        return x @ w.T


# ---------------------------------------------------------------------------- the guide's toy
def test_guide_toy_mc_dropout(toy: nn.Sequential, x: torch.Tensor) -> None:
    """The guide's checks: shapes, positive variation, BatchNorm unchanged, flags restored."""
    toy.train()  # a model left in train mode: batch norm must still not move
    toy[4].eval()  # and mixed flags must come back exactly (not a blanket train(flag))
    flags_before = _flags(toy)
    bn_mean = toy[1].running_mean.clone()
    bn_var = toy[1].running_var.clone()
    bn_count = toy[1].num_batches_tracked.clone()

    members = StochasticMembers(toy, num_samples=30, generator=_gen())
    probs = members.predict_all(x).softmax(-1)
    mean, variance = probs.mean(0), probs.var(0, unbiased=False).sum(-1)

    assert tuple(mean.shape) == (6, 3) and tuple(variance.shape) == (6,)
    assert bool((variance > 0).all())
    assert torch.equal(bn_mean, toy[1].running_mean)
    assert torch.equal(bn_var, toy[1].running_var)
    assert torch.equal(bn_count, toy[1].num_batches_tracked)
    assert _flags(toy) == flags_before
    assert not toy[3]._forward_hooks  # masking hooks removed


def _guide_mc_dropout(model: nn.Module, x: torch.Tensor, k: int) -> torch.Tensor:
    """The guide's recipe (eval, then train-mode dropout modules), as an independent reference."""
    flags = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        for m in model.modules():
            if isinstance(m, DROPOUT_TYPES):
                m.train()
        with torch.no_grad():
            return torch.stack([model(x) for _ in range(k)])
    finally:
        for m, f in flags:
            m.training = f


def test_per_sample_equals_the_guide_loop_bit_for_bit(toy: nn.Sequential, x: torch.Tensor) -> None:
    # seed=None opts in to torch's own per-row dropout on the global random state
    torch.manual_seed(7)
    ours = StochasticMembers(toy, num_samples=10, mask="per_sample", seed=None).predict_all(x)
    torch.manual_seed(7)
    reference = _guide_mc_dropout(toy, x, 10)
    assert torch.equal(ours, reference)


def test_flags_restored_when_forward_raises(x: torch.Tensor) -> None:
    bomb = _Bomb(fail_at=3)
    model = nn.Sequential(
        nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), bomb, DropConnectLinear(8, 3)
    )
    model.train()
    model[1].eval()
    model[4].force_sample = False
    flags_before = _flags(model)
    members = StochasticMembers(model, num_samples=5, generator=_gen())
    with pytest.raises(RuntimeError, match="boom"):
        members.predict_all(x)
    assert bomb.calls == 3  # it really failed mid-sampling
    assert _flags(model) == flags_before
    assert not model[2]._forward_hooks
    assert model[4].force_sample is False
    assert model[4].sample_generator is None


# ---------------------------------------------------------------------------- dropout kinds
KIND_CASES = [
    pytest.param(nn.Dropout(0.5), (8, 5), False, id="Dropout"),
    pytest.param(nn.Dropout1d(0.5), (8, 6, 7), True, id="Dropout1d"),
    pytest.param(nn.Dropout2d(0.5), (8, 6, 3, 3), True, id="Dropout2d"),
    pytest.param(nn.Dropout3d(0.5), (8, 6, 2, 3, 3), True, id="Dropout3d"),
    pytest.param(nn.AlphaDropout(0.5), (8, 5), False, id="AlphaDropout"),
    pytest.param(nn.FeatureAlphaDropout(0.5), (8, 6, 3, 3), True, id="FeatureAlphaDropout"),
]


@pytest.mark.parametrize(("drop", "shape", "channelwise"), KIND_CASES)
def test_every_dropout_kind_is_switched_on(drop: nn.Module, shape, channelwise: bool) -> None:
    n_features = math.prod(shape[1:])
    model = nn.Sequential(drop, nn.Flatten(), nn.Linear(n_features, 3))
    model.eval()
    members = StochasticMembers(model, num_samples=8, generator=_gen())
    assert members.kinds == ("dropout",)
    x = torch.randn(*shape, generator=_gen(1))
    out = members.predict_all(x)
    assert out.shape == (8, shape[0], 3)
    assert float(out.std(0).min()) > 0  # every row varies across members
    assert model[0].training is False


@pytest.mark.parametrize(("drop", "shape", "channelwise"), KIND_CASES)
@pytest.mark.parametrize("mask", ["per_pass", "per_sample"])
def test_dropout_mask_structure(drop: nn.Module, shape, channelwise: bool, mask: str) -> None:
    """Per pass: one mask shared by the batch; channel kinds drop whole channels."""
    model = nn.Sequential(drop)
    row = torch.rand(1, *shape[1:], generator=_gen(2)) + 0.5  # positive, no zeros
    x = row.expand(*shape).clone()
    gen = _gen(3) if mask == "per_pass" else None
    out = StochasticMembers(model, num_samples=6, mask=mask, generator=gen).predict_all(x)
    same_rows = (out == out[:, :1]).flatten(2).all(-1)  # [M, B]
    if mask == "per_pass":
        assert bool(same_rows.all())
    else:
        assert not bool(same_rows[:, 1:].all())
    # kept units carry one value, dropped units another: find the dropped pattern
    if isinstance(drop, (nn.AlphaDropout, nn.FeatureAlphaDropout)):
        p = drop.p
        a = 1.0 / math.sqrt((1.7580993408473766**2 * p + 1.0) * (1.0 - p))
        dropped = torch.isclose(out, torch.tensor(a * 1.7580993408473766 * (p - 1.0)))
        kept = torch.isclose(out, a * x + a * 1.7580993408473766 * p)
    else:
        dropped = out == 0
        kept = torch.isclose(out, x * 2.0)
    assert bool((dropped | kept).all())
    assert 0.2 < float(dropped.double().mean()) < 0.8
    if channelwise:  # a channel is dropped as a whole
        flat = dropped.flatten(3)  # [M, B, C, rest]
        assert bool((flat.all(-1) | ~flat.any(-1)).all())


@pytest.mark.parametrize(
    "drop",
    [
        pytest.param(nn.AlphaDropout(0.3), id="AlphaDropout"),
        pytest.param(nn.FeatureAlphaDropout(0.3), id="FeatureAlphaDropout"),
    ],
)
def test_alpha_dropout_values_match_torch(drop: nn.Module) -> None:
    """Our masked alpha dropout produces exactly the two values torch's own kernel produces."""
    x = torch.full((4, 3, 2, 2), 0.7)
    ours = StochasticMembers(nn.Sequential(drop), 20, generator=_gen()).predict_all(x)
    drop.train()
    torch.manual_seed(0)
    theirs = torch.stack([drop(x) for _ in range(20)])
    drop.eval()
    ours_values = torch.unique(ours.round(decimals=5))
    theirs_values = torch.unique(theirs.round(decimals=5))
    torch.testing.assert_close(ours_values, theirs_values)
    # the correction keeps mean 0 / variance 1 for standardised inputs
    z = torch.randn(200_000, generator=_gen(4)).view(-1, 1)
    big = StochasticMembers(nn.Sequential(nn.AlphaDropout(0.3)), 1, mask="per_sample")
    big.generator = _gen(5)
    out = big.predict_all(z)
    assert abs(float(out.mean())) < 0.02 and abs(float(out.std()) - 1.0) < 0.02


def test_dropout_p_zero_and_one() -> None:
    """Alone they are degenerate (M identical copies); next to an active module they act."""
    x = torch.randn(5, 4, generator=_gen())
    for p in (0.0, 1.0):
        with pytest.raises(ValueError, match="active stochastic layer"):
            StochasticMembers(nn.Sequential(nn.Dropout(p)), 3, generator=_gen())
    keep = StochasticMembers(
        nn.Sequential(nn.Dropout(0.0), nn.Dropout(0.5)), 3, generator=_gen()
    ).predict_all(x)
    half = StochasticMembers(nn.Sequential(nn.Dropout(0.5)), 3, generator=_gen()).predict_all(x)
    assert torch.equal(keep, half)  # p = 0 is the identity and draws nothing
    drop = StochasticMembers(
        nn.Sequential(nn.Dropout(0.5), nn.Dropout(1.0)), 3, generator=_gen()
    ).predict_all(x)
    assert torch.equal(drop, torch.zeros(3, 5, 4))


# ---------------------------------------------------------------------------- modes
def test_auto_without_stochastic_layer_is_an_error() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    with pytest.raises(ValueError, match="`model` must contain a stochastic layer"):
        StochasticMembers(model)


def test_unknown_mode_lists_valid_modes(toy: nn.Module) -> None:
    with pytest.raises(ValueError, match=r"`mode` must be one of 'auto', 'dropout'.*'bogus'"):
        StochasticMembers(toy, mode="bogus")


def test_requested_kind_must_be_present(toy: nn.Module) -> None:
    with pytest.raises(ValueError, match="mode='dropconnect'"):
        StochasticMembers(toy, mode="dropconnect")


def test_modes_select_kinds() -> None:
    model = nn.Sequential(
        _GaussianLinear(4, 6), nn.Dropout(0.3), DropConnectLinear(6, 3, p=0.4)
    ).eval()
    assert StochasticMembers(model).kinds == ("bayesian", "dropconnect", "dropout")
    assert StochasticMembers(model, mode="all").kinds == ("bayesian", "dropconnect", "dropout")
    assert StochasticMembers(model, mode="both").kinds == ("bayesian", "dropout")
    assert StochasticMembers(model, mode="dropout").kinds == ("dropout",)
    assert StochasticMembers(model, mode="dropconnect").kinds == ("dropconnect",)
    assert StochasticMembers(model, mode="bayesian").kinds == ("bayesian",)
    x = torch.randn(5, 4, generator=_gen())
    # only the selected kind varies: with mode="bayesian", repeated rows stay equal
    out = StochasticMembers(model, 6, mode="bayesian", generator=_gen()).predict_all(x)
    assert float(out.std(0).min()) > 0
    for layer in (model[0], model[2]):
        assert layer.force_sample is False and layer.sample_generator is None


def test_only_selected_layers_are_switched_on() -> None:
    """mode="dropconnect": weights kept (x2) or dropped, dropout off; "all" adds dropout (x4)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Dropout(0.5), DropConnectLinear(4, 3, p=0.5)).eval()
    eye = torch.eye(4)  # row j reads column j of the effective weight
    for mode, allowed in [("dropconnect", {0.0, 2.0}), ("all", {0.0, 4.0})]:
        out = StochasticMembers(model, 20, mode=mode, generator=_gen()).predict_all(eye)
        ratio = (out - model[1].bias) / model[1].weight.T  # [M, in, out]
        found = set(ratio.round(decimals=4).unique().tolist())
        assert found == allowed


# ---------------------------------------------------------------------------- coherence
def test_same_seed_same_members(toy: nn.Module, x: torch.Tensor) -> None:
    a = StochasticMembers(toy, 10, generator=_gen(11)).predict_all(x)
    b = StochasticMembers(toy, 10, generator=_gen(11)).predict_all(x)
    c = StochasticMembers(toy, 10, generator=_gen(12)).predict_all(x)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_member_is_coherent_across_batches(toy: nn.Module, x: torch.Tensor) -> None:
    """Member m gives the same output for the same x whichever batch x is in."""
    full = StochasticMembers(toy, 10, generator=_gen(11)).predict_all(x)
    part = StochasticMembers(toy, 10, generator=_gen(11)).predict_all(x[3:5])
    torch.testing.assert_close(full[:, 3:5], part, rtol=1e-6, atol=1e-6)
    # per-sample masks are not coherent: the same rows get different noise in another batch
    full_ps = StochasticMembers(toy, 10, mask="per_sample", generator=_gen(11)).predict_all(x)
    part_ps = StochasticMembers(toy, 10, mask="per_sample", generator=_gen(11)).predict_all(x[3:5])
    assert not torch.allclose(full_ps[:, 3:5], part_ps)


def test_sample_masks_freezes_members_over_a_loader(toy: nn.Module, x: torch.Tensor) -> None:
    members = StochasticMembers(toy, 12, generator=_gen(4))
    with members.sample_masks():
        whole = members.predict_all(x)
        batches = torch.cat([members.predict_all(x[i : i + 2]) for i in range(0, 6, 2)], dim=1)
        again = members.predict_all(x)
    torch.testing.assert_close(batches, whole, rtol=1e-6, atol=1e-6)
    assert torch.equal(whole, again)
    # members are fixed hypotheses outside the context too, until resample()
    assert torch.equal(members.predict_all(x), whole)
    members.resample()
    assert not torch.equal(members.predict_all(x), whole)


def test_sample_masks_refuses_per_sample(toy: nn.Module) -> None:
    members = StochasticMembers(toy, 4, mask="per_sample")
    with pytest.raises(ValueError, match="`mask` must be 'per_pass'"), members.sample_masks():
        pass


def test_dropconnect_members_are_coherent() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), DropConnectLinear(8, 3, p=0.5)).eval()
    row = torch.randn(1, 4)
    out = StochasticMembers(model, 8, generator=_gen()).predict_all(row.expand(5, 4))
    assert bool((out == out[:, :1]).all())
    assert float(out[:, 0].std(0).min()) > 0
    assert model[2].training is False and model[2].force_sample is False


# ---------------------------------------------------------------------------- fast paths
def _cnn() -> nn.Sequential:
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 16),
        nn.ReLU(),
        nn.Dropout(0.5),
        DropConnectLinear(16, 3, p=0.3),
    ).eval()


def test_prefix_reuse_is_bit_identical_to_the_plain_loop() -> None:
    model = _cnn()
    x = torch.randn(7, 1, 6, 6, generator=_gen())
    fast = StochasticMembers(model, 9, generator=_gen(1))
    slow = StochasticMembers(model, 9, generator=_gen(1), reuse_prefix=False)
    trunk, head = fast._split()
    assert isinstance(trunk, nn.Sequential) and len(trunk) == 6
    assert slow._split()[0] is None
    assert torch.equal(fast.predict_all(x), slow.predict_all(x))


def test_user_split_trunk_head() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
            self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.features(x))

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(5, 4, generator=_gen())
    split = StochasticMembers(
        net, 6, generator=_gen(2), trunk=net.features, head=net.classifier
    ).predict_all(x)
    plain = StochasticMembers(net, 6, generator=_gen(2)).predict_all(x)
    assert torch.equal(split, plain)
    with pytest.raises(ValueError, match="`trunk` must be deterministic"):
        StochasticMembers(net, trunk=net.classifier, head=net.features)
    with pytest.raises(ValueError, match="`trunk` and `head` must be given together"):
        StochasticMembers(net, trunk=net.features)


@pytest.mark.parametrize("mask", ["per_pass", "per_sample"])
@pytest.mark.parametrize("chunk_size", [None, 2, 4])
def test_repeat_strategy_matches_the_loop(mask: str, chunk_size) -> None:
    model = _cnn()
    x = torch.randn(5, 1, 6, 6, generator=_gen())
    loop = StochasticMembers(model, 7, mask=mask, generator=_gen(9)).predict_all(x)
    rep = StochasticMembers(
        model, 7, mask=mask, generator=_gen(9), strategy="repeat", chunk_size=chunk_size
    ).predict_all(x)
    torch.testing.assert_close(rep, loop, rtol=1e-5, atol=1e-6)


def test_repeat_refuses_layers_without_replica_support() -> None:
    model = nn.Sequential(_GaussianLinear(4, 3), nn.Dropout(0.2))
    with pytest.raises(ValueError, match="`strategy` must be 'loop'"):
        StochasticMembers(model, strategy="repeat")


# ---------------------------------------------------------------------------- explicit members
def test_explicit_members_loop_and_shapes() -> None:
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)) for _ in range(4)]
    members = ExplicitMembers(models)
    x = torch.randn(6, 4)
    out = members.predict_all(x)
    assert out.shape == (4, 6, 3)
    for m, model in enumerate(models):
        assert torch.equal(out[m], model(x).detach())
    assert members.size == 4 and members.member_modules == models
    assert not out.requires_grad  # predicted under no_grad, as documented


def test_explicit_members_mismatched_outputs() -> None:
    with pytest.raises(ValueError, match="same shape"):
        ExplicitMembers([nn.Linear(4, 3), nn.Linear(4, 2)]).predict_all(torch.randn(2, 4))


def test_adapters_do_not_shadow_module_methods(toy: nn.Module) -> None:
    for adapter in (ExplicitMembers([nn.Linear(2, 2)]), StochasticMembers(toy)):
        assert type(adapter).modules is nn.Module.modules
        assert adapter in list(adapter.modules())
    assert StochasticMembers(toy).member_modules == [toy]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"num_samples": 0}, "`num_samples` must be an integer >= 1", id="n0"),
        pytest.param({"num_samples": 2.5}, "`num_samples`", id="nfloat"),
        pytest.param({"mask": "rows"}, "`mask` must be one of 'per_pass', 'per_sample'", id="mask"),
        pytest.param({"generator": 3}, "`generator` must be a torch.Generator", id="gen"),
        pytest.param({"output_kind": "raw"}, "`output_kind` must be one of", id="kind"),
        pytest.param({"strategy": "vmap"}, "`strategy` must be one of 'loop', 'repeat'", id="st"),
        pytest.param({"chunk_size": 0}, "`chunk_size` must be an integer >= 1", id="chunk"),
    ],
)
def test_stochastic_members_validation(toy: nn.Module, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StochasticMembers(toy, **kwargs)


def test_adapter_validation() -> None:
    with pytest.raises(ValueError, match="StochasticMembers: `model` must be a torch.nn.Module"):
        StochasticMembers("not a model")
    with pytest.raises(ValueError, match="`models` must hold at least one model"):
        ExplicitMembers([])
    with pytest.raises(ValueError, match=r"`models\[1\]` must be a torch.nn.Module"):
        ExplicitMembers([nn.Linear(2, 2), 3])
    with pytest.raises(ValueError, match="`models` must be a sequence"):
        ExplicitMembers(nn.Linear(2, 2))
    with pytest.raises(NotImplementedError):
        MemberAdapter().predict_all(torch.zeros(1))
