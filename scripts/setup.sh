#!/usr/bin/env bash
# Creates .venv (if missing) and installs jitkern with its test dependencies into it: the C++
# engine/runtime library is built by CMake through scikit-build-core. Source this file. The install is
# skipped when the package's sources are what the last install built (a stamp in .venv).
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

stamp="$repo/.venv/jitkern-install.stamp"
sources_hash=$(jitkern_sources_hash)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sources_hash" ]; then
  echo "jitkern is installed and up to date in .venv (sources unchanged since the last install)"
else
  echo "installing jitkern (C++ build, 1-2 min) and the test dependencies into .venv ..."
  rm -f "$stamp"
  python -m pip install -q --disable-pip-version-check "$repo[test]"
  echo "$sources_hash" >"$stamp"
  echo "installed jitkern"
fi
