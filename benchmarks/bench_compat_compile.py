"""Cold compile of the reference framework's own kernels, unchanged: through jitkern (its <sgl_kernel/...>
compatibility headers) against through the reference's path (tvm_ffi.cpp.load_inline with the reference's
headers and flags), same machine, same arch, each in a fresh process with an empty cache. Needs
REFERENCE_WHEEL (the reference's wheel); no GPU (both build and load the module only).
Prints a markdown table (median [min-max]).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import empty_cache_env, environment, is_in_ci  # noqa: E402

TRIALS = 1 if is_in_ci() else 3
ARCH = os.environ.get("JITKERN_CUDA_ARCH", "sm_90a")

# name -> (source under the reference's csrc/, export, the C++ expression its Python module exports)
KERNELS = {
    "rmsnorm": ("elementwise/rmsnorm.cuh", "rmsnorm", "RMSNormKernel<4096, true, bf16_t>::run"),
    "fused_add_rmsnorm": ("elementwise/fused_add_rmsnorm.cuh", "fused_add_rmsnorm", "FusedAddRMSNormKernel<bf16_t>::run"),
    "add_constant": ("add_constant.cuh", "add_constant", "add_constant<1>"),
}

JITKERN = """
import time, jitkern
t0 = time.perf_counter()
jitkern.JitSpec("compat_{name}", cuda_files=["{source}"], cuda_wrappers=[("{export}", "{expr}")],
                extra_cuda_cflags=["--expt-relaxed-constexpr"]).build()
print("SECONDS", time.perf_counter() - t0)
"""

REFERENCE = """
import time, tvm_ffi.cpp
t0 = time.perf_counter()
tvm_ffi.cpp.load_inline("ref_{name}", cuda_sources=['#include "{source}"\\nTVM_FFI_DLL_EXPORT_TYPED_FUNC({export}, ({expr}));\\n'],
                        extra_cuda_cflags=["-std=c++20", "-O3", "--expt-relaxed-constexpr"], extra_include_paths=["{include}"])
print("SECONDS", time.perf_counter() - t0)
"""


def unpack(wheel: str) -> Path:
    target = Path(tempfile.mkdtemp(prefix="reference-"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(target, [n for n in z.namelist() if n.startswith("sglang/jit_kernel/")])
    return target / "sglang" / "jit_kernel"


def cold(code: str) -> float:
    with tempfile.TemporaryDirectory() as cache:
        os.chmod(cache, 0o700)
        env = empty_cache_env(cache, JITKERN_CUDA_ARCH=ARCH, TVM_FFI_CUDA_ARCH_LIST=f"{ARCH[3]}.{ARCH[4:]}")
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=1800)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
        return float(out.stdout.split("SECONDS")[-1])


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s [{min(xs):.2f}-{max(xs):.2f}]"


def main() -> None:
    wheel = os.environ.get("REFERENCE_WHEEL")
    if not wheel:
        sys.exit("set REFERENCE_WHEEL to the reference framework's wheel (sglang-*.whl)")
    root = unpack(wheel)
    print(f"\n### The reference's kernels, unchanged, cold compile ({environment()}, {ARCH}, {os.cpu_count()} CPUs, {TRIALS} trials)\n")
    print("| kernel | through jitkern | through the reference (load_inline) | reference / jitkern |")
    print("|---|---|---|---|")
    for name, (source, export, expr) in KERNELS.items():
        fields = dict(name=name, source=root / "csrc" / source, export=export, expr=expr, include=root / "include")
        mine, theirs = [], []
        for _ in range(TRIALS):  # interleaved, so that a slow moment of the machine hits both
            mine.append(cold(JITKERN.format(**fields)))
            theirs.append(cold(REFERENCE.format(**fields)))
        print(f"| {name} | {fmt(mine)} | {fmt(theirs)} | {statistics.median(theirs) / statistics.median(mine):.2f}x |", flush=True)


if __name__ == "__main__":
    main()
