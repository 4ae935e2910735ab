"""The contract every registered model keeps, as checks a plugin author can run.

:func:`check_text_encoder` and :func:`check_image_encoder` build a tiny real instance of a
registered model from its :class:`~backretrieval.encoders.base.EncoderInfo`'s ``example`` hook (a
model without one fails, with a message saying to add one) and check it, as scikit-learn's
``check_estimator`` checks an estimator:

* **shape and dtype** -- ``n`` inputs give a C-contiguous float32 ``(n, dim)`` array, ``dim`` the
  encoder's own;
* **unit norm where promised** -- an encoder with ``unit_norm = True`` gives rows of L2 norm 1;
* **the same vectors twice** -- encoding the same inputs again gives bit-identical vectors;
* **the version is the cache key** -- a second instance built the same way has the same
  ``version``; the example's ``other`` instance (another file, seed or option) gives different
  vectors and a different ``version``;
* **a bad option is a clear error** -- an unknown option, and ``batch_size=0``, raise
  :class:`~backretrieval.core.EncoderError` naming the option;
* **empty input** -- no texts (images) give a float32 ``(0, dim)`` array;
* **the progress hook** -- without ``progress`` nothing is written to stderr; with it (the
  embedding cache's bar for a cacheable model, the model's own ``progress=True`` bar otherwise)
  a bar reaches ``n/n``.

Every failure raises :class:`ContractError` (an AssertionError) naming the model and the check.
``python -c "from backretrieval.encoders.checks import check_text_encoder; check_text_encoder('my-model')"``
checks a newly registered model.
"""
from __future__ import annotations

import contextlib
import io
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import EncoderError
from ..data.checks import ContractError, example_from, registered
from .base import EXAMPLE_TEXTS, EncoderInfo, Example
from .registry import build_encoder, list_image_encoders, list_text_encoders

BAD_OPTION = "contract_no_such_option"  # an option no model takes
NORM_TOL = 1e-5  # |1 - ||row||| allowed of a unit-norm float32 row
EXAMPLE_IMAGES = 5  # images the checks write for an image model whose example names none


def _fail(kind: str, name: str, check: str, detail: str) -> ContractError:
    return ContractError(f"{kind} model {name!r} fails '{check}': {detail}")


def example_of(info: EncoderInfo, folder: str | Path) -> Example:
    """The example instance of a registered model, its files written in ``folder``.

    Raises:
        ContractError: the model registers no example, or its hook does not return an Example.
    """
    return example_from(f"{info.kind} model", info, folder, Example,
                        f"give its declaration an example=hook (register_{info.kind}(..., example=...): folder -> Example) "
                        "that builds a tiny real instance in the folder, so the contract checks "
                        "(backretrieval.encoders.checks) can test it")


def _spec(info: EncoderInfo, arg: str | None) -> str:
    return f"{info.name}:{arg}" if arg else info.name


@contextlib.contextmanager
def _stderr() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        yield buf


def _bar_reached(err: str, n: int) -> bool:
    """Whether a tqdm bar in ``err`` reached ``n/n``."""
    return re.search(rf"(?<!\d){n}/{n}(?!\d)", err) is not None


