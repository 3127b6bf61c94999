"""The command-line applications: ``bensemble demo``, ``bensemble evaluate`` and their reports.

* :mod:`bensemble.app.demo` - the paper's methods on embedded data (``make demo``);
* :mod:`bensemble.app.evaluate` - metrics, uncertainty, temperature scaling and conformal sets
  for a user's saved predictions (its command line: :mod:`bensemble.app.evaluate_cli`; its
  intervals, notes and verdicts: :mod:`bensemble.app.evaluate_summary`);
* :mod:`bensemble.app.bootstrap` - vectorised percentile bootstrap intervals of the headline
  metrics; :mod:`bensemble.app.verdict` - the rules behind the report's three questions;
* :mod:`bensemble.app.evaluate_html` / :mod:`bensemble.app.demo_html` - the ``report.html`` pages.

The report kit both applications and the paper's reproductions (:mod:`bensemble.experiments`)
write with lives beneath them in :mod:`bensemble.reporting`; the nine methods' member builder in
:mod:`bensemble.methods.zoo`.
"""

__all__: list[str] = []
