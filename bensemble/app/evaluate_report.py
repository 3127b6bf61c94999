"""The report folder of ``bensemble evaluate``: tables, ``summary.json`` and figures.

:func:`planned_files` names the files before anything is computed (so the command can refuse a
folder that would overwrite an input); :func:`write_evaluation` draws the figures in memory,
stages every file beside the target folder and swaps the finished folder in.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from bensemble.app.report import Report, environment

if TYPE_CHECKING:
    from bensemble.app.evaluate import Evaluation

__all__ = ["planned_files", "write_evaluation"]


def planned_files(*, ensemble: bool, split: bool) -> list[str]:
    """File names :func:`write_evaluation` writes, known before anything is computed."""
    names = ["metrics"] + (["ensemble"] if ensemble else []) + (["conformal"] if split else [])
    files = [f"{t}{ext}" for t in names for ext in (".md", ".csv", ".json")]
    files += ["summary.json", "reliability.png"]
    if split:
        files.append("reliability_scaled.png")
    if ensemble:
        files.append("epistemic_reliability.png")
    return files


def _figures(ev: Evaluation, n_bins: int) -> tuple[dict[str, Any], list[str]]:
    """Figures of the report keyed by file stem, drawn in memory (nothing is written).

    A figure that fails to draw is left out; the second item lists why, one line each.
    """
    import matplotlib.pyplot as plt

    from bensemble import plots

    def reliability(probs: torch.Tensor, name: str | None) -> Any:
        disp = plots.ReliabilityDisplay.from_predictions(probs, ev.labels, n_bins=n_bins, name=name)
        return disp.plot().figure_

    def epistemic() -> Any:
        disp = plots.EpistemicReliabilityDisplay.from_details(ev.eece_details, name="ensemble")
        return disp.plot().figure_

    makers: dict[str, Any] = {}
    if ev.scaled_probs is None:
        makers["reliability"] = lambda: reliability(ev.probs, None)
    else:
        scaled = ev.scaled_probs
        makers["reliability"] = lambda: reliability(ev.probs, "unscaled")
        makers["reliability_scaled"] = lambda: reliability(scaled, f"T = {ev.temperature:.3f}")
    if ev.eece_details is not None:
        makers["epistemic_reliability"] = epistemic
    figs: dict[str, Any] = {}
    problems: list[str] = []
    for name, make in makers.items():
        before = set(plt.get_fignums())
        try:
            figs[name] = make()
        except Exception as exc:  # noqa: BLE001 - a figure must not cost the user the numbers
            for number in set(plt.get_fignums()) - before:
                plt.close(number)
            problems.append(
                f"{name}.png left out ({type(exc).__name__}: {' '.join(str(exc).split())})"
            )
    return figs, problems


def write_evaluation(
    ev: Evaluation,
    out_dir: str | os.PathLike,
    *,
    extra: dict | None = None,
    overwrite: bool = False,
) -> Report:
    """Write the tables, ``summary.json`` and the figures of ``ev`` into ``out_dir``.

    Every figure is drawn in memory before anything is written; one that fails to draw is left
    out and named in ``report.problems`` (and in ``summary.json``) rather than stopping the report.
    The files are staged beside ``out_dir`` and swapped in at the end, so ``out_dir`` holds
    exactly this run's files; an earlier report there is replaced only with ``overwrite``, and a
    folder holding anything else is refused (``ValueError``). ``summary.json`` records the
    versions (:func:`~bensemble.app.report.environment`).

    Returns:
        The :class:`~bensemble.app.report.Report`; ``report.files`` lists what was
        written and ``report.problems`` the figures left out.
    """
    report = Report(out_dir, staged=True, overwrite=overwrite)
    figs, problems = _figures(ev, ev.setup["n_bins"])
    report.problems = problems
    try:
        for name, title, rows in ev.tables():
            report.add_table(name, rows, title=title)
        summary = ev.to_dict()
        summary.update(extra or {})
        summary["files"] = [
            f
            for f in planned_files(
                ensemble=ev.ensemble is not None, split=ev.temperature is not None
            )
            if not f.endswith(".png") or f[:-4] in figs
        ]
        summary["problems"] = problems
        summary["versions"] = environment()
        report.add_json("summary", summary)
        for name in list(figs):
            report.add_figure(name, figs.pop(name))
        report.commit()
    except BaseException:
        report.discard()
        raise
    finally:
        if figs:
            import matplotlib.pyplot as plt

            for fig in figs.values():
                plt.close(fig)
    return report
