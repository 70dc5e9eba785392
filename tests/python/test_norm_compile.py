"""Compile-checks (nvcc, sm_90a) the CUDA modules the GPU tests use; runs without a GPU."""

import shutil

import pytest

from conftest import KERNELS, PRIMITIVES_WRAPPERS
from jitkern import _engine, jit

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")

NORM_OPS = ("rmsnorm", "fused_add_rmsnorm", "qknorm", "qknorm_across_heads")


def _build(name_parts, cuda_file, wrappers):
    request = [("name", p) for p in name_parts] + [("cuda_file", cuda_file)]
    request += [("cuda_wrapper", f"{n}\t{e}") for n, e in wrappers] + list(jit._env().items())
    path = _engine.build(request)
    data = open(path, "rb").read()
    for n, _ in wrappers:
        assert f"__tvm_ffi_{n}".encode() in data
    return path


@pytest.mark.parametrize("t", ["fp16_t", "bf16_t", "fp32_t"])
def test_norm_module_compiles(cache_dir, monkeypatch, t):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    _build(["norm", t], "norm.cuh", [(op, f"NormOps<{t}>::{op}") for op in NORM_OPS])


def test_primitives_module_compiles(cache_dir, monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    _build(["primitives_test"], str(KERNELS / "primitives.cuh"), PRIMITIVES_WRAPPERS)
