#!/usr/bin/env bash
# Fetches the pinned reference release (SGLang's wheel, with pip) once into a cache outside the repository
# and unpacks its kernel package (sglang/kernels/: jit/ and ops/); prints the directory of its
# sglang/kernels/jit, or nothing when it cannot be fetched (no network: the tests that need it say NOT RUN).
# Usage: REFERENCE_KERNELS=$(scripts/fetch_reference.sh) ... ; SGLANG_REFERENCE_VERSION overrides the pin.
set -uo pipefail
version=${SGLANG_REFERENCE_VERSION:-0.5.23}
cache=${JITKERN_REFERENCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitkern-reference}/sglang-$version
if [ ! -d "$cache/sglang/kernels/jit/csrc" ]; then
  mkdir -p "$cache/wheel"
  if ! ls "$cache"/wheel/sglang-"$version"-*.whl >/dev/null 2>&1; then
    python -m pip download -q --no-deps --disable-pip-version-check "sglang==$version" -d "$cache/wheel" >&2 || exit 0
  fi
  python - "$cache" "$version" <<'PY' >&2 || exit 0
import glob, sys, zipfile
cache, version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(glob.glob(f"{cache}/wheel/sglang-{version}-*.whl")[0]) as wheel:
    wheel.extractall(cache, [n for n in wheel.namelist() if n.startswith("sglang/kernels/")])
PY
fi
echo "$cache/sglang/kernels/jit"
