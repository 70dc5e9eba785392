#!/usr/bin/env bash
# The GPU procedure: install jitkern (and the carried tvm-ffi wheel) into a private site dir, run the
# GPU tests and the tests that exercise the compilers, then the benchmarks. Logs go to $OUT (or ./gpu-out). Usage:
#   scripts/gpu-check.sh [tests|bench|all] [name-pattern]   (default: all; the pattern picks test files
#   tests/python/test_<pattern>.py and benchmarks benchmarks/bench_<pattern>.py, default every one)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
what=${1:-all}
pattern=${2:-*}
export PYTHONUNBUFFERED=1 JITKERN_CACHE_DIR=${JITKERN_CACHE_DIR:-/tmp/jitkern-cache}
site=/tmp/jitkern-site
if [ ! -f "$site/.installed" ]; then
  rm -rf "$site" && mkdir -p "$site"
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit 1
  fi
  PYTHONPATH=$site python3 -m pip install -q --no-build-isolation --no-deps --no-cache-dir --target "$site" . \
    >"$OUT/install.log" 2>&1 || { tail -50 "$OUT/install.log"; exit 1; }
  touch "$site/.installed"
fi
export PYTHONPATH=$site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  repo=$PWD
  tests=("$repo/tests/python")
  [ "$pattern" = "*" ] || tests=($repo/tests/python/test_${pattern}.py)
  (cd /tmp && python3 -m pytest -q -m "gpu or toolchain" -rs "${tests[@]}" 2>&1) | tee "$OUT/gpu-tests.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for b in benchmarks/bench_${pattern}.py; do
    echo "== $b"
    python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
fi
exit $rc
