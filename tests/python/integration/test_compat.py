"""The reference framework's kernel-author interface on jitkern: the export glue's expression forms
(CPU), kernels written in the reference's style against <sgl_kernel/...> compiled for sm_90a (CPU, needs
nvcc) and run against torch (GPU), and the jitkern.compat Python names."""

import shutil

import pytest

from conftest import KERNELS, cuda_runtime_version
import jitkern

COMPAT = KERNELS / "compat"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")


def test_wrappers_take_any_expression_naming_one_function(cache_dir):
    m = jitkern.load_jit("export_forms", cpp_files=[str(COMPAT / "export_forms_cpu.h")], cpp_wrappers=[
        ("launch_one", "&Stepper<5>::run_one"),  # leading &, as the reference's Python files write it
        ("static_member", "Stepper<7>::run_one"),
        ("plain", "negate"),
        ("plain_address", "&negate"),
        ("template_id", "times<3>"),
        ("lambda_", "[](int64_t a, int64_t b) { return a * 10 + b; }"),
    ])
    assert (m.launch_one(1), m.static_member(1), m.plain(4), m.plain_address(-4), m.template_id(5), m.lambda_(4, 2)) == (6, 8, -4, 4, 15, 42)
    with pytest.raises(TypeError, match=r"lambda_\(\) takes 2 arguments but 1 was given"):
        m.lambda_(1)


# One module of every reference-style test kernel (one file per piece of the interface), exported the
# way the reference's Python files write their wrappers.
COMPAT_FILES = ["add_constant.cuh", "symbols.cuh", "pdl_launch.cuh", "vec_copy.cuh", "tile_copy.cuh", "reductions.cuh",
                "math_types.cuh", "rmsnorm.cuh", "runtime_query.cuh"]
COMPAT_WRAPPERS = [("add_constant", "compat_add_constant<5>"), ("symbols", "compat_symbols"), ("panic", "&compat_panic"), ("root_cause", "compat_root_cause"),
                   ("pdl_pair", "compat_pdl_pair<true>"), ("plain_pair", "compat_pdl_pair<false>"),
                   ("vec_add_one_fp16", "compat_vec_add_one_run<fp16_t, 8>"), ("vec_add_one_fp32", "compat_vec_add_one_run<fp32_t, 4>"),
                   ("tile_scale", "compat_tile_scale_run"), ("row_reductions", "compat_row_reductions_run"), ("runtime", "compat_runtime")]
COMPAT_WRAPPERS += [(f"math_{t}", f"compat_math_run<{t}>") for t in ("fp32_t", "fp16_t", "bf16_t")]
RMSNORM_CASES = [("fp16_t", 128), ("bf16_t", 256), ("fp32_t", 64), ("bf16_t", 1024), ("fp32_t", 4096)]
COMPAT_WRAPPERS += [(f"rmsnorm_{t}_{d}", f"compat_rmsnorm<{t}, {d}>") for t, d in RMSNORM_CASES]


def compat_module():
    return jitkern.load_jit("compat_kernels", cuda_files=[str(COMPAT / f) for f in COMPAT_FILES], cuda_wrappers=COMPAT_WRAPPERS)


