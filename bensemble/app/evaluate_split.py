"""The calibration split of ``bensemble evaluate --chunk-size N``
(:func:`~bensemble.app.evaluate_memmap.evaluate_memmap`).

:class:`CalibratedPart` gathers the temperature and conformal calibration rows of
:func:`~bensemble.app.evaluate.split_indices` into memory as ensemble-mean probabilities
``[n_cal, K]`` (ascending reads from the file, a chunk at a time), fits them exactly as the
in-memory path does, then accumulates the streamed test part: the temperature-scaled metrics
(``log p / T`` per chunk) and the conformal sets' coverage, size, empty sets and per-class
coverage as counts. Randomised APS / RAPS sets get the uniforms the in-memory ``predict_set``
draws for each test sample (one float64 per sample).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

__all__ = ["CalibratedPart", "gathered_mean"]


def gathered_mean(rows, index: torch.Tensor, chunk: int) -> torch.Tensor:
    """The member mean ``[n, K]`` of the rows ``index`` (in that order), ``chunk`` rows per read:
    the calibration part is held as ensemble-mean probabilities, not ``M`` members."""
    index = index.numpy()
    parts = [rows.take(index[a : a + chunk]).mean(0) for a in range(0, len(index), chunk)]
    rows.release()
    return torch.cat(parts)


class CalibratedPart:
    """The calibration part fitted in memory (temperature, conformal threshold) and the
    streamed test-part sums of the scaled metrics and the conformal sets."""

    def __init__(self, rows, y, temp_idx, conf_idx, test, score, alpha, seed, chunk) -> None:
        from bensemble.calibration import CalibrationFitError, TemperatureScaling
        from bensemble.conformal import SplitConformalClassifier

        fn = "evaluate_predictions"
        n = rows.n
        scaler = TemperatureScaling(on_boundary="warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                scaler.fit(self._log_mean(gathered_mean(rows, temp_idx, chunk)), y[temp_idx])
        except CalibrationFitError as exc:
            raise ValueError(
                f"{fn}: cannot fit a temperature on the calibration part ({exc})"
            ) from None
        self.scaler = scaler
        self.temperature = float(scaler.temperature.item())
        notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        self.converged = bool(scaler.converged_)
        self.warning = " ".join(" ".join(notes).split()) or None
        self.cp = SplitConformalClassifier(
            score, alpha=alpha, generator=torch.Generator().manual_seed(seed)
        )
        self.cp.calibrate(self.scale(gathered_mean(rows, conf_idx, chunk)), y[conf_idx])
        # the uniforms predict_set would draw for the test part, in test order, kept per row
        u = self.cp._uniforms(len(test), torch.device("cpu"))
        self.u = None
        if u is not None:
            self.u = torch.zeros(n, dtype=torch.float64)
            self.u[test] = u
        self.is_test = torch.zeros(n, dtype=torch.bool)
        self.is_test[test] = True
        self.covered = self.size = self.empty = 0
        self.covered_per_class = torch.zeros(rows.k, dtype=torch.float64)

    @staticmethod
    def _log_mean(mean: torch.Tensor) -> torch.Tensor:
        return mean.clamp_min(torch.finfo(mean.dtype).tiny).log()

    def scale(self, mean: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.softmax(self.scaler(self._log_mean(mean)).to(torch.float64), dim=-1)

    def update(self, mean, yb, meters, start: int, keep: torch.Tensor) -> torch.Tensor:
        """Add a chunk's test rows to the scaled metrics and the conformal counts; returns the
        temperature-scaled probabilities."""
        from bensemble.conformal.split import lac_cutoff

        probs = self.scale(mean)
        for meter in meters.values():
            meter.update(probs, yb)
        cp = self.cp
        if self.u is None and cp.score == "lac":
            sets = probs >= lac_cutoff(cp.threshold_, probs.dtype, probs.device)
        else:
            u = None if self.u is None else self.u[start : start + keep.shape[0]][keep]
            sets = cp._scores(probs, u) <= cp.threshold_
        covered = sets.gather(1, yb[:, None]).squeeze(1)
        self.covered += int(covered.sum())
        self.size += int(sets.sum())
        self.empty += int((~sets.any(1)).sum())
        self.covered_per_class += torch.bincount(
            yb, weights=covered.to(torch.float64), minlength=self.covered_per_class.shape[0]
        )
        return probs

    def conformal(self, n_calibration: int, n_test: int) -> dict[str, Any]:
        alpha = self.cp.alpha
        return {
            "score": self.cp.score,
            "alpha": alpha,
            "target_coverage": 1.0 - alpha,
            "coverage": self.covered / n_test,
            "mean_set_size": self.size / n_test,
            "empty_set_rate": self.empty / n_test,
            "n_calibration": n_calibration,
            "n_test": n_test,
        }
