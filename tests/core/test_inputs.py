"""Loader-aware, dtype-aware prediction and predict_log_proba.

Defect 3 of issue 10: numpy arrays, float64 tensors and DataLoaders used to raise raw torch
errors from inside the members.
"""

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bensemble.core import Ensemble
from bensemble.metrics import brier_score, expected_calibration_error, negative_log_likelihood
from bensemble.uncertainty import decompose_classification_uncertainty


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mlp(seed: int, dropout: float = 0.0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3))


def _data(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 1).astype(np.int64)
    return x, y


def _ensembles() -> list:
    return [
        pytest.param(lambda: Ensemble.from_models([_mlp(s) for s in range(3)]), id="packed"),
        pytest.param(
            lambda: Ensemble.from_models([_mlp(s) for s in range(3)], packed=False), id="loop"
        ),
        pytest.param(lambda: Ensemble.from_stochastic(_mlp(0, 0.5), 5, generator=_gen(1)), id="mc"),
    ]


@pytest.mark.parametrize("make", _ensembles())
def test_numpy_float64_input_equals_the_tensor_path(make) -> None:
    ens = make()
    x, _ = _data()
    reference = ens.predict_members(torch.from_numpy(x).float())
    assert reference.dtype == torch.float32
    for value in (x, torch.from_numpy(x), x.tolist(), x.astype(np.float32)):
        torch.testing.assert_close(ens.predict_members(value), reference, rtol=0, atol=0)
    torch.testing.assert_close(ens.predict_proba(x), reference.softmax(-1).mean(0))
    torch.testing.assert_close(ens(x), reference.mean(0))


@pytest.mark.parametrize("make", _ensembles())
def test_dataloader_input_equals_one_shot(make) -> None:
    ens = make()
    x, y = _data()
    xt = torch.from_numpy(x)  # float64 batches
    loader = DataLoader(TensorDataset(xt, torch.from_numpy(y)), batch_size=7)
    whole = ens.predict_member_probs(xt)
    torch.testing.assert_close(ens.predict_member_probs(loader), whole, rtol=0, atol=1e-6)
    x_only = DataLoader(xt, batch_size=9)  # batches of x alone
    torch.testing.assert_close(ens.predict_proba(x_only), whole.mean(0), rtol=0, atol=1e-6)
    batches = (xb for xb in xt.split(11))  # any iterable of batches
    torch.testing.assert_close(ens.predict_proba(batches), whole.mean(0), rtol=0, atol=1e-6)
    probs, labels = ens.predict_with_labels(loader, progress=True)
    torch.testing.assert_close(probs, whole, rtol=0, atol=1e-6)
    assert torch.equal(labels, torch.from_numpy(y))


def test_shuffling_loader_gives_the_same_scores() -> None:
    ens = Ensemble.from_stochastic(_mlp(0, 0.5), 6, generator=_gen(1))
    x, y = _data(60)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    plain = ens.predict_with_labels(DataLoader(dataset, batch_size=8))
    shuffled = ens.predict_with_labels(
        DataLoader(dataset, batch_size=8, shuffle=True, generator=_gen(3))
    )
    assert not torch.equal(plain[1], shuffled[1])  # the order really changed

    def scores(member_probs, labels):
        probs = member_probs.mean(0)
        parts = decompose_classification_uncertainty(member_probs)
        return [
            negative_log_likelihood(probs, labels),
            brier_score(probs, labels),
            expected_calibration_error(probs, labels),
            *[float(part.mean()) for part in parts],
        ]

    for a, b in zip(scores(*plain), scores(*shuffled)):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-7)


def test_predict_with_labels_needs_labels() -> None:
    ens = Ensemble.from_models([_mlp(0)])
    with pytest.raises(ValueError, match="predict_with_labels: `data` must yield"):
        ens.predict_with_labels(DataLoader(torch.randn(5, 4), batch_size=2))


