#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. Needs ../shared/data beside the project.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest -q "$@"