def _check_array(x: Any, n: int, dim: Any, kind: str, name: str, check: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise _fail(kind, name, check, f"returned {type(x).__name__}, not a numpy array")
    if x.dtype != np.float32:
        raise _fail(kind, name, check, f"returned dtype {x.dtype}, not float32")
    if x.ndim != 2 or x.shape[0] != n:
        raise _fail(kind, name, check, f"returned shape {x.shape} for {n} inputs, not ({n}, dim)")
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or x.shape[1] != dim:
        raise _fail(kind, name, check, f"returned {x.shape[1]}-d vectors but its dim is {dim!r}")
    if n and not x.flags.c_contiguous:
        raise _fail(kind, name, check, "returned an array that is not C-contiguous")
    return x


def _check_unit_norm(enc: Any, x: np.ndarray, kind: str, name: str) -> None:
    if not getattr(enc, "unit_norm", False) or not len(x):
        return
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    worst = int(np.argmax(np.abs(norms - 1.0)))
    if abs(norms[worst] - 1.0) > NORM_TOL:
        raise _fail(kind, name, "unit norm", f"promises unit_norm but row {worst} has L2 norm {norms[worst]:.8f}")


def _check_bad_options(build: Any, options: Mapping[str, Any], kind: str, name: str) -> None:
    for bad in ({BAD_OPTION: 1}, {"batch_size": 0}):
        key = next(iter(bad))
        try:
            build({**options, **bad})
        except EncoderError as e:
            if key not in str(e):
                raise _fail(kind, name, "a bad option is a clear error", f"{key}={bad[key]!r} raised EncoderError not naming it: {e}") from None
        except Exception as e:  # noqa: BLE001 -- any other exception is the failure being reported
            raise _fail(kind, name, "a bad option is a clear error",
                        f"{key}={bad[key]!r} raised {type(e).__name__} ({e}), not EncoderError") from None
        else:
            raise _fail(kind, name, "a bad option is a clear error", f"{key}={bad[key]!r} was accepted")


# ----------------------------------------------------------------------------- text models
def _fitted(enc: Any, texts: Sequence[str], lang: str) -> Any:
    """``enc``, fitted on ``texts`` first when it has a ``fit`` (as the evaluation does)."""
    fit = getattr(enc, "fit", None)
    if callable(fit):
        fit({lang: list(texts)})
    return enc


def check_text_encoder(spec: str | EncoderInfo, folder: str | Path | None = None) -> None:
    """Check a registered text model against the contract (see the module docstring).

    Args:
        spec: the registered name (``"use-m"``, ``"precomputed"``) or its EncoderInfo.
        folder: where the example writes its files and the checks their cache (default: a
            temporary folder, removed after).

    Raises:
        ContractError: the first check the model fails, named with the model.
    """
    info = registered("text model", spec, EncoderInfo, list_text_encoders)
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="contract-") as tmp:
            return check_text_encoder(info, tmp)
    folder = Path(folder)
    ex = example_of(info, folder / "example")
    kind, name = "text", info.name
    texts = list(ex.texts if ex.texts is not None else EXAMPLE_TEXTS)
    ids = list(ex.ids) if ex.ids is not None else [f"x{i}" for i in range(len(texts))]
    lang, n = ex.lang, len(texts)
    spec_str = _spec(info, ex.arg)

    def build(options: Mapping[str, Any], arg: str | None = ex.arg) -> Any:
        return build_encoder(info, arg, **options)

    options = {k: v for k, v in ex.options.items() if k != "progress"}
    try:
        enc = _fitted(build(options), texts, lang)
    except Exception as e:
        raise _fail(kind, name, "builds from its example", f"{spec_str} with options {options}: {type(e).__name__}: {e}") from e
    # shape, dtype, unit norm; nothing on stderr without progress
    with _stderr() as err:
        x = enc.encode(texts, lang, ids=ids)
    _check_array(x, n, enc.dim, kind, name, "shape and dtype")
    if err.getvalue().strip():
        raise _fail(kind, name, "the progress hook", f"wrote to stderr without progress: {err.getvalue()[:200]!r}")
    _check_unit_norm(enc, x, kind, name)
    # the same vectors twice
    again = enc.encode(texts, lang, ids=ids)
    if not np.array_equal(x, again):
        raise _fail(kind, name, "the same vectors twice", f"a second encode of the same {n} texts differs "
                    f"(max |diff| {np.max(np.abs(x - again)):.3g})")
    # empty input
    empty = enc.encode([], lang, ids=[])
    _check_array(empty, 0, enc.dim, kind, name, "empty input")
    # the version is the cache key
    version = enc.version
    if not isinstance(version, str) or not version:
        raise _fail(kind, name, "the version is the cache key", f"version is {version!r}, not a non-empty string")
    same = _fitted(build(options), texts, lang)
    if same.version != version:
        raise _fail(kind, name, "the version is the cache key",
                    f"two instances built the same way have versions {version!r} and {same.version!r}")
    if ex.other is not None:
        o_arg, o_opts = ex.other
        other = _fitted(build(dict(o_opts), o_arg), texts, lang)
        y = other.encode(texts, lang, ids=ids)
        if y.shape == x.shape and np.array_equal(x, y):
            raise _fail(kind, name, "the version is the cache key",
                        f"the example's other instance ({_spec(info, o_arg)}, {dict(o_opts)}) gives the same vectors; "
                        "make it one whose vectors differ")
        if other.version == version:
            raise _fail(kind, name, "the version is the cache key",
                        f"{_spec(info, o_arg)} with {dict(o_opts)} gives other vectors under the same version {version!r}")
    # a bad option is a clear error
    _check_bad_options(build, options, kind, name)
    # the progress hook
    if ex.shows_progress:
        _check_text_progress(info, enc, build, options, texts, ids, lang, x, folder / "cache")