@needs_nvcc
def test_reference_style_kernels_compile(cache_dir, monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    spec = jitkern.JitSpec("compat_kernels", cuda_files=[str(COMPAT / f) for f in COMPAT_FILES], cuda_wrappers=COMPAT_WRAPPERS)
    data = open(spec.build(), "rb").read()
    missing = [n for n, _ in COMPAT_WRAPPERS if f"__tvm_ffi_{n}\0".encode() not in data]
    assert missing == []


@needs_nvcc
def test_sgl_kernel_vec_and_jitkern_vec_refuse_to_meet(cache_dir, monkeypatch, tmp_path):
    """The two device::AlignedVector shapes in one translation unit stop at a message naming both headers."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    both = tmp_path / "both.cuh"
    both.write_text("#include <jitkern/vec.cuh>\n#include <sgl_kernel/vec.cuh>\ninline void f() {}\n")
    with pytest.raises(jitkern.BuildError, match=r"define device::AlignedVector differently"):
        jitkern.JitSpec("compat_both_vecs", cuda_files=[str(both)], cuda_wrappers=[("f", "f")]).build()


@needs_nvcc
def test_host_checks_run_on_cpu_tensors(cache_dir, monkeypatch):
    """The symbols' reference members and Panic run without a GPU (host code on numpy arrays)."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    m = compat_module()
    x, y = np.zeros((3, 2), np.float32), np.zeros((3, 5), np.float32)
    assert m.symbols(x, y) == (1 << 10) - 1
    with pytest.raises(ValueError, match=r"y: size mismatch for rows at dim 0: expected 3 but got 4"):
        m.symbols(x, np.zeros((4, 5), np.float32))
    with pytest.raises(RuntimeError, match=r"compat panic with code 7"):
        m.panic(7)
    assert (m.root_cause(7), m.root_cause(8)) == (True, False)



@pytest.mark.tvm_ffi
@pytest.mark.parametrize("flags,lean", [([], True), (["-DTVM_HEADER_FIRST"], False), (["-DTVM_OPTIONAL_FIRST"], False),
                                        (["-DSGL_KERNEL_TVM_FFI_TENSOR"], False)])
def test_tensor_view_is_lean_unless_tvm_ffi_is_asked_for(cache_dir, flags, lean):
    """<sgl_kernel/tensor.h> gives jitkern's TensorView/Optional unless tvm-ffi's tensor or optional header
    came first or SGL_KERNEL_TVM_FFI_TENSOR is defined; tvm-ffi's optional and dtype headers after it add
    nothing; either way the export glue takes tensors and None."""
    np = pytest.importorskip("numpy")
    m = jitkern.load_jit("compat_view_modes", *[f.lstrip("-D") for f in flags], cpp_files=[str(COMPAT / "tensor_view_modes.h")],
                         cpp_wrappers=[("view_kind", "view_kind")], extra_cflags=flags)
    x = np.zeros((2, 3), np.float32)
    assert (m.view_kind(x, None), m.view_kind(x, np.zeros(4, np.int32))) == (1000 * lean + 20, 1000 * lean + 21)

@pytest.mark.gpu
def test_add_constant_and_pdl_pair():
    import torch

    m = compat_module()
    src = torch.arange(-500, 500, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    m.add_constant(dst, src)
    assert torch.equal(dst, src + 5)
    with pytest.raises(TypeError):
        m.add_constant(dst.float(), src.float())
    n = 300
    for f in (m.pdl_pair, m.plain_pair):
        buf = torch.full((2 * n,), -1.0, device="cuda")
        out = torch.empty(n, device="cuda")
        f(buf, out)
        assert torch.equal(out, 2 * torch.arange(n, 2 * n, device="cuda", dtype=torch.float32))


@pytest.mark.gpu
def test_vector_and_tile_copies():
    import torch

    m = compat_module()
    for f, dtype in ((m.vec_add_one_fp16, torch.float16), (m.vec_add_one_fp32, torch.float32)):
        src = torch.randn(8 * 1000, device="cuda").to(dtype)
        dst = torch.full_like(src, float("nan"))
        f(dst, src)
        torch.testing.assert_close(dst, (src.float() + 1).to(dtype))
    src = torch.randn(1001, device="cuda")
    for mode in (0, 1, 2):
        out = torch.full_like(src, float("nan"))
        m.tile_scale(out, src, 3.0, mode)
        torch.testing.assert_close(out, src * 3)


@pytest.mark.gpu
def test_reductions():
    import torch

    m = compat_module()
    x = torch.randn(7, 1000, device="cuda") - 5  # all negative rows are likely: min_value must not win
    out = torch.empty(7, 3, device="cuda")
    global_max = torch.full((1,), -float("inf"), device="cuda")
    m.row_reductions(out, global_max, x)
    torch.testing.assert_close(out[:, 0], x.sum(1), rtol=1e-4, atol=1e-3)
    warp0 = x[:, torch.arange(1000, device="cuda") % 256 < 32].amax(1)
    assert torch.equal(out[:, 1], warp0)
    assert torch.equal(out[:, 2], x.amax(1))
    assert torch.equal(global_max, x.amax().reshape(1))


@pytest.mark.gpu
@pytest.mark.parametrize("t", ["fp32_t", "fp16_t", "bf16_t"])
def test_math_and_types(t):
    import torch

    dtype = {"fp32_t": torch.float32, "fp16_t": torch.float16, "bf16_t": torch.bfloat16}[t]
    m = compat_module()
    x = torch.linspace(-3, 3, 301, device="cuda").to(dtype)
    out = torch.empty(301, 12, device="cuda")
    getattr(m, f"math_{t}")(out, x)
    xf = x.float()
    rd = lambda v: v.to(dtype).float()  # results that round through T
    expected = [rd(torch.maximum(xf, torch.ones_like(xf))), rd(torch.minimum(xf, torch.ones_like(xf))), rd(xf.abs()), rd(xf.abs().sqrt()),
                torch.rsqrt(xf.abs() + 1), torch.exp(xf) * 0.6931471805599453, torch.sin(xf) + torch.cos(xf),
                torch.full_like(xf, 1.4426950408889634), (xf * 1000).clamp(-448, 448).to(torch.float8_e4m3fn).float() / 448, xf + 2,
                rd(torch.maximum(xf.abs(), torch.ones_like(xf))), xf.to(torch.float8_e5m2).float()]
    for col, want in enumerate(expected):
        torch.testing.assert_close(out[:, col], want, rtol=2e-2 if col == 3 else 1e-5, atol=1e-5, msg=f"column {col}")


@pytest.mark.gpu
@pytest.mark.parametrize("t,dim", RMSNORM_CASES)
def test_rmsnorm_building_blocks(t, dim):
    import torch

    dtype = {"fp32_t": torch.float32, "fp16_t": torch.float16, "bf16_t": torch.bfloat16}[t]
    m = compat_module()
    x = torch.randn(37, dim, device="cuda").to(dtype)
    w = torch.randn(dim, device="cuda").to(dtype)
    out = torch.empty_like(x)
    getattr(m, f"rmsnorm_{t}_{dim}")(out, x, w, 1e-6)
    xf = x.float()
    want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), want.to(dtype).float(), rtol=tol, atol=tol)


