"""add_constant: per-call host overhead (two tiny tensors) and bandwidth (64M int32).

Per-call overhead: host wall time of a Python loop of BATCH calls on 16-element tensors, synchronising
between batches (untimed) so that the launch queue never fills: a full queue would make the loop wait
for the GPU and measure kernel throughput instead of host cost. Compared side by side: torch.add, the reference path (the tutorial's
wrapper over a tvm_ffi.cpp.load_inline module exported with TVM_FFI_DLL_EXPORT_TYPED_FUNC), and
jitkern; plus a breakdown of where jitkern's time goes. Bandwidth: triton do_bench median, bytes read
+ written, against torch and a measured device-to-device copy.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (BATCH, BATCHES, copy_ceiling_text, copy_ceilings, environment, overhead_module, per_call_us, reference_ldflags,  # noqa: E402
                   run_benchmark)

import jitkern  # noqa: E402
from jitkern.ops import add_constant  # noqa: E402
from jitkern.ops.add_constant import _add_constant_function  # noqa: E402
from jitkern.jit import positional  # noqa: E402

HERE = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def _reference_module(constant: int):
    import tvm_ffi.cpp

    arch = torch.cuda.get_device_capability()
    os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", f"{arch[0]}.{arch[1]}{'a' if arch[0] >= 9 else ''}")
    source = f'#include "{HERE}/kernels/add_constant_tvm.cuh"\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(add_constant, add_constant_tvm<{constant}>);\n'
    return tvm_ffi.cpp.load_inline(f"ref_add_constant_{constant}", cuda_sources=[source],
                                   extra_cuda_cflags=["-std=c++20", "-O3", "--expt-relaxed-constexpr"],
                                   extra_include_paths=[str(jitkern.INCLUDE_DIR)], extra_ldflags=reference_ldflags())


def reference_add_constant(src: torch.Tensor, constant: int) -> torch.Tensor:
    """The tutorial's Python wrapper, verbatim in substance."""
    if not src.is_cuda:
        raise RuntimeError("src must be a CUDA tensor")
    if src.dtype != torch.int32:
        raise RuntimeError(f"Unsupported dtype {src.dtype}. Supported: int32")
    dst = torch.empty_like(src)
    module = _reference_module(constant)
    module.add_constant(dst, src)
    return dst


def overhead_table() -> None:
    src = torch.randint(-100, 100, (16,), dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    raw = _add_constant_function(5)
    ovh = overhead_module()
    # the exported functions themselves (positional only), as the ops call theirs
    call_only, verify_only, verify_and_stream, launch_empty, launch_empty_bare, launch_empty_pdl, allocate_only = (
        positional(ovh, name) for name in ("call_only", "verify_only", "verify_and_stream", "launch_empty", "launch_empty_bare",
                                           "launch_empty_pdl", "allocate_only"))
    ref_mod = _reference_module(5)
    ref_fn = ref_mod.add_constant
    rows = {
        "torch.add (src + 5)": lambda: src + 5,
        "reference path (tutorial wrapper, load_inline module)": lambda: reference_add_constant(src, 5),
        "jitkern.ops.add_constant(src, 5)": lambda: add_constant(src, 5),
        "jitkern.ops.add_constant(src, 5, out=dst)": lambda: add_constant(src, 5, out=dst),
        "reference exported function alone, preallocated dst": lambda: ref_fn(dst, src),
        "jitkern exported function alone, preallocated dst": lambda: raw(dst, src),
    }
    breakdown = {
        "torch.empty_like(src)": lambda: torch.empty_like(src),
        "jitkern: Python -> C ABI call, no work (argument conversion)": lambda: call_only(dst, src),
        "jitkern: + TensorMatcher on both tensors": lambda: verify_only(dst, src),
        "jitkern: + stream lookup (TVMFFIEnvGetStream)": lambda: verify_and_stream(dst, src),
        "jitkern: + kernel launch (the exported add_constant)": lambda: raw(dst, src),
    }
    launch = {
        "an empty kernel through LaunchKernel (after TensorMatcher)": lambda: launch_empty(dst, src),
        "an empty kernel through a bare <<<>>> (after TensorMatcher)": lambda: launch_empty_bare(dst, src),
        "an empty kernel through LaunchKernel with .enable_pdl() (after TensorMatcher)": lambda: launch_empty_pdl(dst, src),
        "jitkern::Tensor::empty_like in C++, returned to Python as a torch.Tensor": lambda: allocate_only(src),
    }
    assert type(allocate_only(src)) is torch.Tensor, "the C++-allocated output must come back as a torch.Tensor"
    results = {name: per_call_us(fn) for name, fn in {**rows, **breakdown, **launch}.items()}
    ref = results["reference path (tutorial wrapper, load_inline module)"]
    print(f"\n### Per-call host overhead, two 16-element int32 tensors ({environment()}; median over {BATCHES} batches of {BATCH} calls)\n")
    print("| path | us per call | vs reference path |")
    print("|---|---|---|")
    for name in rows:
        print(f"| {name} | {results[name]:.2f} | {results[name] / ref:.2f}x |")
    print("\nWhere jitkern's time goes (cumulative stages):\n")
    print("| stage | us per call |")
    print("|---|---|")
    for name in breakdown:
        print(f"| {name} | {results[name]:.2f} |")
    print("\nThe launch and the allocation on their own (each a separate call):\n")
    print("| what | us per call |")
    print("|---|---|")
    for name in launch:
        print(f"| {name} | {results[name]:.2f} |")


def bandwidth_table() -> None:
    n = 64 * 1024 * 1024
    src = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32, device="cuda")
    out = torch.empty_like(src)
    raw = _add_constant_function(5)
    num_bytes = 2 * src.numel() * src.element_size()
    ceilings = copy_ceilings(num_bytes)
    ceiling = max(ceilings.values())
    rows = {
        "jitkern add_constant": lambda: raw(out, src),
        "torch.add(src, 5, out=out)": lambda: torch.add(src, 5, out=out),
        "copy (out.copy_(src))": lambda: out.copy_(src),
    }
    raw(out, src)
    assert torch.equal(out, src + 5)
    print(f"\n### add_constant bandwidth, 64M int32 ({num_bytes / 1e6:.0f} MB moved; {environment()})\n")
    print(f"Measured copy ceiling ({num_bytes / 1e6:.0f} MB moved): {copy_ceiling_text(ceilings)}\n")
    print("| kernel | median us | p20-p80 us | GB/s | % of copy ceiling |")
    print("|---|---|---|---|---|")
    for name, fn in rows.items():
        t = run_benchmark(fn, use_cudagraph=False)
        gbps = num_bytes / (t["median"] * 1e-6) / 1e9
        print(f"| {name} | {t['median']:.1f} | {t['p20']:.1f}-{t['p80']:.1f} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% |")


if __name__ == "__main__":
    overhead_table()
    bandwidth_table()
