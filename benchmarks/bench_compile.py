"""Cold compile and warm load of add_constant: jitkern vs the reference mechanism (tvm_ffi.cpp.load_inline
with tvm-ffi's C++ TensorView and TVM_FFI_DLL_EXPORT_TYPED_FUNC), same machine, same run, same arch.

Each trial runs in a fresh process; cold trials start from an empty cache directory. Prints a
markdown table (median of the trials, min-max in brackets).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import empty_cache_env, environment, is_in_ci  # noqa: E402

HERE = Path(__file__).resolve().parent
TRIALS = 2 if is_in_ci() else 3
ARCH = os.environ.get("JITKERN_CUDA_ARCH", "sm_90a")

# Each snippet imports torch first when it is installed: in real use torch has loaded the CUDA runtime
# already, and loading it is not part of loading a kernel module.
PRELUDE = "try:\n    import torch\nexcept ImportError:\n    pass\n"

JITKERN_LEAN = PRELUDE + """
import time, jitkern
from jitkern import load_jit  # the package's import (tvm-ffi's too) is not part of a load
t0 = time.perf_counter()
m = load_jit("add_constant", "5", cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<5>")])
m.add_constant
print("SECONDS", time.perf_counter() - t0)
"""

JITKERN_TVM_VIEW = PRELUDE + f"""
import time, jitkern
from jitkern import load_jit
t0 = time.perf_counter()
m = load_jit("add_constant_tvm", "5", cuda_files=["{HERE}/kernels/add_constant_tvm.cuh"],
                     cuda_wrappers=[("add_constant", "add_constant_tvm<5>")])
m.add_constant
print("SECONDS", time.perf_counter() - t0)
"""

REFERENCE = PRELUDE + f"""
import time, jitkern, tvm_ffi.cpp
lib = str(jitkern.PACKAGE_DIR / "lib")
source = '#include "{HERE}/kernels/add_constant_tvm.cuh"\\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(add_constant, add_constant_tvm<5>);\\n'
t0 = time.perf_counter()
m = tvm_ffi.cpp.load_inline("ref_add_constant_5", cuda_sources=[source],
                            extra_cuda_cflags=["-std=c++20", "-O3", "--expt-relaxed-constexpr"],
                            extra_include_paths=[str(jitkern.INCLUDE_DIR)],
                            extra_ldflags=["-L" + lib, "-ljitkern_runtime", "-Wl,-rpath," + lib])
m.add_constant  # resolve the export, as a call would
print("SECONDS", time.perf_counter() - t0)
"""


# Only the engine's cache lookup (C++: key, manifest, dependency stats), first call in a fresh process.
WARM_ENGINE_ONLY = PRELUDE + """
import time, jitkern
from jitkern import JitSpec
t0 = time.perf_counter()
JitSpec("add_constant", "5", cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<5>")]).build()
print("SECONDS", time.perf_counter() - t0)
"""


def trial(code: str, cache: str, extra_env: dict[str, str] | None = None) -> float:
    env = empty_cache_env(cache, JITKERN_CUDA_ARCH=ARCH, TVM_FFI_CUDA_ARCH_LIST=f"{ARCH[3]}.{ARCH[4:]}", **(extra_env or {}))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return float(out.stdout.split("SECONDS")[-1])


BREAKDOWN: list[float] = []  # engine-only warm lookups


def measure(code: str, breakdown: bool = False) -> tuple[list[float], list[float]]:
    cold, warm = [], []
    for _ in range(TRIALS):
        with tempfile.TemporaryDirectory() as cache:
            os.chmod(cache, 0o700)
            cold.append(trial(code, cache))
            warm.extend(trial(code, cache) for _ in range(2))
            if breakdown:
                BREAKDOWN.append(trial(WARM_ENGINE_ONLY, cache))
    return cold, warm


def fmt(xs: list[float], scale: float, unit: str) -> str:
    return f"{statistics.median(xs) * scale:.3g} {unit} [{min(xs) * scale:.3g}-{max(xs) * scale:.3g}]"


def main() -> None:
    rows = {
        "jitkern, jitkern::TensorView (default)": measure(JITKERN_LEAN, breakdown=True),
        "jitkern, tvm::ffi::TensorView kernel": measure(JITKERN_TVM_VIEW),
        "reference: tvm_ffi.cpp.load_inline + TVM_FFI_DLL_EXPORT_TYPED_FUNC": measure(REFERENCE),
    }
    ref_cold = statistics.median(rows["reference: tvm_ffi.cpp.load_inline + TVM_FFI_DLL_EXPORT_TYPED_FUNC"][0])
    ref_warm = statistics.median(rows["reference: tvm_ffi.cpp.load_inline + TVM_FFI_DLL_EXPORT_TYPED_FUNC"][1])
    print(f"\n### Compile and load: add_constant ({environment()}, {ARCH}, {os.cpu_count()} CPUs, {TRIALS} trials)\n")
    print("| path | cold compile (empty cache) | vs reference | warm load, fresh process | vs reference |")
    print("|---|---|---|---|---|")
    for name, (cold, warm) in rows.items():
        print(f"| {name} | {fmt(cold, 1, 's')} | {statistics.median(cold) / ref_cold:.2f}x | {fmt(warm, 1e3, 'ms')} | "
              f"{statistics.median(warm) / ref_warm:.3f}x |")
    engine = statistics.median(BREAKDOWN) * 1e3
    total = statistics.median(rows["jitkern, jitkern::TensorView (default)"][1]) * 1e3
    print(f"\nWarm load breakdown (jitkern default, medians of fresh processes): the engine's cache lookup alone (C++: key, "
          f"manifest, dependency stats) {engine:.3f} ms; the rest of load_jit (dlopen, CUDA registration, tvm-ffi function "
          f"objects, Python) {total - engine:.3f} ms")
    print("\nJSON " + json.dumps({k: {"cold_s": v[0], "warm_s": v[1]} for k, v in rows.items()}))


if __name__ == "__main__":
    main()
