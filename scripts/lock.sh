#!/usr/bin/env bash
# Refresh constraints.txt, the exact versions scripts/setup.sh installs:
#   1. a fresh venv (in a temporary folder) gets the newest versions pyproject.toml allows, for
#      every extra the scripts install (scripts/setup.sh test with BACKRETRIEVAL_UNLOCKED=1;
#      torch stays at the CPU build torch==2.13.0);
#   2. the whole test suite runs in it (scripts/test.sh; arguments go to pytest);
#   3. only if it passes, every distribution installed there is written to constraints.txt,
#      pinned exactly (pip freeze --all; the project itself left out; torch's +cpu label dropped).
#      If it fails, constraints.txt stays as it was and the versions that differ are printed.
# Then commit constraints.txt. Takes the install (1-2 minutes) plus the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
TMP=$(mktemp -d "${TMPDIR:-/tmp}/backretrieval-lock.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export BACKRETRIEVAL_VENV="$TMP/venv" BACKRETRIEVAL_UNLOCKED=1
bash scripts/setup.sh test
PY="$BACKRETRIEVAL_VENV/bin/python"
{
  echo "# Exact versions of everything scripts/setup.sh installs (all extras; the project itself left out),"
  echo "# frozen from a fresh venv in which the whole test suite passed. Refresh: bash scripts/lock.sh"
  echo "# $(date -u +%Y-%m-%d), $("$PY" -c 'import platform; print("Python", platform.python_version(), platform.system(), platform.machine())');" \
       "torch==2.13.0 is its CPU build (+cpu label dropped)"
  "$PY" -m pip freeze --all --exclude-editable | grep -v -E '^(#|-e )' | sed -E 's/^(torch==[^+]+)\+.*$/\1/' | LC_ALL=C sort -f
} > "$TMP/constraints.txt"
grep -q '^torch==2\.13\.0$' "$TMP/constraints.txt" || { echo "error: torch is not 2.13.0 in the new venv" >&2; exit 1; }
if ! bash scripts/test.sh "$@"; then
  echo "error: the suite failed with these versions; constraints.txt is unchanged. Versions that differ:" >&2
  diff <(grep -v '^#' constraints.txt 2>/dev/null) <(grep -v '^#' "$TMP/constraints.txt") | grep '^[<>]' >&2 || echo "  (none)" >&2
  exit 1
fi
mv "$TMP/constraints.txt" constraints.txt
echo "wrote constraints.txt ($(grep -c '^[^#]' constraints.txt) pins)"
