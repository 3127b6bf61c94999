"""The meter battery's cases: every public streaming meter and torchmetrics class, with good
batches, bad batches, incompatible partners and tampered states (issue 19, item 1).

:data:`METER_NAMES` lists every public meter / torchmetrics class by name; the registry of
public classes (``wt-modules``) imports it, and ``test_battery_meters.py`` checks that it equals
the classes ``bensemble.metrics`` and ``bensemble.integrations.torchmetrics`` export. Each
:class:`MeterCase` builds a fresh object and knows

* ``batch(idx)``: the update arguments for the rows ``idx`` of one fixed data set, and
  ``expected(idx)``: the one-shot value on those rows (the independent reference);
* ``bad``: update arguments that must be refused with a ``ValueError`` (wrong shape, NaN/inf,
  wrong class or member count, float labels, empty batches, logits given as probabilities);
* ``incompatible``: partners a merge must refuse (other settings, bins, centroids, classes
  seen, another class);
* ``inconsistent``: edits of a saved state that keep shapes and dtypes but break what the sums
  mean (more hits than samples, unequal class totals, a fractional count).

Nothing here imports torchmetrics at import time: the torchmetrics cases build their objects
lazily, and the tests skip them without the package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

#: Every public meter and torchmetrics class (the module registry requires each public class to
#: be in a battery; this is the meters' and torchmetrics classes' share).
METER_NAMES = (
    "CalibrationErrorMeter",
    "ClasswiseCalibrationErrorMeter",
    "NLLMeter",
    "BrierMeter",
    "AccuracyMeter",
    "UncertaintyMeter",
    "EECEMeter",
    "ExpectedCalibrationError",
    "ClasswiseCalibrationError",
    "NegativeLogLikelihood",
    "BrierScore",
    "ExpectedEpistemicCalibrationError",
)

N, K, H = 240, 3, 4
F64 = torch.float64
BatchFn = Callable[[torch.Tensor], tuple]


@dataclass(frozen=True)
class MeterCase:
    """One configuration of one public class (see the module docstring)."""

    id: str
    class_name: str
    make: Callable[[], Any]
    batch: BatchFn
    expected: Callable[[torch.Tensor], tuple[float, ...]]
    bad: dict[str, Callable[[], tuple]] = field(default_factory=dict)
    incompatible: dict[str, Callable[[], Any]] = field(default_factory=dict)
    inconsistent: dict[str, Callable[[dict[str, torch.Tensor]], None]] = field(default_factory=dict)
    torchmetrics: bool = False
    #: state keys whose sums may be negative (the gap sums of a calibration error, a mean of
    #: signed values): the generic "negative value" tamper does not apply to them
    signed: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- data


@functools.cache
def data() -> dict[str, torch.Tensor]:
    """One fixed data set: logits and members ``[H, N, K]``, their mean, labels."""
    g = torch.Generator().manual_seed(0)
    logits = 2 * torch.randn(H, N, K, generator=g, dtype=F64)
    members = torch.softmax(logits, -1)
    y = torch.randint(0, K, (N,), generator=g)
    wide = torch.softmax(2 * torch.randn(H, N, K + 1, generator=g, dtype=F64), -1)
    return {
        "logits": logits,
        "members": members,
        "probs": members.mean(0),
        "y": y,
        "wide": wide,  # the same shapes with K + 1 classes
        "binary": members[:, :, 1],
        "binary_y": (y == 1).long(),
    }


@functools.cache
def centroids(kind: str, n_bins: int = 5) -> Any:
    """Fitted K-means centroids: per-class ``[K, S, H]`` ("classwise"), one ``[S, H]`` set
    ("top_label", "binary")."""
    from bensemble.metrics import fit_bins

    d = data()
    if kind == "classwise":
        sets = [fit_bins(d["members"][:, :, c].T, n_bins, seed=0) for c in range(K)]
        return torch.stack(sets)
    if kind == "top_label":
        return fit_bins(d["members"].max(-1).values.T, n_bins, seed=1)
    return fit_bins(d["binary"].T, n_bins, seed=2)


def _with(t: torch.Tensor, value: float) -> torch.Tensor:
    t = t.clone()
    t.reshape(-1)[3] = value
    return t


# ----------------------------------------------------------------------------- bad batches


def probs_bad(from_logits: bool) -> dict[str, Callable[[], tuple]]:
    """Bad ``(probs [B, K], targets [B])`` batches of a meter that has already seen K."""

    def base():
        d = data()
        p = d["logits"][0] if from_logits else d["probs"]
        return p[:24], d["y"][:24]

    def wide():
        d = data()
        w = d["wide"]
        return (w[0].log() if from_logits else w.mean(0))[:24], d["y"][:24]

    cases = {
        "1-d": lambda: (base()[0][:, 0], base()[1]),
        "3-d": lambda: (base()[0][None], base()[1]),
        "scalar": lambda: (torch.tensor(0.5, dtype=F64), base()[1]),
        "labels-length": lambda: (base()[0], base()[1][:-1]),
        "labels-2-d": lambda: (base()[0], base()[1][:, None]),
        "nan": lambda: (_with(base()[0], float("nan")), base()[1]),
        "inf": lambda: (_with(base()[0], float("inf")), base()[1]),
        "wrong-k": wide,
        "one-class": lambda: (base()[0][:, :1], base()[1]),
        "float-labels": lambda: (base()[0], base()[1].double()),
        "labels-out-of-range": lambda: (base()[0], base()[1] + K),
        "negative-labels": lambda: (base()[0], base()[1] - K),
        "empty": lambda: (base()[0][:0], base()[1][:0]),
        "string": lambda: ("probs", base()[1]),
        "bool-probs": lambda: (base()[0] > 0.5, base()[1]),
    }
    if not from_logits:
        cases["logits-as-probs"] = lambda: (data()["logits"][0, :24], data()["y"][:24])
        cases["negative-probs"] = lambda: (base()[0] - 0.5, base()[1])
    return cases


def members_bad(binary: bool, with_labels: bool) -> dict[str, Callable[[], tuple]]:
    """Bad member batches (``[H, B, K]``, ``[H, B]`` with ``binary``; plus labels)."""

    def base():
        d = data()
        p = d["binary"] if binary else d["members"]
        y = d["binary_y"] if binary else d["y"]
        return (p[:, :24], y[:24]) if with_labels else (p[:, :24],)

    def swap(first):
        return (first, *base()[1:])

    cases = {
        "2-d" if not binary else "3-d": lambda: swap(
            base()[0][0] if not binary else data()["members"][:, :24]
        ),
        "4-d": lambda: swap(base()[0][None]),
        "nan": lambda: swap(_with(base()[0], float("nan"))),
        "inf": lambda: swap(_with(base()[0], float("inf"))),
        "wrong-members": lambda: swap(base()[0][: H - 1]),
        "empty": lambda: (base()[0][:, :0], *(b[:0] for b in base()[1:])),
        "string": lambda: swap("member_probs"),
        "logits-as-probs": lambda: swap(
            data()["logits"][:, :24, 1] if binary else data()["logits"][:, :24]
        ),
    }
    if not binary:
        cases["wrong-k"] = lambda: swap(data()["wide"][:, :24])
    if with_labels:
        y = base()[-1]
        cases.update(
            {
                "labels-length": lambda: (base()[0], y[:-1]),
                "float-labels": lambda: (base()[0], y.double()),
                "labels-out-of-range": lambda: (base()[0], y + (2 if binary else K)),
                "labels-2-d": lambda: (base()[0], y[:, None]),
                "eu-negative": lambda: (*base(), -torch.ones(24, *(() if binary else (K,)))),
                "eu-shape": lambda: (*base(), torch.ones(23, *(() if binary else (K,)))),
                "eu-nan": lambda: (
                    *base(),
                    _with(torch.ones(24, *(() if binary else (K,)), dtype=F64), float("nan")),
                ),
            }
        )
    return cases


# ----------------------------------------------------------------------------- tampering


def _first_filled(counts: torch.Tensor) -> tuple[int, ...]:
    """Index of the fullest bin."""
    flat = int(counts.reshape(-1).argmax())
    return tuple(torch.unravel_index(torch.tensor(flat), counts.shape))


def _above_count(key: str, count_key: str = "counts") -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        i = _first_filled(s[count_key])
        s[key][i] = s[count_key][i] + 1

    return edit


def _fractional(key: str) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        s[key].reshape(-1)[0] += 0.5

    return edit


def _zero(key: str) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        s[key].zero_()

    return edit


def _add(key: str, amount: float) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        s[key] += amount

    return edit


def _bump_first_class(s: dict) -> None:
    s["counts"][0, _first_filled(s["counts"][0])[0]] += 1


def _bump_first_group(s: dict) -> None:
    s["counts"][_first_filled(s["counts"][: s["counts"].shape[0] // K])] += 1


def _move_a_hit(s: dict) -> None:
    i = _first_filled(s["hits"])
    s["hits"][i] -= 1


ECE_INCONSISTENT = {
    "correct-above-count": _above_count("sum_correct"),
    "confidence-above-count": _above_count("sum_confidence"),
    "fractional-count": _fractional("counts"),
}
CLASSWISE_INCONSISTENT = {
    "hits-above-count": _above_count("hits"),
    "p-above-count": _above_count("sum_p"),
    "class-totals-differ": _bump_first_class,
    "labels-lost": _move_a_hit,
}
MEAN_INCONSISTENT = {"sums-without-count": _zero("count"), "fractional-count": _fractional("count")}
EECE_INCONSISTENT = {
    "outcomes-above-count": _above_count("sum_y"),
    "p-above-count": _above_count("sum_p"),
    "fractional-count": _fractional("counts"),
    "eu-without-count": lambda s: s["counts"].zero_(),
}


# ----------------------------------------------------------------------------- the cases


def _probs_case(
    case_id: str,
    class_name: str,
    make: Callable[[], Any],
    reference: Callable[[torch.Tensor, torch.Tensor], float],
    *,
    from_logits: bool = False,
    incompatible: dict | None = None,
    inconsistent: dict | None = None,
    tm: bool = False,
) -> MeterCase:
    def batch(idx):
        d = data()
        return (d["logits"][0] if from_logits else d["probs"])[idx], d["y"][idx]

    return MeterCase(
        id=case_id,
        class_name=class_name,
        make=make,
        batch=batch,
        expected=lambda idx: (float(reference(*batch(idx))),),
        bad=probs_bad(from_logits),
        incompatible=incompatible or {},
        inconsistent=inconsistent or {},
        torchmetrics=tm,
    )


def _seen_wide(make: Callable[[], Any], members: bool = False) -> Callable[[], Any]:
    """A fresh object fed one batch of K + 1 classes."""

    def build():
        w = data()["wide"][:, :24]
        obj = make()
        obj.update(*((w,) if members else (w.mean(0), data()["y"][:24])))
        return obj

    return build


def _plain_cases() -> list[MeterCase]:
    from bensemble import metrics as M

    def fed(make, first=None):
        def build():
            obj = make()
            obj.update(*(first() if first else (data()["probs"][:24], data()["y"][:24])))
            return obj

        return build

    def eece_ref(kind, **kw):
        def ref(idx):
            d = data()
            if kind == "binary":
                p, y = d["binary"][:, idx], d["binary_y"][idx]
            else:
                p, y = d["members"][:, idx], d["y"][idx]
            return (
                M.expected_epistemic_calibration_error(
                    p, y, binning="kmeans_fit", centroids=centroids(kind), **kw
                ),
            )

        return ref

    def members_batch(idx):
        return (data()["members"][:, idx], data()["y"][idx])

    def binary_batch(idx):
        return (data()["binary"][:, idx], data()["binary_y"][idx])

    def uncertainty_ref(idx):
        from bensemble.uncertainty import decompose_classification_uncertainty

        parts = decompose_classification_uncertainty(data()["members"][:, idx])
        return tuple(float(t.mean()) for t in parts)

    cases = [
        _probs_case(
            "CalibrationErrorMeter",
            "CalibrationErrorMeter",
            lambda: M.CalibrationErrorMeter(10),
            lambda p, y: M.expected_calibration_error(p, y, 10),
            incompatible={
                "n_bins": fed(lambda: M.CalibrationErrorMeter(12)),
                "norm": fed(lambda: M.CalibrationErrorMeter(10, "max")),
                "classes-seen": _seen_wide(lambda: M.CalibrationErrorMeter(10)),
                "classes-declared": lambda: M.CalibrationErrorMeter(10, num_classes=K + 1),
                "another-class": fed(lambda: M.ClasswiseCalibrationErrorMeter(K, 10)),
            },
            inconsistent=ECE_INCONSISTENT,
        ),
        _probs_case(
            "CalibrationErrorMeter-logits-l2",
            "CalibrationErrorMeter",
            lambda: M.CalibrationErrorMeter(10, "l2", from_logits=True),
            lambda z, y: M.expected_calibration_error(z, y, 10, norm="l2", from_logits=True),
            from_logits=True,
            inconsistent=ECE_INCONSISTENT,
        ),
        _probs_case(
            "ClasswiseCalibrationErrorMeter",
            "ClasswiseCalibrationErrorMeter",
            lambda: M.ClasswiseCalibrationErrorMeter(K, 8),
            lambda p, y: M.classwise_calibration_error(p, y, 8),
            incompatible={
                "num_classes": _seen_wide(lambda: M.ClasswiseCalibrationErrorMeter(K + 1, 8)),
                "n_bins": fed(lambda: M.ClasswiseCalibrationErrorMeter(K, 9)),
                "norm": fed(lambda: M.ClasswiseCalibrationErrorMeter(K, 8, "l2")),
                "another-class": fed(lambda: M.CalibrationErrorMeter(8)),
            },
            inconsistent=CLASSWISE_INCONSISTENT,
        ),
        _probs_case(
            "NLLMeter",
            "NLLMeter",
            M.NLLMeter,
            M.negative_log_likelihood,
            incompatible={
                "eps": fed(lambda: M.NLLMeter(eps=0.0)),
                "classes-seen": _seen_wide(M.NLLMeter),
                "another-class": fed(M.BrierMeter),
            },
            inconsistent=MEAN_INCONSISTENT,
        ),
        _probs_case(
            "NLLMeter-logits",
            "NLLMeter",
            lambda: M.NLLMeter(from_logits=True),
            lambda z, y: M.negative_log_likelihood(z, y, from_logits=True),
            from_logits=True,
            inconsistent=MEAN_INCONSISTENT,
        ),
        _probs_case(
            "BrierMeter",
            "BrierMeter",
            M.BrierMeter,
            M.brier_score,
            incompatible={
                "classes-seen": _seen_wide(M.BrierMeter),
                "another-class": fed(M.AccuracyMeter),
            },
            inconsistent={**MEAN_INCONSISTENT, "above-two-per-sample": _add("total", 1e3)},
        ),
        _probs_case(
            "AccuracyMeter",
            "AccuracyMeter",
            M.AccuracyMeter,
            M.accuracy,
            incompatible={
                "classes-seen": _seen_wide(M.AccuracyMeter),
                "another-class": fed(M.BrierMeter),
            },
            inconsistent={**MEAN_INCONSISTENT, "more-hits-than-samples": _add("total", 1e3)},
        ),
        MeterCase(
            id="UncertaintyMeter",
            class_name="UncertaintyMeter",
            make=M.UncertaintyMeter,
            batch=lambda idx: (data()["members"][:, idx],),
            expected=uncertainty_ref,
            bad=members_bad(binary=False, with_labels=False),
            incompatible={
                "binary": lambda: M.UncertaintyMeter(binary=True).update(data()["binary"]),
                "classes-seen": _seen_wide(M.UncertaintyMeter, members=True),
                "members-seen": lambda: M.UncertaintyMeter().update(data()["members"][:2]),
                "another-class": lambda: M.NLLMeter().update(data()["probs"], data()["y"]),
            },
            inconsistent={
                "epistemic-not-total-minus-aleatoric": _add("epistemic", 1.0),
                "sums-without-count": _zero("count"),
                "fractional-count": _fractional("count"),
            },
        ),
        MeterCase(
            id="EECEMeter-classwise",
            class_name="EECEMeter",
            make=lambda: M.EECEMeter(centroids("classwise")),
            batch=members_batch,
            expected=eece_ref("classwise"),
            bad=members_bad(binary=False, with_labels=True),
            incompatible={
                "centroids": lambda: M.EECEMeter(centroids("classwise") + 0.01),
                "n_bins": lambda: M.EECEMeter(centroids("classwise", 4)),
                "centroids-float16": lambda: M.EECEMeter(centroids("classwise").half()),
                "members": lambda: M.EECEMeter(centroids("classwise")[:, :, :3]),
                "multiclass": lambda: M.EECEMeter(centroids("top_label"), "top_label"),
                "another-class": lambda: M.UncertaintyMeter().update(data()["members"]),
            },
            inconsistent={**EECE_INCONSISTENT, "class-totals-differ": _bump_first_group},
        ),
        MeterCase(
            id="EECEMeter-top-label",
            class_name="EECEMeter",
            make=lambda: M.EECEMeter(centroids("top_label"), "top_label"),
            batch=members_batch,
            expected=eece_ref("top_label", multiclass="top_label"),
            bad=members_bad(binary=False, with_labels=True),
            incompatible={
                "classes-seen": lambda: M.EECEMeter(centroids("top_label"), "top_label").update(
                    data()["wide"][:, :24], data()["y"][:24]
                ),
                "binary": lambda: M.EECEMeter(centroids("top_label"), binary=True),
            },
            inconsistent=EECE_INCONSISTENT,
        ),
        MeterCase(
            id="EECEMeter-binary",
            class_name="EECEMeter",
            make=lambda: M.EECEMeter(centroids("binary"), binary=True),
            batch=binary_batch,
            expected=eece_ref("binary", binary=True),
            bad=members_bad(binary=True, with_labels=True),
            incompatible={"centroids": lambda: M.EECEMeter(centroids("binary") * 0.9, binary=True)},
            inconsistent=EECE_INCONSISTENT,
        ),
    ]
    return cases


def _tm_cases() -> list[MeterCase]:
    from bensemble import metrics as M
    from bensemble.integrations import torchmetrics as T

    def fed(make, members=False):
        def build():
            obj = make()
            d = data()
            obj.update(
                *(
                    (d["members"][:, :24], d["y"][:24])
                    if members
                    else (d["probs"][:24], d["y"][:24])
                )
            )
            return obj

        return build

    def members_batch(idx):
        return (data()["members"][:, idx], data()["y"][idx])

    return [
        _probs_case(
            "tm.ExpectedCalibrationError",
            "ExpectedCalibrationError",
            lambda: T.ExpectedCalibrationError(10),
            lambda p, y: M.expected_calibration_error(p, y, 10),
            incompatible={
                "n_bins": fed(lambda: T.ExpectedCalibrationError(12)),
                "norm": fed(lambda: T.ExpectedCalibrationError(10, "max")),
                "classes-seen": _seen_wide(lambda: T.ExpectedCalibrationError(10)),
                "another-class": fed(T.BrierScore),
            },
            inconsistent=ECE_INCONSISTENT,
            tm=True,
        ),
        _probs_case(
            "tm.ClasswiseCalibrationError",
            "ClasswiseCalibrationError",
            lambda: T.ClasswiseCalibrationError(K, 8),
            lambda p, y: M.classwise_calibration_error(p, y, 8),
            incompatible={
                "n_bins": fed(lambda: T.ClasswiseCalibrationError(K, 9)),
                "norm": fed(lambda: T.ClasswiseCalibrationError(K, 8, "max")),
                "num_classes": _seen_wide(lambda: T.ClasswiseCalibrationError(K + 1, 8)),
                "another-class": fed(lambda: T.ExpectedCalibrationError(8)),
            },
            inconsistent=CLASSWISE_INCONSISTENT,
            tm=True,
        ),
        _probs_case(
            "tm.NegativeLogLikelihood",
            "NegativeLogLikelihood",
            T.NegativeLogLikelihood,
            M.negative_log_likelihood,
            incompatible={
                "eps": fed(lambda: T.NegativeLogLikelihood(eps=0.0)),
                "classes-seen": _seen_wide(T.NegativeLogLikelihood),
                "another-class": fed(T.BrierScore),
            },
            inconsistent=MEAN_INCONSISTENT,
            tm=True,
        ),
        _probs_case(
            "tm.NegativeLogLikelihood-logits",
            "NegativeLogLikelihood",
            lambda: T.NegativeLogLikelihood(from_logits=True),
            lambda z, y: M.negative_log_likelihood(z, y, from_logits=True),
            from_logits=True,
            inconsistent=MEAN_INCONSISTENT,
            tm=True,
        ),
        _probs_case(
            "tm.BrierScore",
            "BrierScore",
            T.BrierScore,
            M.brier_score,
            incompatible={
                "classes-seen": _seen_wide(T.BrierScore),
                "another-class": fed(T.NegativeLogLikelihood),
            },
            inconsistent={**MEAN_INCONSISTENT, "above-two-per-sample": _add("total", 1e3)},
            tm=True,
        ),
        MeterCase(
            id="tm.ExpectedEpistemicCalibrationError",
            class_name="ExpectedEpistemicCalibrationError",
            make=lambda: T.ExpectedEpistemicCalibrationError(centroids("classwise")),
            batch=members_batch,
            expected=lambda idx: (
                M.expected_epistemic_calibration_error(
                    *members_batch(idx), binning="kmeans_fit", centroids=centroids("classwise")
                ),
            ),
            bad=members_bad(binary=False, with_labels=True),
            incompatible={
                "centroids": fed(
                    lambda: T.ExpectedEpistemicCalibrationError(centroids("classwise") + 0.01),
                    members=True,
                ),
                "n_bins": lambda: T.ExpectedEpistemicCalibrationError(centroids("classwise", 4)),
                "multiclass": lambda: T.ExpectedEpistemicCalibrationError(
                    centroids("top_label"), "top_label"
                ),
                "another-class": fed(T.BrierScore),
            },
            inconsistent={**EECE_INCONSISTENT, "class-totals-differ": _bump_first_group},
            torchmetrics=True,
        ),
    ]


@functools.cache
def cases() -> tuple[MeterCase, ...]:
    """Every case; the torchmetrics ones only when torchmetrics imports."""
    out = _plain_cases()
    try:
        import torchmetrics  # noqa: F401
    except ImportError:  # pragma: no cover - the optional extra is missing
        return tuple(out)
    return tuple(out + _tm_cases())
