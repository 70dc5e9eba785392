#!/usr/bin/env bash
# Sets everything up, then runs every test: C++ (GoogleTest via CTest) and Python (pytest on every core,
# the slow tests too; the GPU tests run where there is a GPU and are reported as NOT RUN elsewhere), then
# the tests marked tvm_ffi again with the oldest apache-tvm-ffi the pin allows (the newest ran before).
# Says when each stage starts and, at the end, how long each took. Extra arguments go to pytest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
stages=6 stage_number=0 stage_name="" stage_started=$SECONDS stage_cpu=0 breakdown=()
times_file=$(mktemp)

# Ends the running stage (its wall time and the CPU time of the processes it ran) and starts the next.
stage() {
  local cpu
  times >"$times_file"  # here, not in a subshell: the CPU time of this shell's finished children
  cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$times_file")
  [ -z "$stage_name" ] || breakdown+=("$(printf '  %-52s %5d s  (CPU %5d s)' "$stage_name" $((SECONDS - stage_started)) $((cpu - stage_cpu)))")
  stage_name=$1 stage_started=$SECONDS stage_cpu=$cpu
  [ -z "$1" ] || { stage_number=$((stage_number + 1)); printf '\n== [%d/%d] %s  (%d:%02d elapsed)\n' "$stage_number" "$stages" "$1" $((SECONDS / 60)) $((SECONDS % 60)); }
}

finish() {
  local rc=$?
  stage ""
  rm -f "$times_file"
  echo
  echo "== time per stage (wall; CPU: user+sys of its processes; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  printf '%s\n' "${breakdown[@]}"
  printf '  %-52s %5d s\n' total "$SECONDS"
  exit "$rc"
}
trap finish EXIT

stage "set-up: .venv, jitkern built in build/cmake"
# shellcheck source=setup.sh
source "$repo/scripts/setup.sh"

stage "C++ tests: build (build/cmake)"
build="$repo/build/cmake"  # the package's build directory (pyproject.toml's build-dir): only the tests compile
cmake -S "$repo" -B "$build" -DJITKERN_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j "$(nproc)"

stage "C++ tests: run (ctest)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"

stage "the reference release's kernels (fetched once)"
# The pinned reference release's kernels, for the compatibility tests (cached outside the repository).
REFERENCE_KERNELS=${REFERENCE_KERNELS:-$("$repo/scripts/fetch_reference.sh")}
export REFERENCE_KERNELS

stage "Python tests: pytest on $(nproc) workers, slow ones too"
# From outside the source tree, so that the installed package (with its built library) is tested. -m "":
# every test (pyproject.toml leaves the slow ones out of a plain `pytest`).
rc=0
(cd /tmp && python -m pytest -q -rs -n auto --dist loadgroup -m "" --durations=10 "$repo/tests/python" "$@") || rc=$?

stage "tvm_ffi tests, the oldest apache-tvm-ffi allowed"
pin=$(jitkern_requirements run | grep '^apache-tvm-ffi')
# The oldest release (not pre-release) the pin allows, from the package index.
oldest=$(python - "$pin" <<'PY'
import re, subprocess, sys
from packaging.requirements import Requirement
from packaging.version import Version
req = Requirement(sys.argv[1])
listing = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check", req.name],
                         capture_output=True, text=True).stdout
found = re.search(r"^Available versions: (.*)$", listing, re.M)
allowed = list(req.specifier.filter(found.group(1).split(", "))) if found else []
print(min(allowed, key=Version) if allowed else "")
PY
)
newest=$(python -c 'import importlib.metadata as m; print(m.version("apache-tvm-ffi"))')
if [ -z "$oldest" ]; then
  echo "NOT RUN: the package index lists no apache-tvm-ffi for $pin"
elif [ "$oldest" = "$newest" ]; then
  echo "apache-tvm-ffi $oldest, the oldest allowed, is the newest too: the run above tested it"
else
  # The same .venv, its tvm-ffi shadowed by the oldest one (first on PYTHONPATH, in child processes too).
  site="$repo/build/apache-tvm-ffi-$oldest"
  [ -d "$site" ] || python -m pip install -q --disable-pip-version-check --no-deps --target "$site" "apache-tvm-ffi==$oldest"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  python -c "import importlib.metadata as m, tvm_ffi; assert tvm_ffi.__file__.startswith('$site/') and m.version('apache-tvm-ffi') == '$oldest'"
  echo "apache-tvm-ffi $oldest, shadowing .venv's $newest"
  (cd /tmp && python -m pytest -q -rs -m tvm_ffi "$repo/tests/python" "$@") || rc=$?
fi
exit "$rc"
