"""Device primitives (warp/CTA reductions, atomic max, casts, math, vectors, tiles, runtime queries),
each through a small kernel JIT-compiled by jitkern and checked against a host computation."""

import math

import pytest

from conftest import KERNELS, PRIMITIVES_WRAPPERS, cuda_runtime_version

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def prim():
    import jitkern

    return jitkern.load_jit("primitives_test", cuda_files=[str(KERNELS / "primitives.cuh")], cuda_wrappers=PRIMITIVES_WRAPPERS)


def test_tensor_allocated_in_cpp_is_returned_as_torch_tensor(prim):
    """jitkern::Tensor allocates through torch's allocator (tvm-ffi's environment allocator) on the
    current stream and comes back as an ordinary torch.Tensor, also inside a CUDA graph capture."""
    import torch

    x = torch.randn(1001, device="cuda")
    y = prim.copy_new(x)
    assert type(y) is torch.Tensor and y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    assert y.data_ptr() != x.data_ptr()
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            captured = prim.copy_new(x)
    x.add_(1)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, x, rtol=0, atol=0)
    z = prim.zeros_new(x, 3, 5)  # Tensor::empty with an explicit shape, dtype and device
    assert type(z) is torch.Tensor and z.shape == (3, 5) and z.dtype == torch.float32 and z.device == x.device
    assert z.is_contiguous() and bool((z == 0).all())


@pytest.mark.parametrize("threads", [32, 64, 96, 256, 1024])
def test_warp_and_cta_reductions(prim, threads):
    import torch

    x = torch.randn(threads, device="cuda")
    out = torch.full((8,), float("nan"), device="cuda")
    prim.reductions(out, x)
    torch.testing.assert_close(out[0], x[:32].sum(), rtol=1e-5, atol=1e-5)
    assert out[1] == x[:32].max()
    torch.testing.assert_close(out[2], x.sum(), rtol=1e-5, atol=1e-4)
    assert out[3] == x.max()
    torch.testing.assert_close(out[4], x.sum(), rtol=1e-5, atol=1e-4)
    assert out[5] == 0, "every thread must receive the CTA-wide results"
    assert out[6] == x[:32].abs().max() and out[7] == x.abs().max()


@pytest.mark.parametrize("nan_at", [0, 5, 31, 200])
def test_float_max_reductions_leave_nan_out(prim, nan_at):
    """A NaN does not enter a float max, whichever lane holds it, and every thread still agrees."""
    import torch

    x = torch.randn(256, device="cuda")
    x[nan_at] = float("nan")
    out = torch.full((8,), float("nan"), device="cuda")
    prim.reductions(out, x)
    finite = x[~x.isnan()]
    if nan_at < 32:
        assert out[1] == x[:32][~x[:32].isnan()].max()
    else:
        assert out[1] == x[:32].max()
    assert out[3] == finite.max()
    assert out[5] == 0, "every thread must receive the CTA-wide results"


def test_atomic_max_negative_values_and_nan(prim):
    import torch

    prim_mod = prim
    x = -torch.rand(100_000, device="cuda") - 1.0  # all negative
    out = torch.full((1,), -float("inf"), device="cuda")
    prim_mod.atomic_max(out, x)
    assert out.item() == x.max().item()
    mixed = torch.randn(100_000, device="cuda")
    out.fill_(-float("inf"))
    prim_mod.atomic_max(out, mixed)
    assert out.item() == mixed.max().item()
    mixed[12345] = float("nan")  # NaN is sticky (documented policy)
    out.fill_(-float("inf"))
    prim_mod.atomic_max(out, mixed)
    assert math.isnan(out.item())


@pytest.mark.parametrize("t,torch_dtype", [("fp32_t", "float32"), ("fp16_t", "float16"), ("bf16_t", "bfloat16")])
def test_math(prim, t, torch_dtype):
    import torch

    dtype = getattr(torch, torch_dtype)
    x = (torch.rand(10_000, device="cuda") * 8 - 4).to(dtype).float()  # representable in T
    out = torch.full((9, x.numel()), float("nan"), device="cuda")
    getattr(prim, f"math_{t}")(out, x)
    xd = x.double()
    refs = [xd.abs(), xd.abs().sqrt(), xd.abs().rsqrt(), xd.exp(), xd.sin(), xd.cos(), xd.clamp(min=0.25),
            xd.clamp(max=0.25), xd]
    tol = {"float32": 2e-6, "float16": 1e-3, "bfloat16": 8e-3}[torch_dtype]
    for k, ref in enumerate(refs):
        ref = ref.to(dtype).double() if dtype != torch.float32 else ref
        finite = torch.isfinite(ref)
        torch.testing.assert_close(out[k].double()[finite], ref[finite], rtol=tol, atol=tol, msg=f"op {k}")