def test_bad_inputs_are_value_errors() -> None:
    ens = Ensemble.from_models([_mlp(0)], packed=False)
    with pytest.raises(ValueError, match="`x`"):
        ens.predict_proba("not data")
    with pytest.raises(ValueError, match="`x`"):
        ens.predict_proba([])
    with pytest.raises(ValueError, match="`batch_size` must be an integer >= 1"):
        ens.predict_proba(np.zeros((2, 4)), batch_size=0)


@pytest.mark.parametrize("make", _ensembles())
def test_predict_log_proba(make) -> None:
    ens = make()
    x, _ = _data()
    log_probs = ens.predict_log_proba(x)
    torch.testing.assert_close(log_probs.exp(), ens.predict_proba(x), rtol=0, atol=1e-6)
    member = ens.predict_member_probs(x)
    reference = member.double().mean(0).log()
    torch.testing.assert_close(log_probs.double(), reference, rtol=0, atol=1e-5)


def test_predict_log_proba_is_finite_where_a_member_gives_zero() -> None:
    class Fixed(nn.Module):
        def __init__(self, probs: list[float]) -> None:
            super().__init__()
            self.register_buffer("p", torch.tensor(probs))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.p.expand(len(x), -1)

    ens = Ensemble.from_models(
        [Fixed([1.0, 0.0, 0.0]), Fixed([0.2, 0.3, 0.5])], output_kind="probs"
    )
    out = ens.predict_log_proba(torch.zeros(2, 4))
    assert bool(torch.isfinite(out).all())
    expected = torch.tensor([0.6, 0.15, 0.25]).log().expand(2, -1)
    torch.testing.assert_close(out, expected)
    # huge logit gaps: softmax underflows to 0 for one member, the log stays exact
    big = Ensemble.from_models([Fixed([0.0, -200.0, 0.0]), Fixed([0.0, 0.0, 0.0])])
    out = big.predict_log_proba(torch.zeros(1, 4))
    assert bool(torch.isfinite(out).all())
    torch.testing.assert_close(out[0, 1], torch.tensor(1 / 3).log() - torch.tensor(2.0).log())


def test_batch_size_with_a_loader_and_mapping_inputs() -> None:
    ens = Ensemble.from_models([_mlp(0)], packed=False)
    loader = DataLoader(torch.randn(6, 4), batch_size=2)
    with pytest.raises(ValueError, match="`batch_size` applies to one array"):
        ens.predict_proba(loader, batch_size=3)

    class DictNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, batch: dict) -> torch.Tensor:
            return self.lin(batch["x"])

    net = DictNet()
    x = torch.randn(5, 4)
    out = Ensemble.from_models([net]).predict_members({"x": x})
    torch.testing.assert_close(out, net({"x": x}).detach()[None], rtol=0, atol=0)
    batches = [{"x": x[:2]}, {"x": x[2:]}]  # an iterable of mapping batches
    streamed = Ensemble.from_models([net]).predict_members(batches)
    torch.testing.assert_close(streamed, out, rtol=0, atol=1e-6)
    # nested-list batches from a generator: each batch is an array, not (x, y); a list of
    # nested lists is one array ([N, C, L] here)
    plain = Ensemble.from_models([_mlp(0)], packed=False)
    rows = x.double().tolist()
    streamed = plain.predict_members(b for b in (rows[:3], rows[3:]))
    torch.testing.assert_close(streamed, plain.predict_members(x), rtol=0, atol=1e-6)
    conv = Ensemble.from_models([nn.Sequential(nn.Conv1d(2, 3, 1), nn.Flatten())])
    cube = torch.randn(4, 2, 5).tolist()
    assert conv.predict_members(cube).shape == (1, 4, 15)


