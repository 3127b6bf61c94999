"""The meter battery's cases for the mergeable bootstrap-replicate states of
``bensemble.metrics.intervals`` (issue 19, item 1).

:class:`~bensemble.metrics.intervals.MeanReplicates`,
:class:`~bensemble.metrics.intervals.CalibrationReplicates`,
:class:`~bensemble.metrics.intervals.EECEReplicates` and the bundle
:class:`~bensemble.metrics.intervals.ReplicateState` are mergeable float64 states like the
meters: ``test_battery_meters.py`` drives them with the same machinery (bad batches, incompatible
merges, tampered state dicts, merges of random shards, update after compute). Their value is an
:class:`~bensemble.metrics.intervals.Interval` (the bundle: one per statistic), compared as
``(point, low, high, estimate)``: the point against the one-shot metric function (the
independent reference), the interval ends against one state fed every row in one chunk (the
weights are a function of the global row, so any split or merge must give the same interval).

Adding a replicate class: one ``MeterCase`` in :func:`replicate_cases` and its name in
:data:`REPLICATE_NAMES`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings, however this is imported

from battery_meters import (  # noqa: E402
    ECE_INCONSISTENT,
    H,
    K,
    MeterCase,
    _above_count,
    _first_filled,
    _fractional,
    _with,
    _zero,
    centroids,
    data,
    members_bad,
    probs_bad,
)

#: Every public mergeable replicate state of ``bensemble.metrics.intervals``.
REPLICATE_NAMES = ("MeanReplicates", "CalibrationReplicates", "EECEReplicates", "ReplicateState")

R = 12  # replicates: enough for both interval methods, cheap to tamper with
SEED = 3


def weights(idx: torch.Tensor) -> torch.Tensor:
    """The Poisson weights of the global rows ``idx`` (as ``ReplicateState`` draws them)."""
    from bensemble.metrics.intervals import poisson_weights

    return poisson_weights(idx, R, seed=SEED)


@functools.cache
def point_bins(kind: str) -> torch.Tensor:
    """Every row's bin under the fixed centroids of battery_meters: ``[K, N]`` or ``[N]``."""
    from bensemble.metrics import assign_bins

    d = data()
    if kind == "classwise":
        cents = centroids("classwise")
        return torch.stack([assign_bins(d["members"][:, :, c].T, cents[c]) for c in range(K)])
    return assign_bins(d["binary"].T, centroids("binary"))


def _parts(interval: Any) -> tuple[float, ...]:
    return (interval.point, interval.low, interval.high, interval.estimate)


def _expected(
    make: Callable[[], Any], batch: Callable[[torch.Tensor], tuple], reference: Callable
) -> Callable[[torch.Tensor], tuple[float, ...]]:
    """``(reference point, low, high, estimate of one state fed idx in one chunk)``."""

    def expected(idx: torch.Tensor) -> tuple[float, ...]:
        one = make()
        one.update(*batch(idx))
        return (float(reference(idx)), *_parts(one.compute())[1:])

    return expected


def _with_weights(cases: dict[str, Callable[[], tuple]]) -> dict[str, Callable[[], tuple]]:
    """Bad ``(data...)`` batches of 24 rows (``empty``: 0) with their weights in front."""

    def wrap(key, make):
        return lambda: (weights(torch.arange(0 if key == "empty" else 24)), *make())

    return {key: wrap(key, make) for key, make in cases.items()}


def weights_bad(rest: Callable[[], tuple]) -> dict[str, Callable[[], tuple]]:
    """Bad ``weights`` in front of a good chunk of 24 rows (``rest()``)."""
    good = weights(torch.arange(24))
    nan = good.clone()
    nan[2, 3] = float("nan")
    return {
        "weights-replicates": lambda: (good[:, :-1], *rest()),
        "weights-rows": lambda: (good[:-1], *rest()),
        "weights-1-d": lambda: (good[:, 0], *rest()),
        "weights-nan": lambda: (nan, *rest()),
        "weights-negative": lambda: (-good, *rest()),
        "weights-string": lambda: ("weights", *rest()),
    }


