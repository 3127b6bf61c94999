"""The paper's one-vs-all protocol (section 4.3, tables 1-2, fig. 4(a)) as one spec factory.

``digits``, ``fashion``, ``mnist`` and ``cifar10`` differ only in their data, declared as a
:class:`VisionDataset` (:mod:`bensemble.experiments.vision`, :mod:`bensemble.experiments.digits`);
:func:`one_vs_all_spec` turns a declaration into an :class:`~bensemble.experiments.runner.
ExperimentSpec`. Per repeat: the paper's auto-encoder on every training image (or the raw
pixels), the classifiers on ``n_train`` seeded training latents, and for every "k vs all" task
the nine methods (:func:`~bensemble.experiments._scores.score_method`: members, or the
illustrative methods under every convention) and the Likelihood's readings
(:mod:`bensemble.experiments.likelihood_variants`), scored on the test images.

Tables (:mod:`bensemble.experiments._one_vs_all_tables`): per task, the summary over tasks (sd
across tasks, the paper's ten-task mean beside it), the paper's layout, the illustrative methods
under every convention, the Likelihood readings. Verdicts: each mean against the paper's mean of
its ten tasks (not comparable on a stand-in data set), and the paper's orderings per task and
repeat (:func:`~bensemble.experiments.findings.one_vs_all_findings`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bensemble.experiments._common import RunOptions, zoo_settings
from bensemble.experiments._one_vs_all_tables import (
    METRICS,
    figures,
    paper_of,
    tables,
    task_units,
)
from bensemble.experiments._scores import EECE_BINS, one_vs_all, score_method
from bensemble.experiments.autoencoder import encode, train_autoencoder
from bensemble.experiments.findings import one_vs_all_findings
from bensemble.experiments.illustrative import CONVENTIONS, Convention
from bensemble.experiments.likelihood_variants import likelihood_variant_records
from bensemble.experiments.runner import ExperimentConfig, ExperimentSpec, verdict_row
from bensemble.experiments.verdicts import compare_values
from bensemble.methods.zoo import PAPER_ORDER, ZooSettings

__all__ = ["QUICK", "VARIANTS_JOB", "OneVsAllConfig", "VisionDataset", "one_vs_all_spec"]

#: Tiny settings of ``--quick`` runs, for tests.
QUICK = {"n_train": 100, "n_test": 100, "tasks": (0, 1), "ae_epochs": 1, "n_bins": 10}
#: The job of a task that scores the Likelihood's readings.
VARIANTS_JOB = "Likelihood readings"


@dataclass(frozen=True)
class VisionDataset:
    """A data set of the one-vs-all protocol, declared.

    Attributes:
        name: the experiment name (``bensemble reproduce NAME``).
        title: the data set in words.
        load: ``(config, seed) -> {"train": (images, labels), "test": (images, labels)}``,
            images ``[N, C, S, S]`` in [0, 1] (raises :class:`~bensemble.experiments.
            reproduce.DataUnavailableError` when its files are missing).
        class_names: the ten tasks' names.
        latent_dim, ae_epochs: the auto-encoder (appendix B.1.2).
        n_train: classifier training latents by default (``None``: all).
        paper: ``"table1"`` / ``"table2"`` (the paper's table of this protocol).
        paper_label: the paper's column in words.
        stand_in: why the paper's values belong to another data set (``None``: they don't).
        paper_rows: per task, its row of the paper's table (``None``: compare the means).
        check: ``options -> None`` raising on missing required options (``--data-dir``).
    """

    name: str
    title: str
    load: Callable[[Any, int], dict[str, tuple[torch.Tensor, torch.Tensor]]]
    class_names: tuple[str, ...]
    latent_dim: int
    ae_epochs: int
    n_train: int | None
    paper: str
    paper_label: str
    stand_in: str | None = None
    paper_rows: bool = True
    check: Callable[[RunOptions], None] = lambda options: None


@dataclass(frozen=True)
class OneVsAllConfig(ExperimentConfig):
    """A one-vs-all run's settings."""

    dataset: VisionDataset
    tasks: tuple[tuple[int, str], ...]
    n_bins: int
    settings: ZooSettings
    ae_epochs: int
    features: str
    n_train: int | None
    n_test: int | None
    extra: dict[str, Any]

    def header(self) -> str:
        features = (
            f"the paper's conv auto-encoder ({self.dataset.latent_dim}-d latent, "
            f"{self.ae_epochs} epochs on the training images)"
            if self.features == "ae"
            else "the raw pixels"
        )
        return (
            f"{self.dataset.title}; features: {features}; classifiers on {self.n_train or 'all'} "
            f"training points, scored on {self.n_test or 'all'} test images; {len(self.tasks)} "
            f"one-vs-all tasks x 9 methods; EECE with {self.n_bins} K-means bins"
        )


