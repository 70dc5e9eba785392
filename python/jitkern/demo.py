"""python -m jitkern.demo: JIT-compile and run add_constant.

With a CUDA GPU (and torch): the CUDA kernel on the GPU, checked against torch. Without one: the
CPU version through the same engine on numpy arrays, plus a compile-check of the shipped CUDA
kernel for sm_90a (or $JITKERN_CUDA_ARCH) when nvcc is installed.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

from . import _engine, load_jit, make_cpp_args


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _timed(label, fn):
    t0 = time.perf_counter()
    result = fn()
    print(f"{label}: {1e3 * (time.perf_counter() - t0):.1f} ms")
    return result


def gpu_demo() -> None:
    import torch

    from .ops import add_constant

    src = torch.randint(-1000, 1000, (10_000_019,), dtype=torch.int32, device="cuda")
    out = _timed("first call (JIT compile or cache load)", lambda: add_constant(src, 42))
    torch.cuda.synchronize()
    assert torch.equal(out, src + 42), "add_constant disagrees with torch"
    print(f"add_constant on {torch.cuda.get_device_name()}: {src.numel()} int32 elements, matches torch")


def cpu_demo() -> None:
    import numpy as np

    args = make_cpp_args(42)
    module = _timed(
        "load_jit add_constant_cpu (JIT compile or cache load)",
        lambda: load_jit("add_constant_cpu", *args, cpp_files=["add_constant_cpu.h"],
                         cpp_wrappers=[("add_constant", f"add_constant_cpu<{args}>")]),
    )
    src = np.random.default_rng().integers(-1000, 1000, 1_000_003, dtype=np.int32)
    dst = np.empty_like(src)
    module.add_constant(dst, src)
    assert np.array_equal(dst, src + 42), "add_constant_cpu disagrees with numpy"
    print(f"add_constant_cpu on {src.size} int32 elements (CPU, no GPU here): matches numpy")
    if shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"):
        print("nvcc not found: skipped the CUDA compile-check")
        return
    arch = _engine.effective("JITKERN_CUDA_ARCH") or "sm_90a"
    from .ops.add_constant import spec

    path = _timed(f"compile-check add_constant.cuh for {arch}", lambda: spec(42).replace(cuda_arch=arch).build())
    print(f"CUDA kernel compiled: {path}")


def main() -> int:
    if _gpu_available():
        gpu_demo()
    else:
        cpu_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
