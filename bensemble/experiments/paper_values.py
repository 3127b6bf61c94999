"""The paper's numbers as data: ``bensemble/experiments/paper/*.json`` (shipped with the package).

* ``table1_mnist.json`` / ``table2_cifar10.json`` - tables 1 and 2, every value as printed (the
  printed decimals set each value's rounding band, :class:`~bensemble.experiments.verdicts.
  PaperValue`): :func:`paper_table`;
* ``section4.json`` - the numbers and findings the text of section 4 and the appendices states
  (toy findings, the size and noise experiments, the binning minimum, fig. 1):
  :func:`paper_section`.

Nothing here computes; the experiments read these files and put the paper's value beside ours.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from bensemble._validation import check_option
from bensemble.experiments.verdicts import PaperValue

__all__ = ["TABLES", "PaperTable", "paper_section", "paper_table"]

#: Table name -> its data file.
TABLES = {"table1": "table1_mnist.json", "table2": "table2_cifar10.json"}
METRICS = ("accuracy", "ece", "eece")


@cache
def _load(filename: str) -> dict[str, Any]:
    return json.loads(
        resources.files("bensemble.experiments").joinpath("paper", filename).read_text()
    )


@dataclass(frozen=True)
class PaperTable:
    """One of the paper's one-vs-all tables: ``printed[metric][task][method]`` as text."""

    name: str
    source: str
    methods: tuple[str, ...]
    tasks: tuple[str, ...]
    printed: dict[str, tuple[tuple[str, ...], ...]]

    def value(self, metric: str, task: int, method: str) -> str:
        """The printed value of ``metric`` for task number ``task`` and ``method``."""
        return self.printed[metric][task][self.methods.index(method)]

    def mean(self, metric: str, method: str, tasks: Any = None) -> PaperValue:
        """Mean of ``method``'s printed ``metric`` over ``tasks`` (default all), with its band."""
        rows = range(len(self.tasks)) if tasks is None else tasks
        return PaperValue.mean_of([self.value(metric, t, method) for t in rows])


def paper_table(name: str) -> PaperTable:
    """Table ``"table1"`` (MNIST) or ``"table2"`` (CIFAR-10) of the paper.

    Example:
        >>> t = paper_table("table1")
        >>> t.value("eece", 0, "Likelihood"), round(t.mean("eece", "Likelihood").value, 3)
        ('0.14', 0.14)
    """
    check_option(name, "name", tuple(TABLES), "paper_table")
    data = _load(TABLES[name])
    printed = {m: tuple(tuple(row.split()) for row in data[m]) for m in METRICS}
    return PaperTable(name, data["source"], tuple(data["methods"]), tuple(data["tasks"]), printed)


def paper_section(name: str) -> dict[str, Any]:
    """What section 4 / the appendices state about experiment ``name`` (a JSON object)."""
    data = _load("section4.json")
    check_option(name, "name", tuple(k for k in data if k != "source"), "paper_section")
    return data[name]
