#!/usr/bin/env bash
# Creates .venv (if missing) and installs jitkern with its test dependencies into it: the C++
# engine/runtime library is built by CMake through scikit-build-core. Source this file.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ ! -x "$repo/.venv/bin/python" ]; then
  python3 -m venv "$repo/.venv"
fi
# shellcheck disable=SC1091
source "$repo/.venv/bin/activate"
python -m pip install -q --disable-pip-version-check "$repo[test]"