# ----------------------------------------------------------------------------- tampering
def _sums_at(s: dict, key: str, shape: tuple[int, ...]) -> torch.Tensor:
    return s[key].view(*shape)


def _gap_rows(prefix: str = "") -> dict[str, Callable[[dict], None]]:
    """Tampers of a calibration state's gap sums ``sums [G B, R + 1]``."""

    def point_row(s):
        i = _first_filled(s[f"{prefix}counts"].reshape(-1))[0]
        s[f"{prefix}sums"][i, 0] += 0.5

    def empty_bin(s):
        empty = int(torch.nonzero(s[f"{prefix}counts"].reshape(-1) == 0)[0])
        s[f"{prefix}sums"][empty, 1] = 0.25

    def above_weight(s):
        i = _first_filled(s[f"{prefix}counts"].reshape(-1))[0]
        s[f"{prefix}sums"][i, 1] = s[f"{prefix}totals"][1] + 1.0

    def counts_not_totals(s):
        i = _first_filled(s[f"{prefix}counts"])
        s[f"{prefix}counts"][i] += 1.0

    return {
        f"{prefix}point-row-not-gaps": point_row,
        f"{prefix}gaps-in-empty-bin": empty_bin,
        f"{prefix}gaps-above-weight": above_weight,
        f"{prefix}counts-not-totals": counts_not_totals,
    }


def _eece_tampers(groups: int, slots: int, prefix: str = "") -> dict[str, Callable[[dict], None]]:
    """Tampers of an EECE state's per-bin sums (``[G, M, H + 4, R + 1]``: W, Y, E, Q, P_h)."""
    shape = (groups, slots, H + 4, R + 1)
    key = f"{prefix}sums"

    def fullest(s):
        w = _sums_at(s, key, shape)[:, :, 0, 0]
        return _first_filled(w)

    def edit(row: int, value: Callable[[torch.Tensor], float], replicate: int = 0):
        def apply(s):
            v = _sums_at(s, key, shape)
            g, m = fullest(s)
            v[g, m, row, replicate] = value(v[g, m, :, replicate])

        return apply

    def eu_in_empty_bin(s):
        v = _sums_at(s, key, shape)
        g, m = (int(i) for i in torch.nonzero(v[:, :, 0, 0] == 0)[0])
        v[g, m, 2, 0] = 0.5

    return {
        f"{prefix}fractional-weight": edit(0, lambda b: b[0] + 0.5),
        f"{prefix}weight-not-totals": edit(0, lambda b: b[0] + 1.0),
        f"{prefix}outcomes-above-weight": edit(1, lambda b: b[0] + 1.0, replicate=1),
        f"{prefix}member-above-weight": edit(4, lambda b: b[0] + 1.0, replicate=2),
        f"{prefix}squared-gaps-above": edit(3, lambda b: H * b[0] + 1.0),
        f"{prefix}eu-negative": edit(2, lambda b: -0.5, replicate=1),
        f"{prefix}eu-in-empty-bin": eu_in_empty_bin,
    }


def _labels_lost(s: dict) -> None:
    i = _first_filled(s["sum_correct"])
    s["sum_correct"][i] -= 1.0


def _mean_tampers(prefix: str = "") -> dict[str, Callable[[dict], None]]:
    """A fractional count of samples; sums left where no weight is."""
    return {
        f"{prefix}fractional-count": _fractional(f"{prefix}totals"),
        f"{prefix}sums-without-weight": _zero(f"{prefix}totals"),
    }


