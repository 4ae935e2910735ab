"""``ddtp``: Debian package descriptions and their human translations (document level).

The Debian Description Translation Project publishes, per language, ``Translation-<lang>``
files (deb822 stanzas ``Package``, ``Description-md5``, ``Description-<lang>``; the first line
of the description is the synopsis, the indented lines the long description, a line ``" ."``
a paragraph break). ``Description-md5`` is the md5 of the original English description, so it
is the concept: the same md5 in ``en`` and ``de`` is an English document and its translation.

Where the files come from, in order: the option ``source_dir`` (a folder of
``Translation-<lang>.xz``; ``.gz``, ``.bz2`` or uncompressed also work), the environment
variable ``BACKRETRIEVAL_DDTP_DIR``, the user cache ``cache_dir("ddtp")``, else they are fetched
into the cache with apt (``apt-get -o Dir::State::Lists=<private dir> -o
Acquire::Languages=<langs> update``, which reads the machine's configured Debian/Ubuntu mirrors).

Items: one per distinct md5 (the first stanza wins), id = concept = md5, text = synopsis + "\\n"
+ long description (paragraph marks become blank lines, the leading space of each line is
removed), ``extra = {"title": synopsis, "body": long description}``, ``package`` (the first
package with that description) also in extra. No images. Options ``min_chars`` (drop documents
whose text is shorter) and ``max_docs`` (keep the first N documents that pass, in file order).

A full parse is cached per file in ``cache_dir("ddtp-parsed")`` as parquet, keyed by the file's
path, size and modification time, and written atomically.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..core import DataError, atomic_write, cache_dir, content_hash
from ..core.text import is_blank
from .corpus import Corpus, Dataset, require_languages
from .registry import DatasetExample, DatasetInfo, register

NAME = "ddtp"
ENV_DIR = "BACKRETRIEVAL_DDTP_DIR"
LANGUAGES = ("en", "de", "fr", "it", "ja", "ru", "es", "pl", "pt", "zh_CN")
_SUFFIXES = (".xz", ".gz", ".bz2", "")
_FILE_RE = re.compile(r"^Translation-([A-Za-z]{2,3}(?:_[A-Za-z]{2})?)(\.xz|\.gz|\.bz2)?$")
_PARSE_VERSION = "1"
_HOWTO = (
    "give the Debian DDTP files Translation-<lang>.xz with source_dir=<folder> or "
    f"${ENV_DIR}, or put them in {{cache}}; on a Debian machine they come from "
    "`apt-get -o Dir::State::Lists=DIR -o Acquire::Languages=de,fr,... update` "
    "(files DIR/*_i18n_Translation-<lang>), or download "
    "https://deb.debian.org/debian/dists/bookworm/main/i18n/Translation-<lang>.bz2"
)


# ----------------------------------------------------------------------------- files


def _open_text(path: Path) -> io.TextIOBase:
    suffix = path.suffix.lower()
    opener = {".xz": lzma.open, ".lzma": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}.get(suffix, open)
    return opener(path, "rt", encoding="utf-8", errors="replace")


def files_in(folder: str | os.PathLike) -> dict[str, Path]:
    """Language -> Translation file in ``folder`` (``.xz`` preferred over other compressions)."""
    folder = Path(folder)
    out: dict[str, tuple[int, Path]] = {}
    if not folder.is_dir():
        return {}
    for p in folder.iterdir():
        m = _FILE_RE.match(p.name)
        if m and p.is_file():
            rank = _SUFFIXES.index(m.group(2) or "")
            if m.group(1) not in out or rank < out[m.group(1)][0]:
                out[m.group(1)] = (rank, p)
    return {lang: p for lang, (_, p) in out.items()}


def _apt_name_matches(name: str, lang: str) -> bool:
    low = name.lower().replace("%5f", "_")
    for suffix in (".xz", ".gz", ".bz2", ".lz4", ".zst", ""):
        if low.endswith(f"_i18n_translation-{lang.lower()}{suffix}"):
            return True
    return False


def _apt_suite_order(path: Path) -> tuple[int, str]:
    """The release's own suite (``..._dists_bookworm_main_...``) before its ``-updates``,
    ``-security``, ``-backports`` suites: the first stanza of an md5 wins and ``max_docs`` keeps
    file order, so a corpus starts with the release's descriptions, as a file of that suite does."""
    m = re.search(r"_dists_([^_]+)_", path.name)
    return (1 if m is None or "-" in m.group(1) else 0, path.name)


