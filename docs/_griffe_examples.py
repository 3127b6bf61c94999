"""Griffe extension for the docs build: render bensemble's docstrings well in Markdown.

bensemble's Google-style docstrings carry a few reStructuredText habits that Markdown would
mangle; this rewrites them at load time (the source files are untouched):

* an ``Example:`` heading (singular) becomes ``Examples:``, so the doctests render as code
  rather than as Markdown (where ``x["a"][0]`` would read as a link);
* Sphinx roles such as ``:func:`~bensemble.metrics.aurc``` become inline code (```aurc```);
* a ``.. math::`` directive becomes a fenced ``text`` block holding the LaTeX source (the site is
  built offline, so no MathJax).
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from griffe import Extension, Object

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|obj|exc|ref|math):`~?([^`]+)`")
_MATH = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<first>.*)$")


def _role(match: re.Match) -> str:
    target = match.group(1)
    if "<" in target and target.endswith(">"):  # :func:`text <target>`
        target = target.split("<", 1)[0].strip()
    return f"`{target.rsplit('.', 1)[-1] if match.group(0).count('~') else target}`"


def _math_blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _MATH.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent = m.group("indent")
        body = [m.group("first")] if m.group("first").strip() else []
        i += 1
        block: list[str] = []
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            block.pop()
        body += textwrap.dedent("\n".join(block)).split("\n") if block else []
        out += [f"{indent}```text", *(f"{indent}{b.strip()}" for b in body), f"{indent}```", ""]
    return "\n".join(out)


class ExampleSections(Extension):
    """Rewrite reStructuredText habits of the docstrings into Markdown before parsing."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
        text = _ROLE.sub(_role, text)
        obj.docstring.value = _math_blocks(text)
