"""The tests' own data supply (tests/conftest.py): when the shared data folder is absent, the real
data are downloaded once into a persistent cache, verified on every later use, and fetched again
when a file no longer matches. Stand-in `npm` and `apt-get` scripts record every call."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

import conftest
from backretrieval.data import ddtp


def _script(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_shared_data_location_is_overridable(monkeypatch, tmp_path):
    monkeypatch.setenv(conftest.SHARED_ENV, str(tmp_path / "nowhere"))
    assert conftest.shared_data_dir() == tmp_path / "nowhere"
    monkeypatch.delenv(conftest.SHARED_ENV)
    assert conftest.shared_data_dir() == conftest.REPO.parent / "shared" / "data"
    monkeypatch.setenv(conftest.DOWNLOADS_ENV, str(tmp_path / "dl"))
    assert conftest.downloads_dir() == tmp_path / "dl"


def test_npm_downloads_are_verified_and_reused(tmp_path, monkeypatch, shared_data, emoji_tarball):
    npm_dir = shared_data / "npm"
    # the stand-in registry serves the emoji tarball at hand (the trimmed shared copy or the full
    # one) under the full package's name, so its expected sha512 is that file's
    sha = {**conftest.NPM_SHA512,
           "emoji-datasource-google-16.0.0.tgz": base64.b64encode(hashlib.sha512(emoji_tarball.read_bytes()).digest()).decode()}
    monkeypatch.setattr(conftest, "NPM_SHA512", sha)
    log = tmp_path / "npm.log"
    _script(tmp_path / "bin", "npm", f"""
echo "$2" >> {log}
spec="$2"; dest="$4"
case "$spec" in
  emoji-datasource-google@16.0.0) cp "{emoji_tarball}" "$dest/emoji-datasource-google-16.0.0.tgz";;
  *) name="${{spec%@*}}"; ver="${{spec##*@}}"; cp "{npm_dir}/$name-$ver.tgz" "$dest/$name-$ver.tgz";;
esac
""")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "downloads"
    conftest._download_npm_into(root)
    assert len(_calls(log)) == 3 and sorted(p.name for p in (root / "npm").glob("*.tgz")) == sorted(sha)
    conftest._download_npm_into(root)  # verified, reused: npm is not run again
    assert len(_calls(log)) == 3
    _flip_byte(root / "npm" / "cldr-annotations-full-48.2.0.tgz")
    conftest._download_npm_into(root)  # damaged: fetched again, only that one
    assert _calls(log)[3:] == ["cldr-annotations-full@48.2.0"]
    assert (root / "npm" / "cldr-annotations-full-48.2.0.tgz").read_bytes() == (npm_dir / "cldr-annotations-full-48.2.0.tgz").read_bytes()
    # a registry that serves other bytes than the published ones fails loudly
    monkeypatch.setattr(conftest, "NPM_SHA512", {**sha, "cldr-annotations-full-48.2.0.tgz": "bm90IHRoaXM="})
    with pytest.raises(pytest.fail.Exception, match="cldr-annotations-full-48.2.0.tgz.*sha512"):
        conftest._download_npm_into(root)


def test_ddtp_downloads_are_verified_and_reused(tmp_path, monkeypatch):
    log = tmp_path / "apt.log"
    lines = "\n".join(
        f"printf 'Package: p{i}\\nDescription-md5: {i:04x}\\nDescription-{lang}: text {lang}\\n' "
        f"> \"$d/deb.debian.org_debian_dists_bookworm_main_i18n_Translation-{lang.replace('_', '%5f')}\""
        for i, lang in enumerate(ddtp.LANGUAGES)
    )
    _script(tmp_path / "bin", "apt-get", f"""
echo update >> {log}
for a in "$@"; do case "$a" in Dir::State::Lists=*) d="${{a#Dir::State::Lists=}}";; esac; done
{lines}
""")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "downloads"
    conftest._download_ddtp_into(root)
    folder = root / "ddtp"
    manifest = json.loads((folder / conftest.DDTP_MANIFEST).read_text())
    assert sorted(manifest["files"]) == sorted(f"Translation-{lang}.xz" for lang in ddtp.LANGUAGES)
    assert len(_calls(log)) == 1
    conftest._download_ddtp_into(root)  # verified, reused
    assert len(_calls(log)) == 1
    _flip_byte(folder / "Translation-pt.xz")
    conftest._download_ddtp_into(root)  # damaged: fetched again
    assert len(_calls(log)) == 2 and ddtp.load(["pt"], source_dir=folder)["pt"].texts == ["text pt"]
    manifest = json.loads((folder / conftest.DDTP_MANIFEST).read_text())
    manifest["loader"] = "an older loader"
    (folder / conftest.DDTP_MANIFEST).write_text(json.dumps(manifest))
    conftest._download_ddtp_into(root)  # made by another version of the loader: fetched again
    assert len(_calls(log)) == 3