# ----------------------------------------------------------------------------- the cases
def _mean_case() -> MeterCase:
    from bensemble.metrics.intervals import CalibrationReplicates, MeanReplicates

    def values(idx):
        return data()["probs"].max(-1).values[idx]

    def batch(idx):
        return weights(idx), values(idx)

    def make():
        return MeanReplicates(R)

    def fed(build, args=None):
        def go():
            obj = build()
            obj.update(*(args() if args else batch(torch.arange(24))))
            return obj

        return go

    vals = {
        "values-2-d": lambda: (values(torch.arange(24))[:, None],),
        "values-nan": lambda: (_with(values(torch.arange(24)), float("nan")),),
        "values-inf": lambda: (_with(values(torch.arange(24)), float("inf")),),
        "values-rows": lambda: (values(torch.arange(23)),),
        "values-string": lambda: ("values",),
        "empty": lambda: (values(torch.arange(0)),),
    }  # fmt: skip
    return MeterCase(
        id="MeanReplicates",
        class_name="MeanReplicates",
        make=make,
        batch=batch,
        expected=_expected(make, batch, lambda idx: values(idx).mean()),
        bad={**_with_weights(vals), **weights_bad(lambda: (values(torch.arange(24)),))},
        incompatible={
            "n_replicates": lambda: MeanReplicates(R + 1),
            "covers": fed(lambda: MeanReplicates(R, covers="the mean NLL")),
            "another-class": fed(
                lambda: CalibrationReplicates(5, n_replicates=R),
                lambda: (weights(torch.arange(24)), data()["probs"][:24], data()["y"][:24]),
            ),
        },
        inconsistent=_mean_tampers(),
        signed=("sums",),
    )


def _calibration_cases() -> list[MeterCase]:
    from bensemble.metrics import classwise_calibration_error, expected_calibration_error
    from bensemble.metrics.intervals import CalibrationReplicates, MeanReplicates

    def batch(idx):
        return weights(idx), data()["probs"][idx], data()["y"][idx]

    def fed(build, wide=False):
        def go():
            obj = build()
            d = data()
            p = d["wide"].mean(0) if wide else d["probs"]
            obj.update(weights(torch.arange(24)), p[:24], d["y"][:24])
            return obj

        return go

    def top():
        return CalibrationReplicates(10, num_classes=K, n_replicates=R)

    def classwise():
        return CalibrationReplicates(8, classwise=True, num_classes=K, n_replicates=R)

    def rest():
        return data()["probs"][:24], data()["y"][:24]

    bad = {**_with_weights(probs_bad(False)), **weights_bad(rest)}
    return [
        MeterCase(
            id="CalibrationReplicates-top-label",
            class_name="CalibrationReplicates",
            make=top,
            batch=batch,
            expected=_expected(
                top, batch, lambda i: expected_calibration_error(*batch(i)[1:], n_bins=10)
            ),
            bad=bad,
            incompatible={
                "n_bins": fed(lambda: CalibrationReplicates(12, num_classes=K, n_replicates=R)),
                "n_replicates": lambda: CalibrationReplicates(
                    10, num_classes=K, n_replicates=R + 2
                ),
                "num_classes": fed(
                    lambda: CalibrationReplicates(10, num_classes=K + 1, n_replicates=R), wide=True
                ),
                "undeclared-classes": fed(lambda: CalibrationReplicates(10, n_replicates=R)),
                "classwise": fed(
                    lambda: CalibrationReplicates(10, classwise=True, num_classes=K, n_replicates=R)
                ),
                "another-class": lambda: MeanReplicates(R),
            },
            inconsistent={**ECE_INCONSISTENT, **_gap_rows()},
            signed=("sums",),
        ),
        MeterCase(
            id="CalibrationReplicates-classwise",
            class_name="CalibrationReplicates",
            make=classwise,
            batch=batch,
            expected=_expected(
                classwise, batch, lambda i: classwise_calibration_error(*batch(i)[1:], n_bins=8)
            ),
            bad=bad,
            incompatible={
                "num_classes": fed(
                    lambda: CalibrationReplicates(
                        8, classwise=True, num_classes=K + 1, n_replicates=R
                    ),
                    wide=True,
                ),
                "n_bins": fed(
                    lambda: CalibrationReplicates(9, classwise=True, num_classes=K, n_replicates=R)
                ),
                "top-label": fed(lambda: CalibrationReplicates(8, num_classes=K, n_replicates=R)),
            },
            inconsistent={**ECE_INCONSISTENT, **_gap_rows(), "labels-lost": _labels_lost},
            signed=("sums",),
        ),
    ]