@pytest.mark.parametrize("t,torch_dtype", [("fp16_t", "float16"), ("bf16_t", "bfloat16"), ("fp8_e4m3_t", "float8_e4m3fn")])
def test_casts_match_torch(prim, t, torch_dtype):
    import torch

    x = torch.randn(100_000, device="cuda") * (100 if t == "fp8_e4m3_t" else 1000)
    if t == "fp8_e4m3_t":
        x = x.clamp(-448, 448)  # torch's cast does not saturate; ours does (tested below)
    out = torch.empty_like(x)
    getattr(prim, f"round_trip_{t}")(out, x)
    assert torch.equal(out, x.to(getattr(torch, torch_dtype)).float())
    if t == "fp8_e4m3_t":
        big = torch.tensor([1e6, -1e6], device="cuda")
        sat = torch.empty_like(big)
        prim.round_trip_fp8_e4m3_t(sat, big)
        assert sat.tolist() == [448.0, -448.0]


@pytest.mark.parametrize("t", ["fp16x2_t", "bf16x2_t"])
def test_packed_x2_forms(prim, t):
    import torch

    dtype = torch.float16 if t == "fp16x2_t" else torch.bfloat16
    a = torch.randn(1000, 2, device="cuda").to(dtype).float()
    b = torch.randn(1000, 2, device="cuda").to(dtype).float()
    out = torch.empty_like(a)
    getattr(prim, f"packed_max_{t}")(out, a, b)
    assert torch.equal(out, torch.maximum(a, b))


@pytest.mark.parametrize("n", [8, 1000, 4099, 100_000])
def test_vector_and_tile_copy(prim, n):
    import torch

    src = torch.randn(n, device="cuda").to(torch.bfloat16)
    dst = torch.full_like(src, float("nan"))
    prim.vector_copy(dst, src)
    assert torch.equal(dst, src)


@pytest.mark.parametrize("dtype_name,cpp_type,elements_per_vector", [("uint8", "uint8_t", 16), ("float16", "fp16_t", 8), ("float32", "fp32_t", 4)])
def test_vector_store_through_shared_memory(prim, dtype_name, cpp_type, elements_per_vector):
    """AlignedVector::store packs 1-, 2- and 4-byte elements into one 16-byte store, to global and to
    shared memory alike (the kernel goes global -> shared -> global)."""
    import torch

    dtype = getattr(torch, dtype_name)
    n = 4096 * elements_per_vector + 3 * elements_per_vector
    if dtype == torch.uint8:
        src = torch.randint(0, 256, (n,), dtype=dtype, device="cuda")
        dst = torch.full_like(src, 0xA5)
    else:
        src = torch.randn(n, device="cuda").to(dtype)
        dst = torch.full_like(src, float("nan"))
    getattr(prim, f"vector_copy_via_shared_{cpp_type}")(dst, src)
    assert torch.equal(dst, src)
    with pytest.raises(ValueError, match="multiple of"):
        prim.vector_copy_via_shared_fp32_t(torch.empty(6, device="cuda"), torch.empty(6, device="cuda"))


def test_launch_rules(prim):
    """The device guard, the PDL capability, the per-arch policy and the operand-width rule, from C++."""
    import torch

    out = torch.zeros(16, dtype=torch.int64)
    prim.launch_rules(out)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    assert out[0] == props.major * 10 + props.minor
    assert out[1] == (props.major >= 9), "PDL where the GPU has it (sm_90+)"
    assert out[2] == 1, "the guard leaves the current device current"
    assert out[3] == (768 if props.max_threads_per_multi_processor == 1536 else 1024), "two one-row CTAs fill an SM"
    assert out[4:8].tolist() == [2048, 1536, 768, 100]
    assert out[8:13].tolist() == [8, 1, 1, 1, 1]
    assert out[13:16].tolist() == [4, 16, 1024]


def test_runtime_queries(prim):
    import torch

    out = torch.zeros(5, dtype=torch.int64)
    prim.runtime_info(out)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    assert out[0] == props.multi_processor_count
    assert out[1] == props.major
    assert out[2] == cuda_runtime_version()
    assert out[3] == props.shared_memory_per_block_optin
    assert 1 <= out[4] <= 8