def _configure(dataset: VisionDataset) -> Callable[[RunOptions], OneVsAllConfig]:
    def configure(options: RunOptions) -> OneVsAllConfig:
        fn = f"reproduce {dataset.name}"
        dataset.check(options)
        quick, extra = options.quick, dict(options.extra)
        features = extra.get("features") or "ae"
        if features not in ("ae", "raw"):
            raise ValueError(f"{fn}: `features` must be 'ae' or 'raw' (got {features!r})")
        classes = QUICK["tasks"] if quick else tuple(range(10))
        asked = extra.get("n_train")
        n_train = (QUICK["n_train"] if quick else dataset.n_train) if asked is None else asked
        return OneVsAllConfig(
            quick, Convention.from_extra(extra, fn), dataset,
            tuple((k, dataset.class_names[k]) for k in classes),
            QUICK["n_bins"] if quick else EECE_BINS, zoo_settings(quick),
            QUICK["ae_epochs"] if quick else dataset.ae_epochs, features,
            n_train or None, extra.get("n_test") or (QUICK["n_test"] if quick else None), extra,
        )  # fmt: skip

    return configure


def _subset(x, y, n: int | None, seed: int):
    """A seeded subset of ``n`` points (all when ``n`` is ``None`` or too large)."""
    if n is None or n >= len(y):
        return x, y
    keep = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:n]
    return x[keep], y[keep]


def _prepare(config: OneVsAllConfig, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    data = config.dataset.load(config, seed)
    (x_tr, y_tr), (x_te, y_te) = data["train"], data["test"]
    if x_tr.shape[-1] % 4 or x_tr.shape[-1] != x_tr.shape[-2]:
        raise ValueError(
            f"{config.dataset.name}: images must be square with a side divisible by 4 "
            f"(got {list(x_tr.shape[1:])})"
        )
    x_te, y_te = _subset(x_te, y_te, config.n_test, seed)
    if config.features == "raw":
        z_tr, z_te = x_tr.flatten(1), x_te.flatten(1)
    else:
        ae = train_autoencoder(
            x_tr, latent_dim=config.dataset.latent_dim, epochs=config.ae_epochs, seed=seed
        )
        z_tr, z_te = encode(ae, x_tr), encode(ae, x_te)
    z_tr, y_tr = _subset(z_tr, y_tr, config.n_train, seed)
    return {"train": (z_tr.double(), y_tr), "test": (z_te.double(), y_te)}


def _conditions(config: OneVsAllConfig) -> list[tuple[int, str, str]]:
    methods = (*PAPER_ORDER, VARIANTS_JOB)
    return [(k, name, method) for k, name in config.tasks for method in methods]


def _measure(config: OneVsAllConfig, data: dict, job: tuple, seed: int) -> list[dict[str, Any]]:
    k, task, method = job
    (x_tr, y_tr), (x_te, y_te) = data["train"], data["test"]
    if method == VARIANTS_JOB:
        return likelihood_variant_records(
            (x_tr, y_tr), (x_te, y_te), (k, task), convention=config.convention, seed=seed,
            n_bins=config.n_bins, n_members=config.settings.n_samples,
        )  # fmt: skip
    conventions = (config.convention, *(c for c in CONVENTIONS if c != config.convention))
    result = score_method(
        method, (x_tr, one_vs_all(y_tr, k)), (x_te, one_vs_all(y_te, k)),
        settings=config.settings, conventions=conventions, n_bins=config.n_bins, seed=seed,
    )  # fmt: skip
    return [{"kind": "method", "task": task, "method": method, **r} for r in result.records]


def _verdicts(config: OneVsAllConfig, records) -> list[dict[str, Any]]:
    dataset = config.dataset
    units, paper_rows = task_units(config, records)
    out = []
    for metric, label in METRICS:
        for method in PAPER_ORDER:
            values = [u[(method, metric)] for u in units]
            verdict = compare_values(
                values, paper_of(config, metric, method), paper_repeats=10, quick=config.quick,
                accuracy=metric == "accuracy", stand_in=dataset.stand_in,
            )  # fmt: skip
            out.append(
                verdict_row(
                    method, f"mean {label} over tasks", paper_of(config, metric, method), verdict
                )
            )
    eece_units = [{m: u[(m, "eece")] for m in PAPER_ORDER} for u in units]
    return out + one_vs_all_findings(config, eece_units, paper_rows)


def one_vs_all_spec(dataset: VisionDataset, description: str) -> ExperimentSpec:
    """The :class:`~bensemble.experiments.runner.ExperimentSpec` of ``dataset``."""
    return ExperimentSpec(
        name=dataset.name,
        description=description,
        configure=_configure(dataset),
        conditions=_conditions,
        prepare=_prepare,
        measure=_measure,
        tables=tables(dataset),
        verdicts=_verdicts,
        figures=figures,
        notes=lambda c: [
            f"the tables' Likelihood is the '{c.settings.likelihood}' reading and Centroids "
            f"use the '{c.settings.centroids_distance}' kernel (bensemble.methods.zoo); "
            "likelihood_variants lists the other readings"
        ],
        illustrative=True,
    )