def _eece_cases() -> list[MeterCase]:
    from bensemble.metrics import expected_epistemic_calibration_error as eece
    from bensemble.metrics.intervals import EECEReplicates, MeanReplicates

    # one slot more than the centroids: an empty bin (allowed) that a tampered state may fill
    slots = centroids("classwise").shape[1] + 1
    binary_slots = centroids("binary").shape[0] + 1

    def classwise_batch(idx):
        d = data()
        return weights(idx), d["members"][:, idx], d["y"][idx], point_bins("classwise")[:, idx]

    def binary_batch(idx):
        d = data()
        return weights(idx), d["binary"][:, idx], d["binary_y"][idx], point_bins("binary")[idx]

    def classwise():
        return EECEReplicates(H, slots, n_groups=K, n_replicates=R)

    def binary():
        return EECEReplicates(H, binary_slots, binary=True, n_replicates=R)

    def classwise_ref(idx):
        d = data()
        cents = centroids("classwise")
        return eece(d["members"][:, idx], d["y"][idx], binning="kmeans_fit", centroids=cents)

    def binary_ref(idx):
        d = data()
        cents = centroids("binary")
        p, y = d["binary"][:, idx], d["binary_y"][idx]
        return eece(p, y, binning="kmeans_fit", centroids=cents, binary=True)

    def with_bins(cases, bins):
        """(member_probs, labels[, eu]) -> (weights, member_probs, labels, point_bins[, eu])."""

        def wrap(key, make):
            def go():
                rows = 0 if key == "empty" else 24
                args = make()
                return (weights(torch.arange(rows)), *args[:2], bins()[..., :rows], *args[2:])

            return go

        return {key: wrap(key, make) for key, make in cases.items()}

    def bins_bad(batch):
        good = batch(torch.arange(24))
        return {
            "point-bins-out-of-range": lambda: (*good[:3], good[3] + slots + 1),
            "point-bins-negative": lambda: (*good[:3], good[3] - 100),
            "point-bins-float": lambda: (*good[:3], good[3].double()),
            "point-bins-rows": lambda: (*good[:3], good[3][..., :-1]),
            "point-bins-3-d": lambda: (*good[:3], good[3][None, None]),
        }

    def fed(build, batch=classwise_batch):
        def go():
            obj = build()
            obj.update(*batch(torch.arange(24)))
            return obj

        return go

    def cw_rest():
        return classwise_batch(torch.arange(24))[1:]

    return [
        MeterCase(
            id="EECEReplicates-classwise",
            class_name="EECEReplicates",
            make=classwise,
            batch=classwise_batch,
            expected=_expected(classwise, classwise_batch, classwise_ref),
            bad={
                **with_bins(
                    members_bad(binary=False, with_labels=True),
                    lambda: point_bins("classwise")[:, :24],
                ),
                **bins_bad(classwise_batch),
                **weights_bad(cw_rest),
            },  # fmt: skip
            incompatible={
                "n_replicates": lambda: EECEReplicates(H, slots, n_groups=K, n_replicates=R + 1),
                "n_members": lambda: EECEReplicates(H - 1, slots, n_groups=K, n_replicates=R),
                "n_slots": fed(lambda: EECEReplicates(H, slots + 3, n_groups=K, n_replicates=R)),
                "n_groups": lambda: EECEReplicates(H, slots, n_groups=K + 1, n_replicates=R),
                "binary": fed(
                    lambda: EECEReplicates(H, binary_slots, binary=True, n_replicates=R),
                    binary_batch,
                ),
                "another-class": lambda: MeanReplicates(R),
            },
            inconsistent=_eece_tampers(K, slots),
        ),
        MeterCase(
            id="EECEReplicates-binary",
            class_name="EECEReplicates",
            make=binary,
            batch=binary_batch,
            expected=_expected(binary, binary_batch, binary_ref),
            bad={
                **with_bins(
                    members_bad(binary=True, with_labels=True), lambda: point_bins("binary")[:24]
                ),
                **bins_bad(binary_batch),
            },  # fmt: skip
            incompatible={
                "classwise": lambda: EECEReplicates(H, binary_slots, n_groups=K, n_replicates=R),
                "n_slots": lambda: EECEReplicates(H, binary_slots + 1, binary=True, n_replicates=R),
            },
            inconsistent=_eece_tampers(1, binary_slots),
        ),
    ]


