"""What counts as an empty text.

A text is blank when it has no character that shows: only white space, control and format
characters (zero-width space, zero-width (non-)joiner, word joiner, byte-order mark, bidi marks,
soft hyphen, ...) and the other default-ignorable code points of Unicode (variation selectors,
the combining grapheme joiner, Hangul fillers, tag characters). ``"\\u200b\\u200d"`` is as empty
as ``"   "``: an encoder would embed it as nothing, and such rows are refused by the loaders.
"""
from __future__ import annotations

import codecs
import os
import unicodedata

from .errors import DataError

# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties) outside the categories Cc, Cf, Z*
_IGNORABLE_RANGES = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF),
)
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def is_invisible(ch: str) -> bool:
    """True for a white-space, control, format or other default-ignorable character."""
    if ch.isspace() or unicodedata.category(ch) in _INVISIBLE_CATEGORIES:
        return True
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _IGNORABLE_RANGES)


def is_blank(text: str) -> bool:
    """True when ``text`` is empty or made only of invisible characters (see :func:`is_invisible`).

    Args:
        text: the text to judge.

    Returns:
        Whether no character of ``text`` would show.
    """
    return all(is_invisible(ch) for ch in text)


def decode_utf8(raw: bytes, path: str | os.PathLike) -> str:
    """``raw`` (the bytes of file ``path``) as UTF-8 text; a leading byte-order mark is dropped.

    Args:
        raw: the file's bytes.
        path: the file, for the error message.

    Returns:
        The decoded text.

    Raises:
        DataError: the bytes are not UTF-8; the message names the file, the line and the column.
    """
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(
            f"{path}: line {line}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {col}); save the file as UTF-8"
        ) from None


def one_line(message: str) -> str:
    """``message`` with every character that does not print (a newline or tab in a path, other
    control and format characters) escaped as Python's ``repr`` writes it (``\\n``, ``\\x1b``,
    ``\\u200b``), so an error or a heading stays one line."""
    if message.isprintable():
        return message
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)
