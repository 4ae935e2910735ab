"""Python warnings as a CLI user sees them: one short line each.

Python's default format is ``/path/file.py:143: UserWarning: text`` followed by the source line
that issued it (``  warnings.warn(`` or ``  return enc.encode(...)``) -- noise for someone running
a command. :func:`short_warnings` replaces only the formatting (``warnings.formatwarning``) for
the rest of the command; which warnings are shown (filters, ``-W``, ``PYTHONWARNINGS``) and how
they are recorded (``warnings.catch_warnings``, pytest) are untouched.
"""
from __future__ import annotations

import warnings
from pathlib import PurePath

import click

MAX_CHARS = 300


def _origin(filename: str) -> str:
    """The top-level package a file belongs to (``transformers``, ``backretrieval``), else its stem."""
    parts = PurePath(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = len(parts) - 1 - parts[::-1].index(marker)
            if i + 1 < len(parts):
                return PurePath(parts[i + 1]).stem.split("-")[0]
    if "backretrieval" in parts:
        return "backretrieval"
    return PurePath(filename).stem


def format_warning(message, category, filename, lineno, line=None) -> str:
    """``warning: <text on one line> (<Category>, <package>)``: no path, no source line.

    Args:
        message: the warning (or its text).
        category: its class, e.g. ``UserWarning``.
        filename: the file that issued it (used only to name its package).
        lineno: ignored (part of the ``warnings.formatwarning`` signature).
        line: ignored: the source line is never echoed.

    Returns:
        One line ending in a newline; the text is whitespace-collapsed and cut at
        :data:`MAX_CHARS` characters.
    """
    text = " ".join(str(message).split())
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 1].rstrip() + "…"
    return f"warning: {text} ({category.__name__}, {_origin(filename)})\n"


def short_warnings() -> None:
    """Format warnings with :func:`format_warning` until the current click command ends (for
    good when called outside a click context). Calling it again changes nothing."""
    previous = warnings.formatwarning
    if previous is format_warning:
        return
    warnings.formatwarning = format_warning
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(lambda: setattr(warnings, "formatwarning", previous))


def warn(msg: str) -> None:
    """Print a note to stderr, in yellow."""
    click.secho(msg, fg="yellow", err=True)