def _check_text_progress(info: EncoderInfo, enc: Any, build: Any, options: dict[str, Any], texts: list[str],
                         ids: list[str], lang: str, x: np.ndarray, cache_root: Path) -> None:
    from .cache import CachedTextEncoder

    kind, name, n = "text", info.name, len(texts)
    if getattr(enc, "cacheable", True):
        shown = CachedTextEncoder(enc, root=cache_root, progress=True)
        how = "through the embedding cache with progress=True"
    else:
        shown = _fitted(build({**options, "progress": True}), texts, lang)
        how = "built with progress=True"
    with _stderr() as err:
        y = shown.encode(texts, lang, ids=ids)
    if not _bar_reached(err.getvalue(), n):
        raise _fail(kind, name, "the progress hook", f"encoding {n} texts {how} drew no bar reaching {n}/{n} "
                    f"on stderr (got {err.getvalue()[-200:]!r})")
    if not np.array_equal(x, y):
        raise _fail(kind, name, "the progress hook", f"encoding {how} changed the vectors")


# ----------------------------------------------------------------------------- image models
def write_example_images(folder: str | Path, n: int = EXAMPLE_IMAGES) -> list[str]:
    """``n`` small distinct PNG images (RGBA, with transparency) in ``folder``; their paths.

    Each is a 48 x 48 canvas with a coloured disc and a stripe; image ``i`` differs from the
    others in colour and position, so every encoder gives distinct vectors.
    """
    from PIL import Image, ImageDraw

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        im = Image.new("RGBA", (48, 48), (0, 0, 0, 0))
        draw = ImageDraw.Draw(im)
        c = ((60 * i + 200) % 256, (110 * i + 40) % 256, (170 * i + 90) % 256, 255)
        draw.ellipse((4 + 2 * i, 6, 36 + 2 * i, 38), fill=c)
        draw.rectangle((0, 40 - 3 * i, 47, 44 - 3 * i), fill=(c[2], c[0], c[1], 255))
        path = folder / f"image{i}.png"
        im.save(path)
        paths.append(str(path))
    return paths