# --------------------------------------------------------------- dict and tuple batches
class _DictDataset(torch.utils.data.Dataset):
    """Items ``{"image": x_i, "label": y_i}``, as torchvision-style / HF datasets give them."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = torch.from_numpy(x).float(), torch.from_numpy(y)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict:
        return {"image": self.x[i], "label": self.y[i]}


@pytest.mark.parametrize("make", _ensembles())
def test_dict_loader_with_input_and_label_keys(make) -> None:
    ens = make()
    x, y = _data()
    loader = DataLoader(_DictDataset(x, y), batch_size=7)  # default collate: dicts of batches
    reference = ens.predict_member_probs(torch.from_numpy(x).float())
    probs, labels = ens.predict_with_labels(loader, input_key="image", label_key="label")
    torch.testing.assert_close(probs, reference, rtol=0, atol=1e-6)
    assert labels.tolist() == y.tolist()
    mean = ens.predict_proba(loader, input_key="image")
    torch.testing.assert_close(mean, reference.mean(0), rtol=0, atol=1e-6)
    log_mean = ens.predict_log_proba(loader, input_key="image", label_key="label")
    torch.testing.assert_close(log_mean.exp(), mean, rtol=1e-5, atol=1e-7)
    fn_probs, fn_labels = ens.predict_with_labels(
        loader, batch_fn=lambda b: (b["image"], b["label"])
    )
    torch.testing.assert_close(fn_probs, probs, rtol=0, atol=0)
    assert torch.equal(fn_labels, labels)


def test_tuple_batches_by_position() -> None:
    ens = Ensemble.from_models([_mlp(0)], packed=False)
    x, y = _data()
    xt, yt = torch.from_numpy(x).float(), torch.from_numpy(y)
    swapped = [(yt[:20], xt[:20]), (yt[20:], xt[20:])]  # (y, x) batches
    probs, labels = ens.predict_with_labels(swapped, input_key=1, label_key=0)
    torch.testing.assert_close(probs, ens.predict_member_probs(xt), rtol=0, atol=1e-6)
    assert torch.equal(labels, yt)


def test_dict_batches_without_keys_say_which_option_to_pass() -> None:
    ens = Ensemble.from_models([_mlp(0)], packed=False)
    x, y = _data()
    loader = DataLoader(_DictDataset(x, y), batch_size=8)
    with pytest.raises(ValueError, match=r"a dict batch \(keys 'image', 'label'\).*input_key="):
        ens.predict_proba(loader)  # the whole dict went to an nn.Linear
    with pytest.raises(ValueError, match="without labels; for dict batches pass label_key="):
        ens.predict_with_labels(loader, input_key="image")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"input_key": "img"}, r"`input_key` must name an entry .*got 'img'; batch 0 has 'image'"),
        ({"input_key": 3.5}, "`input_key` must be a dict key"),
        ({"input_key": True}, "`input_key` must be a dict key"),
        ({"input_key": "image", "batch_fn": lambda b: b}, "`batch_fn` must be given without"),
        ({"batch_fn": 5}, "`batch_fn` must be callable"),
        ({"input_key": 0}, r"`input_key` must name an entry .*got 0;"),
    ],
)
def test_bad_batch_options(options, match) -> None:
    ens = Ensemble.from_models([_mlp(0)], packed=False)
    x, y = _data()
    with pytest.raises(ValueError, match=f"Ensemble.predict_proba: {match}"):
        ens.predict_proba(DataLoader(_DictDataset(x, y), batch_size=8), **options)


def test_keys_refused_for_one_array() -> None:
    ens = Ensemble.from_models([_mlp(0)], packed=False)
    tuples = [(torch.randn(3, 4), torch.zeros(3, dtype=torch.long))]
    with pytest.raises(ValueError, match="a str key needs dict batches .*got a tuple batch 0"):
        ens.predict_proba(tuples, input_key="image")
    with pytest.raises(ValueError, match="`label_key` must be a position .*got 2; batch 0 has 2"):
        ens.predict_with_labels(tuples, label_key=2)
    with pytest.raises(ValueError, match="`input_key` / `label_key` read dict or tuple batches"):
        ens.predict_proba(torch.randn(4, 4), input_key="image")
    out = ens.predict_proba(torch.randn(4, 4), batch_fn=lambda b: b * 0)  # batch_fn: any input
    torch.testing.assert_close(out, ens.predict_proba(torch.zeros(4, 4)))
