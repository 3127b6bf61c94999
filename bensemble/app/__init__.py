"""The command-line applications: ``bensemble demo``, ``bensemble evaluate`` and their reports.

* :mod:`bensemble.app.demo` - the paper's methods on embedded data (``make demo``);
* :mod:`bensemble.app.evaluate` - metrics, uncertainty, temperature scaling and conformal sets
  for a user's saved predictions: one streaming engine for arrays, files larger than memory and
  shards, a package whose modules are the steps of its pipeline (load, accumulate, compute,
  render, write; its command line: :mod:`bensemble.app.evaluate.cli`);
* :mod:`bensemble.app.bootstrap` - vectorised bootstrap intervals of the demo's headline
  metrics (:mod:`bensemble.app.bootstrap_stats` registers them); :mod:`bensemble.app.verdict` -
  the rules behind the reports' three questions;
* :mod:`bensemble.app.evaluate.page` / :mod:`bensemble.app.demo_html` - the ``report.html`` pages.

The report kit both applications and the paper's reproductions (:mod:`bensemble.experiments`)
write with lives beneath them in :mod:`bensemble.reporting`; the nine methods' member builder in
:mod:`bensemble.methods.zoo`.
"""

__all__: list[str] = []
