"""What a ``bensemble demo`` run trains and on how much data (:class:`DemoConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bensemble._options import check_count

if TYPE_CHECKING:
    from bensemble.methods.zoo import ZooSettings

__all__ = ["DIGITS_BINARY_ONLY", "DIGITS_MULTICLASS", "DemoConfig"]

#: Methods whose members are 10-class on digits.
DIGITS_MULTICLASS = ("DropConnect", "Random Forest", "MC-Dropout", "Deep Ensemble", "Bayesian Deep")
#: Binary-only methods, run one-vs-all on digits.
DIGITS_BINARY_ONLY = ("Centroids", "Bayesian Log. Reg.", "Likelihood", "EK-NN")


@dataclass(frozen=True)
class DemoConfig:
    """Sizes, methods and method settings of a demo run (defaults: the full demo).

    Attributes:
        toy_train, toy_calibration, toy_test: sizes of the three toy draws.
        grid_per_axis: side of the toy grid of the EU maps.
        toy_methods: methods run on the toy data (``None``: all nine).
        digits_methods: methods run on the ten digit classes.
        digits_binary_methods: binary-only methods run one-vs-all on digits.
        settings: method settings (``None``: the paper's, ``ZooSettings()``).
    """

    toy_train: int = 200
    toy_calibration: int = 1000
    toy_test: int = 2000
    grid_per_axis: int = 60
    toy_methods: tuple[str, ...] | None = None
    digits_methods: tuple[str, ...] = DIGITS_MULTICLASS
    digits_binary_methods: tuple[str, ...] = DIGITS_BINARY_ONLY
    settings: ZooSettings | None = None

    def __post_init__(self) -> None:
        fn = "DemoConfig"
        for name in ("toy_train", "toy_calibration", "toy_test"):
            check_count(getattr(self, name), name, fn, minimum=2)
        check_count(self.grid_per_axis, "grid_per_axis", fn, minimum=2)

    @classmethod
    def quick(cls) -> DemoConfig:
        """The ``--quick`` version: fewer points, methods, members and epochs."""
        from bensemble.methods.zoo import ZooSettings

        return cls(
            toy_train=100,
            toy_calibration=400,
            toy_test=600,
            grid_per_axis=25,
            toy_methods=("Random Forest", "MC-Dropout", "Deep Ensemble", "EK-NN"),
            digits_methods=("Random Forest", "Deep Ensemble"),
            digits_binary_methods=("EK-NN",),
            settings=ZooSettings.quick(epochs=8, n_members=3, n_samples=20, n_trees=20),
        )
