"""Compile-checks (nvcc, sm_90a) the CUDA modules the GPU tests use, from the specs their op modules
declare; runs without a GPU."""

import shutil

import pytest

from conftest import KERNELS, PRIMITIVES_WRAPPERS
from jitkern import JitSpec
from jitkern.ops import kv_transfer, norm, quant, wait_value

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")


def _build(spec: JitSpec) -> str:
    path = spec.build()
    data = open(path, "rb").read()
    for n, *_ in spec.cuda_wrappers:
        assert f"__tvm_ffi_{n}\0".encode() in data
    return path


@pytest.mark.parametrize("spec", norm.SPECS + quant.SPECS + (kv_transfer.spec(), wait_value.spec()),
                         ids=lambda s: "-".join([s.name, *s.args[1:]]))
def test_op_module_compiles(cache_dir, monkeypatch, spec):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    _build(spec)


def test_primitives_module_compiles(cache_dir, monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    _build(JitSpec("primitives_test", cuda_files=[str(KERNELS / "primitives.cuh")], cuda_wrappers=PRIMITIVES_WRAPPERS))
