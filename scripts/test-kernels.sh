#!/usr/bin/env bash
# Run the numeric tests again under other CPU kernels than this machine picks by itself, so a test
# or a number that depends on a BLAS kernel's last bits fails here rather than on a user's CPU:
#   OPENBLAS_CORETYPE   an OpenBLAS kernel other than the default one that this CPU can run
#                       (Haswell, or SkylakeX where Haswell is the default; Prescott without AVX2)
#   NUMBA_CPU_NAME=generic        numba's kernels compiled for a generic x86-64, no AVX
#   ATEN_CPU_CAPABILITY=default   torch's kernels without AVX2/AVX-512
# Arguments replace the default test files (metrics, determinism, Cr5, Triplet, M3L). After
# scripts/test.sh (which sets up the venv); .ci/run calls it. Workers as in scripts/test.sh
# (BACKRETRIEVAL_TEST_WORKERS, default scripts/workers.sh; 0: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${BACKRETRIEVAL_VENV:-.venv}/bin/python"
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  default=$("$PY" -c 'import numpy, threadpoolctl; print(next((i.get("architecture") or "" for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"), ""))')
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  if [[ " $flags " == *" avx2 "* && "$default" != Haswell ]]; then OPENBLAS_CORETYPE=Haswell
  elif [[ " $flags " == *" avx512f "* ]]; then OPENBLAS_CORETYPE=SkylakeX
  else OPENBLAS_CORETYPE=Prescott
  fi
fi
export OPENBLAS_CORETYPE NUMBA_CPU_NAME=${NUMBA_CPU_NAME:-generic} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-default}
echo "kernels: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE NUMBA_CPU_NAME=$NUMBA_CPU_NAME ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ $# -eq 0 ]; then
  set -- tests/metrics/test_metrics.py tests/e2e/test_determinism.py tests/core/test_canonical.py tests/train/test_cr5.py tests/train/test_triplet.py tests/train/test_m3l.py
fi
WORKERS=${BACKRETRIEVAL_TEST_WORKERS:-$(bash scripts/workers.sh)}
XDIST=()
if [ "$WORKERS" != 0 ]; then
  XDIST=(-n "$WORKERS" --dist loadfile)
fi
exec "$PY" -m pytest -q -p no:cacheprovider --durations=10 "${XDIST[@]}" "$@"
