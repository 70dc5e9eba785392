"""Compile-checks (nvcc, sm_90a) every CUDA instantiation the GPU tests use; runs without a GPU."""

import shutil

import pytest

from add_constant_cases import CONSTANTS
from jitkern import _engine, jit, make_cpp_args

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")


@pytest.mark.parametrize("constant", CONSTANTS)
def test_add_constant_instantiation_compiles(cache_dir, monkeypatch, constant):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    args = make_cpp_args(constant)
    request = [("name", "add_constant"), *[("name", a) for a in args], ("cuda_file", "add_constant.cuh"),
               ("cuda_wrapper", f"add_constant\tadd_constant<{args}>")] + list(jit._env().items())
    path = _engine.build(request)
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and b"__tvm_ffi_add_constant" in data
