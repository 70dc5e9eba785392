"""The reference framework's own kernel sources compile unchanged through jitkern's headers: each .cuh
file its Python modules load, built from the wheel named by REFERENCE_WHEEL with jitkern's include path
(not the wheel's), the template arguments and wrapper expressions its Python modules use, for sm_90a."""

import os
import shutil
import zipfile

import pytest

from conftest import KERNELS
import jitkern

WHEEL = os.environ.get("REFERENCE_WHEEL")
pytestmark = [pytest.mark.skipif(not WHEEL, reason="NOT RUN: set REFERENCE_WHEEL to the reference's wheel"),
              pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")]
COMPAT = KERNELS / "compat"


@pytest.fixture(scope="module")
def jit_kernel(tmp_path_factory):
    """The wheel's sglang/jit_kernel directory, unpacked (kernel sources under csrc/, headers under include/)."""
    root = tmp_path_factory.mktemp("reference")
    with zipfile.ZipFile(WHEEL) as wheel:
        names = [n for n in wheel.namelist() if n.startswith("sglang/jit_kernel/")]
        if not names:  # a current release (sglang/kernels/jit): test_compat_current.py checks those
            pytest.skip(f"NOT RUN: {os.path.basename(WHEEL)} has no sglang/jit_kernel/ (the 0.5.9 layout these cases name)")
        wheel.extractall(root, names)
    return root / "sglang" / "jit_kernel"


# (file under csrc/, template arguments, wrappers): one instantiation per wrapper its Python module builds.
CASES = {
    "add_constant": ("add_constant.cuh", ["5"], [("add_constant", "add_constant<5>")]),
    # The reference's module exports the name `cuda_wait_value`, which the file does not define (its build
    # fails there too); the file's function is stream_wait_value.
    "cuda_wait_value": ("cuda_wait_value.cuh", [], [("stream_wait_value", "stream_wait_value")]),
    "hicache": ("hicache.cuh", ["256", "2", "2", "1024"], [("launch_one", "&HiCacheKernel<256, 2, 2, 1024>::run_one"),
                                                         ("launch_all", "&HiCacheKernel<256, 2, 2, 1024>::run_all")]),
    "fused_add_rmsnorm": ("elementwise/fused_add_rmsnorm.cuh", ["bf16_t"], [("fused_add_rmsnorm", "FusedAddRMSNormKernel<bf16_t>::run")]),
    "qknorm": ("elementwise/qknorm.cuh", ["128", "true", "bf16_t"], [("qknorm", "QKNormKernel<128, true, bf16_t>::run")]),
    "qknorm_across_heads": ("elementwise/qknorm_across_heads.cuh", ["fp16_t"],
                            [("qknorm_across_heads", "QKNormAcrossHeadsKernel<fp16_t>::run")]),
    "rmsnorm": ("elementwise/rmsnorm.cuh", ["4096", "true", "bf16_t"], [("rmsnorm", "RMSNormKernel<4096, true, bf16_t>::run")]),
    "kvcache": ("elementwise/kvcache.cuh", ["1024", "true"], [("store_cache", "StoreKVCacheKernel<1024, true>::run")]),
    "pos_enc": ("elementwise/pos_enc.cuh", [], [("rotary_embedding", "RotaryEmbeddingKernel::run")]),
    "concat_mla": ("elementwise/concat_mla.cuh", [], [("concat_mla_k", "ConcatMlaKKernel::run"),
                                                      ("concat_mla_absorb_q", "ConcatMlaAbsorbQKernel::run")]),
    "fused_metadata_copy": ("elementwise/fused_metadata_copy.cuh", ["1", "true", "false"],
                            [("fused_metadata_copy", "FusedMetadataCopyKernel<1, true, false>::run"),
                             ("fused_metadata_copy_multi", "FusedMetadataCopyMultiKernel<true, false>::run")]),
    "per_tensor_quant_fp8": ("gemm/per_tensor_quant_fp8.cuh", ["false", "bf16_t"],
                             [("per_tensor_quant_fp8", "per_tensor_quant_fp8<false, bf16_t>")]),
    "timestep_embedding": ("diffusion/timestep_embedding.cuh", ["fp32_t"], [("timestep_embedding", "timestep_embedding<fp32_t>")]),
    "gptq_marlin_repack": ("gemm/marlin/gptq_marlin_repack.cuh", [], [("gptq_marlin_repack", "gptq_marlin_repack")]),
    "gptq_marlin": ("gemm/marlin/gptq_marlin.cuh", ["bf16_t"], [("gptq_marlin_gemm", "gptq_marlin_gemm<bf16_t>")]),
    "hadamard": ("fast-hadamard-transform/hadamard_jit.cuh", ["bf16_t"],
                 [(f"hadamard_transform{s}", f"Hadamard{k}Kernel<bf16_t>::run") for s, k in [("", ""), ("_12n", "12N"), ("_20n", "20N"),
                                                                                         ("_28n", "28N"), ("_40n", "40N")]]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reference_kernel_compiles_unchanged(jit_kernel, cache_dir, monkeypatch, name):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    path, args, wrappers = CASES[name]
    includes = [str(jit_kernel / "csrc" / "fast-hadamard-transform")] if name == "hadamard" else []  # as hadamard.py adds
    spec = jitkern.JitSpec(f"reference_{name}", *args, cuda_files=[str(jit_kernel / "csrc" / path)], cuda_wrappers=wrappers,
                           extra_cuda_cflags=["--expt-relaxed-constexpr"], extra_include_paths=includes)
    data = open(spec.build(), "rb").read()
    assert [n for n, _ in wrappers if f"__tvm_ffi_{n}\0".encode() not in data] == []


def test_rope_compiles_with_flashinfer(jit_kernel, cache_dir, monkeypatch):
    """rope.cuh includes <flashinfer/pos_enc.cuh>; the reference's module adds flashinfer's include dir."""
    include = os.environ.get("FLASHINFER_INCLUDE")
    if not include:
        pytest.skip("NOT RUN: set FLASHINFER_INCLUDE to flashinfer's include directory (flashinfer/data/include)")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    spec = jitkern.JitSpec("reference_rope", cuda_files=[str(jit_kernel / "csrc" / "elementwise" / "rope.cuh")],
                           cuda_wrappers=[("apply_rope_pos_ids_cos_sin_cache", "ApplyRopePosIdsCosSinCacheKernel::run")],
                           extra_cuda_cflags=["--expt-relaxed-constexpr"], extra_include_paths=[include])
    assert b"__tvm_ffi_apply_rope_pos_ids_cos_sin_cache\0" in open(spec.build(), "rb").read()


def test_scalar_type_ids_match_the_reference(jit_kernel, cache_dir, tmp_path):
    """Ids the reference's Python side computes decode in jitkern's ScalarType: both headers give every
    constant the same id, size and name."""
    ids = {}
    for which, header in [("ours", "<sgl_kernel/scalar_type.hpp>"),
                          ("reference", f'"{jit_kernel / "include" / "sgl_kernel" / "scalar_type.hpp"}"')]:
        source = tmp_path / f"{which}.h"
        # <tuple> first: the reference's header uses std::apply without including it (its kernels get it via tvm-ffi).
        source.write_text(f'#include <tuple>\n#include {header}\n#include "{COMPAT / "scalar_type_ids.h"}"\n')
        m = jitkern.load_jit(f"scalar_type_ids_{which}", cpp_files=[str(source)], cpp_wrappers=[
            (n, f"scalar_type_{n}") for n in ("count", "id", "size_bits", "name_hash")])
        ids[which] = [(m.id(i), m.size_bits(m.id(i)), m.name_hash(m.id(i))) for i in range(m.count())]
    assert len(ids["ours"]) == 15 and ids["ours"] == ids["reference"]
