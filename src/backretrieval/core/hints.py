"""What an error tells the user to do: the pip command for a missing package (naming the extra of
backretrieval that brings it) and "did you mean" for a misspelled name.

The extras come from the installed package's own metadata (the ``[project.optional-dependencies]``
of pyproject.toml), so a hint never names an extra that does not bring the package.
"""
from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from importlib import metadata

_EXTRA_RE = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")
_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _normal(dist: str) -> str:
    """A distribution name in its PEP 503 normal form (``Foo_Bar`` -> ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


@functools.lru_cache(maxsize=1)
def extras() -> dict[str, frozenset[str]]:
    """Each extra of the installed ``backretrieval`` -> the distributions it brings (normalised
    names); empty when the package's metadata cannot be read."""
    try:
        requires = metadata.requires("backretrieval") or []
    except metadata.PackageNotFoundError:
        return {}
    out: dict[str, set[str]] = {}
    for req in requires:
        name, extra = _NAME_RE.match(req), _EXTRA_RE.search(req)
        if name and extra:
            out.setdefault(extra.group(1), set()).add(_normal(name.group(1)))
    return {k: frozenset(v) for k, v in out.items()}


def extra_for(dists: Iterable[str]) -> str | None:
    """The extra of backretrieval that brings every one of ``dists`` (None: no extra does, or
    ``dists`` names none).

    Args:
        dists: distribution names (options such as ``--no-deps`` are skipped).

    Returns:
        The extra's name (the first in metadata order when several bring them all), or None.
    """
    wanted = {_normal(d) for d in dists if d and not d.startswith("-")}
    if not wanted:
        return None
    return next((extra for extra, brings in extras().items() if wanted <= brings), None)


def install_hint(requires: str) -> str:
    """The pip command that installs ``requires`` (distributions separated by spaces, as
    ``EncoderInfo.requires`` holds them): ``pip install 'backretrieval[models]' (or: pip install
    torch ...)`` when an extra brings them all, else ``pip install torch ...``."""
    extra = extra_for(requires.split())
    plain = f"pip install {requires}"
    return f"pip install 'backretrieval[{extra}]' (or: {plain})" if extra else plain


def did_you_mean(name: str, known: Iterable[str], n: int = 3) -> str:
    """``" (did you mean 'e5-small'?)"`` for the known names closest to ``name`` (difflib's ratio of at least 0.6,
    case ignored; the best first, ties in alphabetical order), or ``""`` when none is close.

    Args:
        name: the name given.
        known: the names that exist.
        n: at most this many suggestions.

    Returns:
        The clause to append to an "unknown name" message, or an empty string.
    """
    if not isinstance(name, str) or not name:
        return ""
    names = list(dict.fromkeys(known))
    by_lower = {k.lower(): k for k in names}
    scores = ((difflib.SequenceMatcher(None, name.lower(), k).ratio(), k) for k in by_lower)
    close = [k for score, k in sorted((-score, k) for score, k in scores if score >= 0.6)][:n]  # best first, ties A-Z
    if not close:
        return ""
    shown = " or ".join(repr(by_lower[c]) for c in close)
    return f" (did you mean {shown}?)"
