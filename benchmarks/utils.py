"""Benchmark helpers shared by bench_*.py (the reference framework's helpers, with correct labels)."""

from __future__ import annotations

import os
import subprocess
from datetime import date


def is_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def get_benchmark_range(full: list, ci: list) -> list:
    """The full sweep normally, a reduced one in CI."""
    return ci if is_in_ci() else full


def run_benchmark(fn, *, quantiles=(0.5, 0.2, 0.8), use_cudagraph: bool = True) -> dict[str, float]:
    """Times fn on the GPU; returns microseconds as {"median", "p20", "p80"} (p20 is the faster one)."""
    import triton.testing

    if use_cudagraph:
        ms = triton.testing.do_bench_cudagraph(fn, quantiles=list(quantiles))
    else:
        ms = triton.testing.do_bench(fn, quantiles=list(quantiles))
    median, p20, p80 = (1000.0 * v for v in ms)
    return {"median": median, "p20": p20, "p80": p80}


def copy_ceiling_gbps(num_bytes: int = 1 << 30) -> float:
    """Measured device-to-device copy bandwidth (bytes read + written), the memory-bound ceiling."""
    import torch

    src = torch.empty(num_bytes // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    t = run_benchmark(lambda: dst.copy_(src), use_cudagraph=False)
    return num_bytes / (t["median"] * 1e-6) / 1e9


def environment() -> str:
    try:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    except ImportError:
        device = "no GPU (torch not installed)"

    commit = os.environ.get("JITKERN_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip() or "unknown"
    return f"{date.today().isoformat()}, {device}, commit {commit}"


def reference_ldflags() -> list[str]:
    """Link flags for reference-path modules that use jitkern's TensorMatcher (implemented in its runtime library)."""
    import jitkern

    lib = str(jitkern.PACKAGE_DIR / "lib")
    return [f"-L{lib}", "-ljitkern_runtime", f"-Wl,-rpath,{lib}"]
