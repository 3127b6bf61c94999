"""Names shown to a person: control and bidirectional-override characters made visible.

A file name may hold any character but ``/`` and NUL. Printed as it is, ``"\\x1b[2J"`` clears the
terminal, ``"\\r"`` or ``"\\n"`` forges a line of the program's own output, and a right-to-left
override (U+202E) reorders what follows, so ``"report\\u202eLMTH.exe"`` reads
``reportexe.HTML``. :func:`printable_name` writes every such character as an escape the reader
sees (``\\x1b``, ``\\n``, ``\\u202e``) and leaves every other character alone: accented letters,
CJK, Arabic and Hebrew names read as they are written.

Escaped are the Unicode categories Cc (C0 and C1 controls, DEL), Cf (format characters: the
bidirectional embeddings, overrides, isolates and marks, zero-width spaces and joiners, the
byte-order mark, soft hyphen), Zl and Zp (line and paragraph separators), Co and Cn (private-use
and unassigned code points, which a terminal may draw as anything) and Cs: the lone surrogates
by which Python carries the bytes of a name that is not valid UTF-8 (``os.fsdecode``'s
``surrogateescape``), written back as the byte they stand for (``\\xff``). A backslash is left as
it is, so escaping twice changes nothing.

Foundation module: it imports nothing from bensemble.
"""

from __future__ import annotations

import os
import unicodedata

__all__ = ["is_valid_utf8", "printable_name", "printable_text"]

#: Unicode categories written as escapes.
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a non-UTF-8 name (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _visible(text: str) -> str:
    if text.isascii() and text.isprintable():  # the common case, without a per-char loop
        return text
    return "".join(_escape(c) if unicodedata.category(c) in ESCAPED_CATEGORIES else c for c in text)


def printable_name(path: str | bytes | os.PathLike) -> str:
    """``path`` as text safe to show in a terminal or a page (see the module docstring).

    Args:
        path: A file name or path (``str``, ``bytes`` or :class:`os.PathLike`).

    Returns:
        The name with every control, format and bidirectional character written as a visible
        escape; bytes that are not UTF-8 appear as ``\\xNN``.

    Example:
        >>> printable_name("p\\u202eyp.npy")
        'p\\\\u202eyp.npy'
        >>> printable_name("r\\u00e9sultats/\\x1b[31mred")
        'résultats/\\\\x1b[31mred'
        >>> printable_name(b"caf\\xe9.npy")
        'caf\\\\xe9.npy'
    """
    name = os.fspath(path)
    if isinstance(name, bytes):
        name = name.decode("utf-8", "surrogateescape")
    return _visible(name)


def printable_text(text: object) -> str:
    """One line of a message: whitespace runs (newlines included) become one space, then every
    remaining control or bidirectional character is escaped as by :func:`printable_name`.

    For messages whose names were already escaped this changes only the whitespace; for a name
    that was not, it still cannot move the cursor, recolour or reorder the line.

    Example:
        >>> printable_text("bad file\\n  x\\u202e.npy")
        'bad file x\\\\u202e.npy'
    """
    return _visible(" ".join(str(text).split()))


def is_valid_utf8(name: str | os.PathLike) -> bool:
    """Whether ``name`` encodes to UTF-8 as it is (``False`` for the lone surrogates that stand
    for the bytes of a name that is not UTF-8)."""
    try:
        os.fspath(name).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
