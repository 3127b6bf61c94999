"""The shared report kit beneath the applications (:mod:`bensemble.app`) and the paper's
reproductions (:mod:`bensemble.experiments`): report folders written atomically, tables as
Markdown / CSV / JSON, figures, and the self-contained ``report.html`` page.

* :mod:`bensemble.reporting.report` - the report writer
  (:class:`~bensemble.reporting.report.Report`);
* :mod:`bensemble.reporting.html` - the HTML page (:func:`~bensemble.reporting.html.render_html`);
* :mod:`bensemble.reporting._folder` - output folders: refusal to write over an input, atomic
  replacement;
* :mod:`bensemble.reporting._table_format` - number formatting shared by every table.

Nothing here computes a metric; both rows above it import it, it imports neither.
"""

from bensemble.reporting import html, report
from bensemble.reporting.html import (  # noqa: F401 - exported by html.__all__
    STATUS_LABELS,
    STATUSES,
    HtmlFigure,
    HtmlReport,
    HtmlSection,
    HtmlTable,
    Verdict,
    render_html,
)
from bensemble.reporting.report import (  # noqa: F401 - exported by report.__all__
    Report,
    atomic_write,
    atomic_write_text,
    environment,
    format_table,
    format_value,
    markdown_table,
    table_columns,
    to_json,
)

# each module lists its public names once: the HTML page, then the report writer and table forms
__all__ = [*html.__all__, *report.__all__]