def check_image_encoder(spec: str | EncoderInfo, folder: str | Path | None = None) -> None:
    """Check a registered image model against the contract (see the module docstring).

    A model that reads the dataset's own feature file instead of image files
    (``is_precomputed``) must refuse ``encode_images`` with an EncoderError and pass the feature
    rows through; the other checks are those of text models, on images.

    Args:
        spec: the registered name (``"color-hist"``) or its EncoderInfo.
        folder: where the example and the checks write their files (default: a temporary folder).

    Raises:
        ContractError: the first check the model fails, named with the model.
    """
    info = registered("image model", spec, EncoderInfo, list_image_encoders)
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="contract-") as tmp:
            return check_image_encoder(info, tmp)
    folder = Path(folder)
    ex = example_of(info, folder / "example")
    kind, name = "image", info.name
    options = {k: v for k, v in ex.options.items() if k != "progress"}

    def build(options: Mapping[str, Any], arg: str | None = ex.arg) -> Any:
        return build_encoder(info, arg, **options)

    try:
        enc = build(options)
    except Exception as e:
        raise _fail(kind, name, "builds from its example", f"{_spec(info, ex.arg)} with options {options}: {type(e).__name__}: {e}") from e
    _check_bad_options(build, options, kind, name)
    if getattr(enc, "is_precomputed", False):
        _check_precomputed_images(enc, folder, name)
        return
    paths = list(ex.texts) if ex.texts is not None else write_example_images(folder / "images")
    n = len(paths)
    with _stderr() as err:
        x = enc.encode_images(paths)
    _check_array(x, n, enc.dim, kind, name, "shape and dtype")
    if err.getvalue().strip():
        raise _fail(kind, name, "the progress hook", f"wrote to stderr without progress: {err.getvalue()[:200]!r}")
    _check_unit_norm(enc, x, kind, name)
    again = enc.encode_images(paths)
    if not np.array_equal(x, again):
        raise _fail(kind, name, "the same vectors twice", f"a second encode of the same {n} images differs "
                    f"(max |diff| {np.max(np.abs(x - again)):.3g})")
    _check_array(enc.encode_images([]), 0, enc.dim, kind, name, "empty input")
    version = enc.version
    if not isinstance(version, str) or not version:
        raise _fail(kind, name, "the version is the cache key", f"version is {version!r}, not a non-empty string")
    if build(options).version != version:
        raise _fail(kind, name, "the version is the cache key", "two instances built the same way have different versions")
    if ex.other is not None:
        o_arg, o_opts = ex.other
        other = build(dict(o_opts), o_arg)
        y = other.encode_images(paths)
        if y.shape == x.shape and np.array_equal(x, y):
            raise _fail(kind, name, "the version is the cache key",
                        f"the example's other instance ({dict(o_opts)}) gives the same vectors; make it one whose vectors differ")
        if other.version == version:
            raise _fail(kind, name, "the version is the cache key", f"{dict(o_opts)} gives other vectors under the same version")
    if ex.shows_progress:
        from .cache import CachedImageEncoder

        with _stderr() as err:
            y = CachedImageEncoder(enc, root=folder / "cache", progress=True).encode_images(paths)
        if not _bar_reached(err.getvalue(), n):
            raise _fail(kind, name, "the progress hook", f"encoding {n} images through the embedding cache with "
                        f"progress=True drew no bar reaching {n}/{n} on stderr (got {err.getvalue()[-200:]!r})")
        if not np.array_equal(x, y):
            raise _fail(kind, name, "the progress hook", "encoding through the embedding cache changed the vectors")


def _check_precomputed_images(enc: Any, folder: Path, name: str) -> None:
    """The feature-file route: encode_images refuses clearly; feature rows pass through."""
    from .image.precomputed_image import load_feature_rows, weaken_features

    try:
        enc.encode_images(write_example_images(folder / "images", 1))
    except EncoderError:
        pass
    except Exception as e:  # noqa: BLE001
        raise _fail("image", name, "refuses image files", f"encode_images raised {type(e).__name__} ({e}), not EncoderError") from None
    else:
        raise _fail("image", name, "refuses image files", "is_precomputed but encode_images returned vectors")
    feats = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    path = folder / "features.npy"
    np.save(path, feats)
    rows = np.array([2, 0, 3])
    x = load_feature_rows(path, rows, name)
    y = weaken_features(enc, x, [bytes([int(r)]) for r in rows])
    _check_array(y, 3, 6, "image", name, "shape and dtype")
    if not np.array_equal(y, feats[rows]):
        raise _fail("image", name, "the same vectors twice", "does not pass the dataset's feature rows through unchanged")