def _bundle_case() -> MeterCase:
    from bensemble.metrics import expected_calibration_error
    from bensemble.metrics import expected_epistemic_calibration_error as eece
    from bensemble.metrics.intervals import MeanReplicates, ReplicateState

    slots = centroids("classwise").shape[1] + 1  # one empty slot, as in _eece_cases

    def make(seed=SEED, level=0.9, n_replicates=R, ece_bins=10, with_eece=True):
        state = ReplicateState(n_replicates, seed=seed, level=level)
        state.add_mean("acc")
        state.add_calibration("ece", ece_bins, num_classes=K)
        if with_eece:
            state.add_eece("eece", H, slots, n_groups=K)
        return state

    def inputs(idx):
        d = data()
        correct = (d["probs"].argmax(-1) == d["y"]).double()
        return {
            "acc": (correct[idx],),
            "ece": (d["probs"][idx], d["y"][idx]),
            "eece": (d["members"][:, idx], d["y"][idx], point_bins("classwise")[:, idx]),
        }

    def batch(idx):
        return idx, inputs(idx)

    def references(idx):
        d = data()
        acc = float((d["probs"][idx].argmax(-1) == d["y"][idx]).double().mean())
        ece = expected_calibration_error(d["probs"][idx], d["y"][idx], n_bins=10)
        cents = centroids("classwise")
        e = eece(d["members"][:, idx], d["y"][idx], binning="kmeans_fit", centroids=cents)
        return {"acc": acc, "ece": ece, "eece": e}

    def expected(idx):
        one = make().update(*batch(idx)).compute()
        refs = references(idx)
        return tuple(x for name in sorted(one) for x in (refs[name], *_parts(one[name])[1:]))

    def fed(build):
        def go():
            return build().update(*batch(torch.arange(24)))

        return go

    idx = torch.arange(24)

    def replace(name, args):
        return lambda: (idx, {**inputs(idx), name: args()})

    bad = {
        "sample-index-negative": lambda: (idx - 1, inputs(idx)),
        "sample-index-float": lambda: (idx.double(), inputs(idx)),
        "sample-index-2-d": lambda: (idx[None], inputs(idx)),
        "sample-index-rows": lambda: (idx[:-1], inputs(idx)),
        "sample-index-range-step": lambda: (range(0, 48, 2), inputs(idx)),
        "inputs-not-mapping": lambda: (idx, [inputs(idx)]),
        "unknown-name": lambda: (idx, {**inputs(idx), "nll": inputs(idx)["acc"]}),
        "args-not-tuple": replace("acc", lambda: list(inputs(idx)["acc"])),
        "ece-nan": replace("ece", lambda: probs_bad(False)["nan"]()),
        "ece-wrong-k": replace("ece", lambda: probs_bad(False)["wrong-k"]()),
        "eece-wrong-members": replace(
            "eece", lambda: (data()["members"][:-1, :24], *inputs(idx)["eece"][1:])
        ),
        "eece-bins-out-of-range": replace(
            "eece", lambda: (*inputs(idx)["eece"][:2], inputs(idx)["eece"][2] + slots)
        ),
    }
    return MeterCase(
        id="ReplicateState",
        class_name="ReplicateState",
        make=make,
        batch=batch,
        expected=expected,
        bad=bad,
        incompatible={
            "seed": fed(lambda: make(seed=SEED + 1)),
            "level": fed(lambda: make(level=0.95)),
            "n_replicates": lambda: make(n_replicates=R + 2),
            "statistics": lambda: make(with_eece=False),
            "ece-n_bins": fed(lambda: make(ece_bins=12)),
            "another-class": lambda: MeanReplicates(R),
        },
        inconsistent={
            **_mean_tampers("acc."),
            "ece.correct-above-count": _above_count("ece.sum_correct", "ece.counts"),
            **_gap_rows("ece."),
            **_eece_tampers(K, slots, "eece."),
        },
        signed=("acc.sums", "ece.sums"),
    )


@functools.cache
def replicate_cases() -> tuple[MeterCase, ...]:
    """Every replicate-state case."""
    return (_mean_case(), *_calibration_cases(), *_eece_cases(), _bundle_case())
