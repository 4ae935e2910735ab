#!/usr/bin/env bash
# How many pytest-xdist workers scripts/test.sh and scripts/test-kernels.sh start: one more than the
# CPUs (much of the suite waits on subprocesses, servers and Ray rather than computing), and no
# more than one per 2 GiB of available memory (a worker that has loaded the models holds about 1.5 GiB).
set -euo pipefail
cpus=$(nproc)
mem_gib=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo 2>/dev/null || echo 0)
n=$((cpus + 1))
if [ "$mem_gib" -gt 0 ] && [ $((mem_gib / 2)) -lt "$n" ]; then n=$((mem_gib / 2)); fi
echo $((n < 1 ? 1 : n))