def fetch_with_apt(langs: Sequence[str], dest: str | os.PathLike) -> dict[str, Path]:
    """Fetch Translation files with ``apt-get update`` into a private lists folder, then store
    them in ``dest`` as ``Translation-<lang>.xz``. Returns the languages obtained."""
    dest = Path(dest)
    apt = shutil.which("apt-get")
    if apt is None:
        raise DataError(f"{NAME}: no Translation files for {', '.join(langs)} and no apt-get; " + _HOWTO.format(cache=dest))
    got: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="ddtp-apt-") as tmp:
        lists, cache = Path(tmp) / "lists", Path(tmp) / "cache"
        (lists / "partial").mkdir(parents=True)
        (cache / "archives" / "partial").mkdir(parents=True)
        cmd = [
            apt,
            "-o", f"Dir::State::Lists={lists}",
            "-o", f"Dir::Cache={cache}",
            "-o", f"Acquire::Languages={','.join(langs)}",
            "-o", "Acquire::GzipIndexes=false",
            "-o", "Debug::NoLocking=1",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd += ["-o", "APT::Sandbox::User=root"]  # _apt cannot write into our private folder
        cmd.append("update")
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DataError(f"{NAME}: `apt-get update` failed: {e}; " + _HOWTO.format(cache=dest)) from None
        for lang in langs:
            found = sorted(
                (p for p in lists.iterdir()
                 if p.is_file() and _apt_name_matches(p.name, lang)
                 and p.suffix not in (".lz4", ".zst")),  # not readable with the standard library
                key=_apt_suite_order,
            )
            if not found:
                continue
            target = dest / f"Translation-{lang}.xz"
            with atomic_write(target, "wb") as raw, lzma.open(raw, "wt", encoding="utf-8") as out:
                for p in found:
                    with _open_text(p) as fh:
                        for line in fh:
                            out.write(line)
                    out.write("\n")
            got[lang] = target
        if not got:
            tail = (proc.stderr or proc.stdout or "").strip()[-1500:]
            raise DataError(
                f"{NAME}: `apt-get update` (exit code {proc.returncode}) gave no Translation file for "
                f"{', '.join(langs)}: {tail}; " + _HOWTO.format(cache=dest)
            )
    return got


def find_files(
    langs: Sequence[str] | None, source_dir: str | os.PathLike | None = None, fetch: bool = True
) -> dict[str, Path]:
    """Language -> Translation file, from source_dir, $BACKRETRIEVAL_DDTP_DIR, the cache or apt."""
    for what, folder in (("source_dir", source_dir), (f"${ENV_DIR}", os.environ.get(ENV_DIR) or None)):
        if folder is None:
            continue
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise DataError(f"{NAME}: {what} is not a folder: {folder}")
        files = files_in(folder)
        if not files:
            raise DataError(f"{NAME}: {what} {folder} holds no Translation-<lang>.xz file")
        wanted = require_languages(files, langs, NAME)
        return {lang: files[lang] for lang in wanted}
    cache = cache_dir(NAME)
    files = files_in(cache)
    wanted = list(LANGUAGES) if langs is None else list(dict.fromkeys(langs))
    missing = [lang for lang in wanted if lang not in files]
    if missing and fetch:
        files.update(fetch_with_apt(missing, cache))
    if langs is None:
        wanted = [lang for lang in wanted if lang in files]
        if not wanted:
            raise DataError(f"{NAME}: no Translation files; " + _HOWTO.format(cache=cache))
    wanted = require_languages(files, wanted, NAME)
    return {lang: files[lang] for lang in wanted}


# ----------------------------------------------------------------------------- parsing


def iter_docs(path: str | os.PathLike) -> Iterator[tuple[str, str, str, str]]:
    """Stream ``(md5, package, synopsis, long description)`` of every stanza, in file order."""
    path = Path(path)
    stanza: dict[str, str] = {}
    desc: list[str] | None = None
    in_desc = False

    def done() -> tuple[str, str, str, str] | None:
        md5 = stanza.get("Description-md5", "").strip()
        if not md5 or desc is None:
            return None
        synopsis = desc[0].strip()
        body_lines = ["" if ln.strip() == "." else (ln[1:] if ln[:1] in " \t" else ln).rstrip() for ln in desc[1:]]
        while body_lines and not body_lines[-1]:
            body_lines.pop()
        while body_lines and not body_lines[0]:
            body_lines.pop(0)
        return md5, stanza.get("Package", "").strip(), synopsis, "\n".join(body_lines)

    with _open_text(path) as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if not line.strip():  # end of a stanza
                doc = done()
                if doc is not None:
                    yield doc
                stanza, desc, in_desc = {}, None, False
            elif line[0] in " \t":
                if in_desc and desc is not None:
                    desc.append(line)
            else:
                key, _, value = line.partition(":")
                key = key.strip()
                in_desc = key.startswith("Description-") and key != "Description-md5"
                if in_desc:
                    desc = [value]
                else:
                    stanza[key] = value
        doc = done()
        if doc is not None:
            yield doc


def _text(synopsis: str, body: str) -> str:
    return f"{synopsis}\n{body}" if body else synopsis


def _parsed_cache_path(path: Path) -> Path:
    st = path.stat()
    key = content_hash(f"{_PARSE_VERSION};{path.resolve()};{st.st_size};{st.st_mtime_ns}")
    return cache_dir("ddtp-parsed") / f"{path.name.split('.')[0]}-{key}.parquet"


def parse(
    path: str | os.PathLike, min_chars: int = 0, max_docs: int | None = None, use_cache: bool = True
) -> dict[str, list[str]]:
    """Columns ``md5, package, title, body`` of the distinct descriptions of one file (the first
    stanza of each md5), those with text shorter than ``min_chars`` and after ``max_docs`` left
    out. A full parse is cached (parquet); a parse cut short by ``max_docs`` is not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    cols = ("md5", "package", "title", "body")
    cached = _parsed_cache_path(path) if use_cache else None
    table: dict[str, list[str]] | None = None
    if cached is not None and cached.is_file():
        try:
            t = pq.read_table(cached)
            table = {c: t.column(c).to_pylist() for c in cols}
        except (OSError, ValueError, KeyError):  # a damaged cache file is rebuilt
            table = None
    if table is None:
        out: dict[str, list[str]] = {c: [] for c in cols}
        seen: set[str] = set()
        n_kept = 0
        complete = True
        for md5, pkg, title, body in iter_docs(path):
            if md5 in seen:
                continue
            seen.add(md5)
            if is_blank(_text(title, body)):
                continue
            out["md5"].append(md5)
            out["package"].append(pkg)
            out["title"].append(title)
            out["body"].append(body)
            if max_docs is not None and len(_text(title, body)) >= min_chars:
                n_kept += 1
                if n_kept >= max_docs:
                    complete = False
                    break
        table = out
        if complete and cached is not None:
            t = pa.table({c: pa.array(table[c], type=pa.string()) for c in cols})
            with atomic_write(cached, "wb") as fh:
                pq.write_table(t, fh)
    keep = [
        i for i, (a, b) in enumerate(zip(table["title"], table["body"]))
        if not (is_blank(a) and is_blank(b))  # a description of invisible characters only is empty
    ]
    if min_chars:
        keep = [i for i in keep if len(_text(table["title"][i], table["body"][i])) >= min_chars]
    if max_docs is not None:
        keep = keep[:max_docs]
    return {c: [table[c][i] for i in keep] for c in cols}


def load(
    langs: Sequence[str] | None = None,
    *,
    source_dir: str | os.PathLike | None = None,
    max_docs: int | None = None,
    min_chars: int = 0,
) -> Dataset:
    """Load DDTP corpora (see the module docstring)."""
    if max_docs is not None and (not isinstance(max_docs, int) or max_docs < 1):
        raise DataError(f"{NAME}: max_docs must be a positive integer, got {max_docs!r}")
    if not isinstance(min_chars, int) or min_chars < 0:
        raise DataError(f"{NAME}: min_chars must be a non-negative integer, got {min_chars!r}")
    files = find_files(langs, source_dir)
    corpora = {}
    for lang, path in files.items():
        try:
            cols = parse(path, min_chars=min_chars, max_docs=max_docs)
        except (OSError, EOFError, lzma.LZMAError) as e:
            raise DataError(f"{NAME}: cannot read {path}: {e}") from None
        corpora[lang] = Corpus(
            dataset=NAME,
            lang=lang,
            ids=cols["md5"],
            texts=[_text(t, b) for t, b in zip(cols["title"], cols["body"])],
            concepts=list(cols["md5"]),
            extra={"title": cols["title"], "body": cols["body"], "package": cols["package"]},
        )
    return Dataset(name=NAME, corpora=corpora, description=INFO.description)


INFO = register(
    DatasetInfo(
        name=NAME,
        loader=load,
        description=(
            "Debian package descriptions (synopsis + long description) and their human translations "
            "from the Description Translation Project; concept = md5 of the English original"
        ),
        has_images=False,
        has_concepts=True,
        source="Debian DDTP: apt i18n index Translation-<lang> (bookworm main for the shared copy)",
        license="Debian package descriptions and DDTP translations (free licences of the packages; see Debian)",
        example=lambda folder: DatasetExample(NAME, ("en", "de"), {"max_docs": 50}),
    )
)
