#!/usr/bin/env bash
# The GPU procedure: install jitkern (and the carried tvm-ffi wheel) into a private site dir, run the
# GPU tests, the tests that need torch and those that exercise the compilers, then the benchmarks. Logs go to $OUT (or ./gpu-out). Usage:
#   scripts/gpu-check.sh [tests|bench|all|wheel] [name-pattern]   (default: all; the pattern picks test files
#   tests/python/*/test_<pattern>.py and benchmarks benchmarks/bench_<pattern>.py, default every one;
#   wheel: `prebuild --ops all --wheel` for this GPU, installed and served strictly without a compiler: its size,
#   the install time and the first call's, then every op module loaded from it;
#   memcheck: the pattern's GPU tests under compute-sanitizer's memcheck, a third argument a pytest -k
#   expression that picks them (the tool slows kernels 10-100x: pick the shapes, not the exhaustive sweeps))
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
what=${1:-all}
pattern=${2:-*}
export PYTHONUNBUFFERED=1 JITKERN_CACHE_DIR=${JITKERN_CACHE_DIR:-/tmp/jitkern-cache}
site=${JITKERN_GPU_SITE:-/tmp/jitkern-site}   # where this tree is installed (one per tree checked)
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
# The tests on pytest-xdist's workers where that Python has it: one per CPU but two, and one per 10 GiB of the
# GPU's memory (a test takes up to 14 GiB); JITKERN_GPU_TEST_WORKERS sets the count (1: none).
workers=${JITKERN_GPU_TEST_WORKERS:-}
if [ -z "$workers" ]; then
  workers=1
  if python3 -c "import xdist" 2>/dev/null; then
    gib=$(( $(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0) / 1024 ))
    workers=$(( $(nproc) - 2 )); [ $(( gib / 10 )) -lt "$workers" ] && workers=$(( gib / 10 ))
  fi
fi
# Under compute-sanitizer at most 8 unless chosen: each sanitized process is several times heavier.
[ "$what" = memcheck ] && [ -z "${JITKERN_GPU_TEST_WORKERS:-}" ] && [ "$workers" -gt 8 ] && workers=8
parallel=(); [ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadgroup)
rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  repo=$PWD
  tests=("$repo/tests/python")
  [ "$pattern" = "*" ] || tests=($repo/tests/python/*/test_${pattern}.py)
  (cd /tmp && python3 -m pytest -q ${parallel[@]+"${parallel[@]}"} -m "gpu or toolchain or torch" -rs "${tests[@]}" 2>&1) | tee "$OUT/gpu-tests.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for b in benchmarks/bench_${pattern}.py; do
    echo "== $b"
    python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
fi
if [ "$what" = memcheck ]; then
  sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  repo=$PWD
  tests=("$repo/tests/python")
  [ "$pattern" = "*" ] || tests=($repo/tests/python/*/test_${pattern}.py)
  # The modules are compiled by a plain run first: under the tool, only the kernels' own accesses are checked.
  (cd /tmp && python3 -m pytest -q ${parallel[@]+"${parallel[@]}"} -m gpu -p no:cacheprovider ${3:+-k "$3"} "${tests[@]}" 2>&1) | tail -1 | sed 's/^/plain run: /'
  # -v: each test's verdict as it ends, so that a run cut short still shows how far it got.
  (cd /tmp && "$sanitizer" --tool memcheck --error-exitcode 99 --target-processes all --print-limit 20 \
    python3 -m pytest -v ${parallel[@]+"${parallel[@]}"} -m gpu -p no:cacheprovider -rfE ${3:+-k "$3"} "${tests[@]}" 2>&1) | tee "$OUT/memcheck.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  grep -hE "ERROR SUMMARY" "$OUT/memcheck.log" | sort | uniq -c  # one a process: each xdist worker's
fi
if [ "$what" = wheel ]; then
  w=/tmp/jitkern-wheel py=$(command -v python3)
  rm -rf "$w" && mkdir -p "$w"
  arch=$(python3 -c "import torch, jitkern._engine as e; print(e.arch_for_capability(*torch.cuda.get_device_capability()))")
  python3 -m jitkern prebuild --ops all --arch "$arch" --cache-dir "$w/build" --wheel "$w/dist" 2>&1 | tail -2 | tee "$OUT/wheel.log"
  t0=$(date +%s%N)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$w/site" "$w"/dist/*.whl || exit 1
  echo "installed in $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$OUT/wheel.log"
  env -u CUDA_HOME -u CUDA_PATH CXX=/nonexistent PATH=/nonexistent PYTHONPATH="$site:$w/site" JITKERN_ON_MISS=error \
    JITKERN_CACHE_DIR="$w/serving-cache" "$py" -c '
import time; t0 = time.perf_counter()
import torch, jitkern.ops
x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16); w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
jitkern.ops.rmsnorm(x, w); torch.cuda.synchronize(); t1 = time.perf_counter()
specs = jitkern.ops.specs()
for s in specs: s.load()
print(f"first call (rmsnorm, imports included) {t1 - t0:.2f} s; all {len(specs)} op modules loaded from the wheel in {time.perf_counter() - t1:.2f} s")
' 2>&1 | tee -a "$OUT/wheel.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
exit $rc
