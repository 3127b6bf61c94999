"""Issue 11, file input (``bensemble.io``): valid exotic files load, hostile ones fail cleanly.

Organised by the issue's classes. Class 1: float16 / bfloat16 probabilities are validated with the
tolerance of their own dtype at every layer. Class 4: files whose header lies about their size,
exotic tensors, non-native dtypes and other oddities give a one-line :class:`InputError` (a
``ValueError``) or the right array -- never another exception and never a huge allocation.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from bensemble.app.evaluate import evaluate_predictions
from bensemble.io import InputError, load_array, load_labels, load_predictions

N, K, M = 60, 3, 2


def _probs(dtype=np.float64, m=M, n=N, k=K, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(k), size=(m, n)).astype(dtype)


def _labels(n=N, k=K, seed=1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, k, size=n)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# ============================================================================ class 1
# The loader accepted float16 probabilities; the float64 values it returned then failed the
# float64 tolerance of evaluate_predictions, which suggested --logits (wrong numbers).
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_class1_half_precision_probabilities_pass_the_whole_evaluate_path(tmp_path, dtype):
    exact = torch.from_numpy(_probs())
    path = tmp_path / "p.pt"
    torch.save(exact.to(dtype), path)
    probs = load_predictions(path)
    ev = evaluate_predictions(probs, _labels(), calibration_split=0.5)
    # Rows are renormalised in float64 after the check at the file's own tolerance.
    torch.testing.assert_close(probs.sum(-1), torch.ones(M, N, dtype=torch.float64))
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(probs, exact, atol=2 * eps, rtol=0)
    assert 0.0 <= ev.metrics[0]["ece"] <= 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_class1_evaluate_predictions_accepts_half_precision_tensors(dtype):
    exact = torch.from_numpy(_probs())
    ev = evaluate_predictions(exact.to(dtype), _labels())
    ref = evaluate_predictions(exact, _labels())
    # float16 rounding moves each probability by <= eps/2 relative: ECE moves by about that.
    tol = 4 * torch.finfo(dtype).eps
    assert abs(ev.metrics[0]["brier"] - ref.metrics[0]["brier"]) < tol


def test_class1_load_predictions_warns_when_logits_already_lie_on_the_simplex(tmp_path):
    np.save(tmp_path / "p.npy", _probs())
    with pytest.warns(UserWarning, match="already"):
        load_predictions(tmp_path / "p.npy", logits=True)


# ============================================================================ class 4
def _npy_header(shape: tuple, descr: str = "<f8") -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}".encode()
    text += b" " * (117 - len(text)) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


def _lying_npy(path: Path) -> Path:
    path.write_bytes(_npy_header((10**11,)) + bytes(64))
    return path


def test_class4_npy_header_claiming_1e11_values_is_refused_before_allocating(tmp_path):
    path = _lying_npy(tmp_path / "p.npy")
    assert path.stat().st_size < 300
    with pytest.raises(InputError, match="header") as exc:
        load_array(path, name="predictions")
    assert "100000000000" in _one_line(exc)


def test_class4_npz_member_claiming_1e11_values_is_refused_before_allocating(tmp_path):
    path = tmp_path / "p.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.npy", _npy_header((10**11,)) + bytes(64))
    with pytest.raises(InputError, match="header") as exc:
        load_array(path, name="predictions")
    _one_line(exc)


def test_class4_compressed_npz_claiming_more_than_memory_is_refused(tmp_path):
    # A real zip bomb: 1e11 float64 zeros would deflate to ~800 MB; fake the member instead.
    path = tmp_path / "p.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a.npy", _npy_header((10**14,)) + bytes(4096))
    with pytest.raises(InputError) as exc:
        load_array(path, name="predictions")
    _one_line(exc)


def test_class4_pt_broadcast_view_claiming_2e11_values_is_refused_before_allocating(tmp_path):
    # expand() stores one value: a 1.5 kB file whose tensor claims 1.6 TB once copied.
    torch.save(
        torch.full((1,), 0.5, dtype=torch.float64).expand(10**6, 10**5, 2), tmp_path / "p.pt"
    )
    assert (tmp_path / "p.pt").stat().st_size < 4000
    with pytest.raises(InputError, match="200000000000 values") as exc:
        load_predictions(tmp_path / "p.pt")
    _one_line(exc)


def test_class4_pt_list_whose_stack_exceeds_memory_is_refused_before_stacking(tmp_path):
    view = torch.full((1,), 0.5, dtype=torch.float64).expand(10**5, 10**4, 2)
    torch.save([view] * 100, tmp_path / "p.pt")
    with pytest.raises(InputError, match="200000000000 values"):
        load_predictions(tmp_path / "p.pt")


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: CSR is beta, quantization deprecated
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda t: t.to_sparse(), id="sparse-coo"),
        pytest.param(lambda t: t.reshape(-1, K).to_sparse_csr(), id="sparse-csr"),
        pytest.param(lambda t: torch.empty(t.shape, device="meta"), id="meta"),
        pytest.param(
            lambda t: torch.quantize_per_tensor(t.float(), 0.01, 0, torch.quint8), id="quantized"
        ),
    ],
)
def test_class4_pt_with_a_non_dense_tensor_is_refused(tmp_path, make):
    torch.save(make(torch.from_numpy(_probs())), tmp_path / "p.pt")
    with pytest.raises(InputError, match="dense") as exc:
        load_predictions(tmp_path / "p.pt")
    _one_line(exc)


def test_class4_pt_dict_holding_a_sparse_tensor_is_refused(tmp_path):
    torch.save({"probs": torch.from_numpy(_probs()).to_sparse()}, tmp_path / "p.pt")
    with pytest.raises(InputError, match="dense"):
        load_predictions(str(tmp_path / "p.pt") + ":probs")


def test_class4_pt_list_of_sparse_tensors_is_refused(tmp_path):
    torch.save([torch.from_numpy(p).to_sparse() for p in _probs()], tmp_path / "p.pt")
    with pytest.raises(InputError, match="dense"):
        load_predictions(tmp_path / "p.pt")


@pytest.mark.parametrize("descr", [">f8", ">f4", ">f2"], ids=["f8", "f4", "f2"])
def test_class4_big_endian_probabilities_are_converted(tmp_path, descr):
    probs = _probs()
    np.save(tmp_path / "p.npy", probs.astype(descr))
    got = load_predictions(tmp_path / "p.npy")
    torch.testing.assert_close(
        got, torch.from_numpy(probs.astype(descr).astype(np.float64)), atol=1e-3, rtol=0
    )


def test_class4_big_endian_labels_are_converted(tmp_path):
    labels = _labels()
    np.save(tmp_path / "y.npy", labels.astype(">i4"))
    assert torch.equal(load_labels(tmp_path / "y.npy"), torch.from_numpy(labels))


def test_class4_big_endian_array_in_npz_is_converted(tmp_path):
    probs = _probs()
    np.savez(tmp_path / "p.npz", probs=probs.astype(">f8"))
    torch.testing.assert_close(load_predictions(tmp_path / "p.npz"), torch.from_numpy(probs))


def test_class4_longdouble_probabilities_are_converted(tmp_path):
    probs = _probs()
    np.save(tmp_path / "p.npy", probs.astype(np.longdouble))
    torch.testing.assert_close(load_predictions(tmp_path / "p.npy"), torch.from_numpy(probs))


def test_class4_uint64_labels_beyond_int64_are_refused_not_wrapped(tmp_path):
    np.save(tmp_path / "y.npy", np.array([0, 1, 2**63 + 5], dtype=np.uint64))
    with pytest.raises(InputError, match=str(2**63 + 5)):
        load_labels(tmp_path / "y.npy")


def test_class4_csv_integer_too_large_for_int64_is_an_input_error(tmp_path):
    (tmp_path / "y.csv").write_text("1\n0\n99999999999999999999999\n")
    with pytest.raises(InputError, match="99999999999999999999999") as exc:
        load_labels(tmp_path / "y.csv")
    _one_line(exc)


def test_class4_csv_number_with_underscores_is_refused(tmp_path):
    # Python's float("0.2_5") is 0.25: a typo must not become a number.
    (tmp_path / "p.csv").write_text("0.5,0.5\n0.2_5,0.75\n")
    with pytest.raises(InputError, match="0.2_5"):
        load_array(tmp_path / "p.csv", name="predictions")


def test_class4_zero_d_array_reports_its_real_shape(tmp_path):
    np.save(tmp_path / "p.npy", np.float64(0.3))
    with pytest.raises(InputError, match=r"got shape \(\)"):
        load_predictions(tmp_path / "p.npy")


def test_class4_members_axis_must_be_an_int_not_a_bool(tmp_path):
    np.save(tmp_path / "p.npy", _probs())
    with pytest.raises(InputError, match="members_axis"):
        load_predictions(tmp_path / "p.npy", members_axis=True)


def test_class4_npz_member_with_corrupt_deflate_stream_is_an_input_error(tmp_path):
    np.savez_compressed(tmp_path / "p.npz", _probs(n=2000))
    data = bytearray((tmp_path / "p.npz").read_bytes())
    for i in range(200, 600):  # scramble the compressed payload, keep the zip directory
        data[i] ^= 0x5A
    (tmp_path / "p.npz").write_bytes(bytes(data))
    with pytest.raises(InputError) as exc:
        load_predictions(tmp_path / "p.npz")
    _one_line(exc)


@pytest.mark.parametrize(
    "content, message",
    [("npz", "is an .npz archive; rename it to .npz"), ("pickle", "is not a .npy file")],
)
def test_npy_impostors_are_refused_by_both_npy_readers(tmp_path: Path, content, message):
    """``bensemble.io`` and the evaluation's memory-mapped labels share one ``.npy`` check: an
    ``.npz`` archive or a pickle saved under a ``.npy`` name is refused by name, not unpickled."""
    from bensemble.app.evaluate.sources import read_labels

    path = tmp_path / "y.npy"
    if content == "npz":
        np.savez(tmp_path / "y.npz", y=_labels())
        path.write_bytes((tmp_path / "y.npz").read_bytes())
    else:
        import pickle

        path.write_bytes(pickle.dumps(_labels().tolist()))
    with pytest.raises(InputError, match=message):
        load_array(path, name="labels")
    with pytest.raises(InputError, match=message):
        read_labels([str(path)], [N], K, block=16)