@pytest.mark.gpu
def test_runtime_queries():
    import torch

    m = compat_module()
    props = torch.cuda.get_device_properties(0)
    assert m.runtime(0, 0) == props.multi_processor_count
    assert m.runtime(1, 0) == props.major
    assert m.runtime(2, 0) == cuda_runtime_version()
    assert m.runtime(3, 0) == props.max_threads_per_multi_processor // 1024  # an empty kernel: its threads alone limit it
    assert m.runtime(4, 0) == props.shared_memory_per_block  # one block: the kernel's dynamic limit, 48 KB unless raised


def test_compat_python_names(cache_dir, monkeypatch):
    """jitkern.compat: relative files resolve against set_csrc_dir, template arguments come from
    make_cpp_args, and kernel check failures are RuntimeError while staying ValueError/TypeError."""
    np = pytest.importorskip("numpy")
    from jitkern import compat

    monkeypatch.setattr(compat, "_csrc_dir", None)
    compat.set_csrc_dir(KERNELS)
    args = compat.make_cpp_args(3)
    assert isinstance(args, compat.CPPArgList) and str(args) == "3"
    m = compat.load_jit("compat_scale", *args, cpp_files=["scale_cpu.h"], cpp_wrappers=[("scale", f"scale<{args}>"), ("fails", "always_fails")])
    a = np.arange(4, dtype=np.float32)
    b = np.empty_like(a)
    m.scale(b, a)
    assert b.tolist() == [0, 3, 6, 9]
    with pytest.raises(RuntimeError, match=r"value must exceed 100, got 5") as e:
        m.fails(5)
    assert isinstance(e.value, ValueError)
    with pytest.raises(RuntimeError, match=r"scale\(\) takes 2 arguments") as e:
        m.scale(a)
    assert isinstance(e.value, TypeError)
    assert compat.cache_once is jitkern.cache_once
