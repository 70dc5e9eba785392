#!/usr/bin/env bash
# Sets everything up, then runs all tests: C++ (GoogleTest via CTest) and Python (pytest; the GPU
# tests run where there is a GPU and are reported as skipped/NOT RUN elsewhere).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/scripts/setup.sh"
echo "configuring the C++ tests (CMake) ..."
cmake -S "$repo" -B "$repo/build" -DJITKERN_BUILD_TESTS=ON -DPython3_EXECUTABLE="$(command -v python)" >/dev/null
echo "building the C++ tests ..."
cmake --build "$repo/build" -j "$(nproc)"
echo "running the C++ tests (ctest) ..."
ctest --test-dir "$repo/build" --output-on-failure
# The pinned reference release's kernels, for the compatibility tests (cached outside the repository).
REFERENCE_KERNELS=${REFERENCE_KERNELS:-$("$repo/scripts/fetch_reference.sh")}
export REFERENCE_KERNELS
echo "running the Python tests (pytest) ..."
# From outside the source tree, so that the installed package (with its built library) is tested.
cd /tmp && python -m pytest -q -rs "$repo/tests/python" "$@"
