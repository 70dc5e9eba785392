"""Compile-checks (nvcc, sm_90a) the CUDA modules the GPU tests use, from the specs their op modules
declare; runs without a GPU."""

import shutil

import pytest

from conftest import KERNELS, PRIMITIVES_WRAPPERS
from jitkern import JitSpec, ops

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")


def _build(spec: JitSpec) -> str:
    path = spec.build()
    data = open(path, "rb").read()
    for n, *_ in spec.cuda_wrappers:
        assert f"__tvm_ffi_{n}\0".encode() in data
    return path


@pytest.mark.parametrize("spec", ops.specs(),  # every family's modules (add_constant's: test_cuda_compile.py)
                         ids=lambda s: "-".join([s.name, *s.args[1:]]))
def test_op_module_compiles(cache_dir, monkeypatch, spec):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    _build(spec)


def test_primitives_module_compiles(cache_dir, monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    _build(JitSpec("primitives_test", cuda_files=[str(KERNELS / "primitives.cuh")], cuda_wrappers=PRIMITIVES_WRAPPERS))


def test_specs_by_op_name_list_only_what_each_op_needs():
    """ops.specs(ops=...) names each op's own modules: one per dtype for the norm and quant ops (each
    exporting that op alone), the shared module for the others; every public op is covered."""

    one = ops.specs(ops=["per_token_quant_fp8"], dtypes=["bfloat16"])
    assert [(s.name, s.args[1:], [w[0] for w in s.cuda_wrappers]) for s in one] == [("quant_per_token_quant", ("bf16_t",), ["per_token_quant"])]
    both = ops.specs(ops=["rmsnorm", "fused_inplace_qknorm", "transfer_kv_one_layer", "transfer_kv_all_layers"], dtypes=["float16"])
    assert [s.name for s in both] == ["norm_rmsnorm", "norm_qknorm", "kv_transfer"]
    every = ops.specs(ops=list(ops.OPS), constants=[1])
    assert set(every) == set(ops.specs(constants=[1])), "the ops, all named, need what every family needs"
    assert {s.name for s in every} >= {f"norm_{op}" for op in ops.norm._FAMILY.ops} | {f"quant_{op}" for op in ops.quant._FAMILY.ops}
    with pytest.raises(ValueError, match="unknown op rms_norm"):
        ops.specs(ops=["rms_norm"])
