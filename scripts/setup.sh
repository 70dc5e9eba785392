#!/usr/bin/env bash
# Creates .venv (if missing) and installs jitkern with its test dependencies into it: the C++
# engine/runtime library is built by CMake through scikit-build-core, in build/cmake (pyproject.toml's
# build-dir). Source this file. The install is skipped when the package's sources are what the last
# install built (a stamp in .venv).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ ! -x "$repo/.venv/bin/python" ]; then
  echo "creating $repo/.venv ..."
  python3 -m venv "$repo/.venv"
fi
# shellcheck disable=SC1091
source "$repo/.venv/bin/activate"

# What the installed package is built from: the contents of every file, tracked or new, under these paths.
jitkern_sources_hash() {
  local paths=(src include csrc python CMakeLists.txt pyproject.toml)
  (
    cd "$repo"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      git ls-files -z -c -o --exclude-standard -- "${paths[@]}" | sort -z | xargs -0 sha256sum
    else
      find "${paths[@]}" -type f -not -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
    fi
    python --version
  ) | sha256sum | cut -d' ' -f1
}

# pyproject.toml's requirements, one per line: `build` (the build system's), `run` (jitkern's), `test` (the test extra's).
jitkern_requirements() {
  python - "$repo/pyproject.toml" "$@" <<'PY'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10: pip's own copy of the same parser
    from pip._vendor import tomli as tomllib
project = tomllib.load(open(sys.argv[1], "rb"))
groups = {"build": project["build-system"]["requires"], "run": project["project"]["dependencies"],
          "test": project["project"]["optional-dependencies"]["test"]}
print("\n".join(r for g in sys.argv[2:] for r in groups[g]))
PY
}

stamp="$repo/.venv/jitkern-install.stamp"
sources_hash=$(jitkern_sources_hash)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sources_hash" ]; then
  echo "jitkern is installed and up to date in .venv (sources unchanged since the last install)"
else
  rm -f "$stamp"
  echo "installing the build and test dependencies into .venv ..."
  mapfile -t requirements < <(jitkern_requirements build run test)
  pip_quiet=(-q --disable-pip-version-check)
  python -m pip install "${pip_quiet[@]}" "${requirements[@]}"
  # tvm-ffi: the newest release the pin allows, a pre-release too while it is the newest (scripts/test.sh
  # also tests the oldest allowed one).
  python -m pip install "${pip_quiet[@]}" --upgrade --pre "$(jitkern_requirements run | grep '^apache-tvm-ffi')"
  echo "building jitkern (C++ engine; 1-2 min the first time, then only what changed) ..."
  # No build isolation: the build directory is kept, and it must name this venv's tvm-ffi, not a temporary one's.
  python -m pip install "${pip_quiet[@]}" --no-build-isolation --no-deps --force-reinstall "$repo"
  echo "$sources_hash" >"$stamp"
  echo "installed jitkern $(python -c 'import jitkern; print(jitkern.__version__)') with apache-tvm-ffi $(python -c 'import importlib.metadata as m; print(m.version("apache-tvm-ffi"))')"
fi
