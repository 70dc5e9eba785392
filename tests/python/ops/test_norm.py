"""The RMSNorm family on the GPU against a float64 torch reference."""

import pytest
from kernel_profile import launched_kernels

pytestmark = pytest.mark.gpu

TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-5)}
HIDDEN = [1, 32, 64, 128, 1000, 4096, 5120, 8192, 16384, 65536]
GRID = [(t, h) for h in HIDDEN for t in (1, 3, 128)] + [(4097, 1000), (4097, 4096), (32768, 4096)]


def _torch():
    import torch

    return torch


def _dtype(name):
    return getattr(_torch(), name)


def _reference(x, w, eps):
    x64 = x.double()
    return (x64 * (x64.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w.double()).to(x.dtype)


def _assert_close(actual, expected, dtype_name):
    rtol, atol = TOL[dtype_name]
    torch = _torch()
    assert not torch.isnan(actual).any(), "output has unwritten (NaN-poisoned) or NaN elements"
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("tokens,hidden", GRID)
def test_rmsnorm(dtype_name, tokens, hidden):
    torch = _torch()
    from jitkern.ops import rmsnorm

    dtype = _dtype(dtype_name)
    x = torch.randn(tokens, hidden, dtype=dtype, device="cuda")
    w = torch.randn(hidden, dtype=dtype, device="cuda")
    out = torch.full_like(x, float("nan"))
    rmsnorm(x, w, out, eps=1e-6)
    _assert_close(out, _reference(x, w, 1e-6), dtype_name)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("hidden", [1024, 1536, 2560, 3584, 4096, 7168, 8192])
@pytest.mark.parametrize("pad", [0, 8])
def test_rmsnorm_few_rows_equal_the_same_rows_among_many(dtype_name, hidden, pad):
    """A few rows of a width that has its own kernel (impl/norm_launch.cuh, kNormStaticWidths) give the bits
    those rows get among 1024 (the kernel for many rows, which adds each row's squares in the same order),
    rows contiguous or strided; rmsnorm_quant_fp8's bit-equality with rmsnorm relies on it."""
    torch = _torch()
    from jitkern.ops import rmsnorm

    dtype = _dtype(dtype_name)
    x = torch.randn(1024, hidden + pad, dtype=dtype, device="cuda")[:, :hidden]
    w = torch.randn(hidden, dtype=dtype, device="cuda")
    many = rmsnorm(x, w, eps=1e-6)
    _assert_close(many, _reference(x, w, 1e-6), dtype_name)
    for n in (1, 16, 17, 100):
        few = rmsnorm(x[:n], w, eps=1e-6)
        assert torch.equal(few, many[:n]), f"{n} rows"


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("pad", [1, 8])
@pytest.mark.parametrize("tokens,hidden", [(3, 4096), (129, 1000), (7, 65536)])
def test_rmsnorm_strided_rows_and_in_place(dtype_name, pad, tokens, hidden):
    torch = _torch()
    from jitkern.ops import rmsnorm

    dtype = _dtype(dtype_name)
    big = torch.randn(tokens, hidden + pad, dtype=dtype, device="cuda")
    x = big[:, pad:]  # strided rows; pad=1 is also misaligned (scalar path)
    w = torch.randn(hidden, dtype=dtype, device="cuda")
    expected = _reference(x, w, 1e-5)
    out_big = torch.full((tokens, hidden + 3), float("nan"), dtype=dtype, device="cuda")
    rmsnorm(x, w, out_big[:, :hidden], eps=1e-5)
    _assert_close(out_big[:, :hidden], expected, dtype_name)
    assert torch.isnan(out_big[:, hidden:]).all(), "wrote outside the output rows"
    rmsnorm(x, w, x, eps=1e-5)  # in place
    _assert_close(x, expected, dtype_name)


def test_rmsnorm_broadcast_input_is_only_read():
    """An input whose rows overlap (one row expanded: row stride 0) is accepted where it is only read, and refused
    where it is written (fused_add_rmsnorm writes the normalised rows into input)."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm, rmsnorm

    x = torch.randn(1, 4096, dtype=torch.bfloat16, device="cuda").expand(9, 4096)
    w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
    _assert_close(rmsnorm(x, w, eps=1e-5), _reference(x.contiguous(), w, 1e-5), "bfloat16")
    residual = torch.randn(9, 4096, dtype=torch.bfloat16, device="cuda")
    before = residual.clone()
    with pytest.raises(ValueError, match="input rows overlap: row stride 0 is smaller than the row width 4096"):
        fused_add_rmsnorm(x, residual, w)
    assert torch.equal(residual, before), "a refused call wrote"


def test_rmsnorm_of_a_dense_permuted_input():
    """Heads as attention hands them to a per-head norm (q.view(B, S, H, D).transpose(1, 2): dense, not contiguous):
    the allocated output is contiguous, eager and compiled alike."""
    torch = _torch()
    from jitkern.ops import rmsnorm

    x = torch.randn(2, 5, 4, 128, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    w = torch.randn(128, dtype=torch.bfloat16, device="cuda")
    out = rmsnorm(x, w, eps=1e-6)
    assert out.shape == x.shape and out.is_contiguous()
    _assert_close(out, _reference(x, w, 1e-6), "bfloat16")
    compiled = torch.compile(lambda a: rmsnorm(a, w, eps=1e-6), fullgraph=True)(x)
    assert compiled.is_contiguous() and torch.equal(compiled, out)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("tokens,hidden", [(1, 4096), (3, 1000), (128, 5120), (4097, 4096), (2, 65536)])
def test_fused_add_rmsnorm(dtype_name, tokens, hidden):
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm

    dtype = _dtype(dtype_name)
    x = torch.randn(tokens, hidden, dtype=dtype, device="cuda")
    r = torch.randn(tokens, hidden, dtype=dtype, device="cuda")
    w = torch.randn(hidden, dtype=dtype, device="cuda")
    new_r = (x.float() + r.float()).to(dtype)
    expected = _reference(new_r, w, 1e-6)
    fused_add_rmsnorm(x, r, w, eps=1e-6)
    torch.testing.assert_close(r, new_r, rtol=0, atol=0)
    _assert_close(x, expected, dtype_name)


def _free_gpu_bytes():
    return _torch().cuda.mem_get_info()[0]


def test_rows_beyond_one_launch():
    """More than 2^30 rows: the device indexes rows with 32 bits and the host splits the launch."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm, rmsnorm

    rows = (1 << 30) + 1000
    need = 4 * rows * 2 + (3 << 30)  # two fp16 tensors of each op at a time, plus fp32 reference chunks
    if _free_gpu_bytes() < need:
        pytest.skip(f"NOT RUN: needs {need / 2**30:.1f} GiB of free GPU memory")
    eps, chunk = 1e-6, 1 << 27
    w = torch.tensor([1.5], dtype=torch.float16, device="cuda")

    def check(actual, source):  # hidden size 1: y = x * rsqrt(x^2 + eps) * w, compared chunk by chunk
        for start in range(0, rows, chunk):
            x32 = source[start : start + chunk].float()
            expected = (x32 * torch.rsqrt(x32 * x32 + eps) * 1.5).half()
            _assert_close(actual[start : start + chunk], expected, "float16")

    x = torch.randn(rows, 1, dtype=torch.float16, device="cuda")
    out = torch.full_like(x, float("nan"))
    rmsnorm(x, w, out, eps=eps)
    check(out, x)
    del out
    r = torch.randn(rows, 1, dtype=torch.float16, device="cuda")
    summed = torch.empty_like(r)
    for start in range(0, rows, chunk):
        summed[start : start + chunk] = (x[start : start + chunk].float() + r[start : start + chunk].float()).half()
    fused_add_rmsnorm(x, r, w, eps=eps)
    assert torch.equal(r, summed), "residual rows beyond the first launch were not updated"
    check(x, summed)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("tokens", [1, 3, 256, 4097])
@pytest.mark.parametrize("head_dim", [64, 128, 256, 100])
@pytest.mark.parametrize("layout", ["3-D views", "2-D slices"])
def test_qknorm_per_head_on_fused_qkv(dtype_name, tokens, head_dim, layout):
    torch = _torch()
    from jitkern.ops import fused_inplace_qknorm

    dtype = _dtype(dtype_name)
    hq, hk = 32, 8
    qkv = torch.randn(tokens, (hq + 2 * hk) * head_dim, dtype=dtype, device="cuda")
    q = qkv[:, : hq * head_dim].view(tokens, hq, head_dim)  # strided: a slice of the fused projection
    k = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(tokens, hk, head_dim)
    v_before = qkv[:, (hq + hk) * head_dim :].clone()
    qw = torch.randn(head_dim, dtype=dtype, device="cuda")
    kw = torch.randn(head_dim, dtype=dtype, device="cuda")
    eq, ek = _reference(q, qw, 1e-6), _reference(k, kw, 1e-6)
    if layout == "3-D views":
        fused_inplace_qknorm(q, k, qw, kw, eps=1e-6)
    else:  # the 2-D column slices themselves, heads located by head_dim in C++
        fused_inplace_qknorm(qkv[:, : hq * head_dim], qkv[:, hq * head_dim : (hq + hk) * head_dim], qw, kw, eps=1e-6,
                             head_dim=head_dim)
    _assert_close(q, eq, dtype_name)
    _assert_close(k, ek, dtype_name)
    assert torch.equal(qkv[:, (hq + hk) * head_dim :], v_before), "v must be untouched"


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
def test_qknorm_separate_tensors_odd_head_counts_many_tokens(dtype_name):
    """q and k in separate buffers with different strides and head counts that are not powers of two:
    enough rows for the many-row launch, which takes rows token by token across both tensors."""
    torch = _torch()
    from jitkern.ops import fused_inplace_qknorm

    dtype = _dtype(dtype_name)
    tokens, hq, hk, d = 30000, 5, 3, 64
    q = torch.randn(tokens, hq, d, dtype=dtype, device="cuda")
    k_buffer = torch.randn(tokens, hk + 1, d, dtype=dtype, device="cuda")
    k = k_buffer[:, 1:]  # token stride (hk + 1) * d, offset by one head
    first_head = k_buffer[:, 0].clone()
    qw, kw = torch.randn(d, dtype=dtype, device="cuda"), torch.randn(d, dtype=dtype, device="cuda")
    eq, ek = _reference(q, qw, 1e-6), _reference(k, kw, 1e-6)
    fused_inplace_qknorm(q, k, qw, kw, eps=1e-6)
    _assert_close(q, eq, dtype_name)
    _assert_close(k, ek, dtype_name)
    assert torch.equal(k_buffer[:, 0], first_head), "the head outside k must be untouched"


@pytest.mark.parametrize("dtype_name,head_dim", [("bfloat16", 128), ("bfloat16", 64), ("float16", 32), ("float32", 128), ("bfloat16", 96)])
def test_many_rows_in_place_give_the_few_rows_bits(dtype_name, head_dim):
    """Many rows normalised in place (qknorm at 8192 tokens, rmsnorm of narrow rows into its input) take
    their own launch (a group of lanes two rows, the rows found after the PDL wait); a token at a time
    takes the few-rows launch. Both give the same bits."""
    torch = _torch()
    from jitkern.ops import fused_inplace_qknorm, rmsnorm

    dtype = _dtype(dtype_name)
    tokens, hq, hk = 8192, 32, 8
    q = torch.randn(tokens, hq, head_dim, dtype=dtype, device="cuda")
    k = torch.randn(tokens, hk + 1, head_dim, dtype=dtype, device="cuda")[:, 1:]  # strided: the many-row launch's second problem
    qw, kw = torch.randn(head_dim, dtype=dtype, device="cuda"), torch.randn(head_dim, dtype=dtype, device="cuda")
    q1, k1 = q.clone(), k.clone()
    eq, ek = _reference(q, qw, 1e-6), _reference(k, kw, 1e-6)
    fused_inplace_qknorm(q, k, qw, kw, eps=1e-6)
    for t in range(0, tokens, 64):  # 64 tokens: 2560 rows, the few-rows launch
        fused_inplace_qknorm(q1[t : t + 64], k1[t : t + 64], qw, kw, eps=1e-6)
    assert torch.equal(q, q1) and torch.equal(k, k1)
    _assert_close(q, eq, dtype_name)
    _assert_close(k, ek, dtype_name)
    x = torch.randn(40 * tokens, head_dim, dtype=dtype, device="cuda")
    x1 = x.clone()
    rmsnorm(x, qw, x, eps=1e-6)  # in place
    for t in range(0, x.shape[0], 2048):
        rmsnorm(x1[t : t + 2048], qw, x1[t : t + 2048], eps=1e-6)
    assert torch.equal(x, x1)


def test_qknorm_head_dim_keyword_with_2d_inputs():
    torch = _torch()
    from jitkern.ops import fused_inplace_qknorm

    q = torch.randn(5, 4 * 128, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(5, 2 * 128, dtype=torch.bfloat16, device="cuda")
    qw, kw = torch.randn(128, dtype=torch.bfloat16, device="cuda"), torch.randn(128, dtype=torch.bfloat16, device="cuda")
    eq = _reference(q.view(5, 4, 128), qw, 1e-6).view(5, -1)
    ek = _reference(k.view(5, 2, 128), kw, 1e-6).view(5, -1)
    fused_inplace_qknorm(q, k, qw, kw, head_dim=128)
    _assert_close(q, eq, "bfloat16")
    _assert_close(k, ek, "bfloat16")
    with pytest.raises(ValueError, match=r"head_dim must be positive unless q and k are both \[N, H, D\]; got q with 2 and k with 2 dimensions"):
        fused_inplace_qknorm(q, k, qw, kw)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
# (20000, 128, 128): narrow rows of two problems, enough for the many-row, token-major launch.
# Different widths: (1, 4096, 1024), (5, 1000, 520) and, with more than 128 SMs, (256, 4096, 1024) take one launch for both
# (launch_norm_two_widths); (4097, 2048, 512) has too many rows for it, (2, 1000, 40) a narrow k and
# (5, 1001, 777) no 16-byte vectors, so those take one launch per width.
@pytest.mark.parametrize(
    "tokens,wq,wk",
    [(1, 4096, 1024), (3, 4096, 4096), (256, 4096, 1024), (5, 1000, 520), (4097, 2048, 512), (2, 1000, 40), (5, 1001, 777),
     (20000, 128, 128)],
)
def test_qknorm_across_heads(dtype_name, tokens, wq, wk):
    torch = _torch()
    from jitkern.ops import fused_inplace_qknorm_across_heads

    dtype = _dtype(dtype_name)
    q = torch.randn(tokens, wq, dtype=dtype, device="cuda")
    k = torch.randn(tokens, wk, dtype=dtype, device="cuda")
    qw, kw = torch.randn(wq, dtype=dtype, device="cuda"), torch.randn(wk, dtype=dtype, device="cuda")
    eq, ek = _reference(q, qw, 1e-6), _reference(k, kw, 1e-6)
    fused_inplace_qknorm_across_heads(q, k, qw, kw)
    _assert_close(q, eq, dtype_name)
    _assert_close(k, ek, dtype_name)


@pytest.mark.parametrize("tokens,wq,wk,launches", [(1, 4096, 1024, 1), (100, 4096, 1024, 1), (4097, 2048, 512, 2),
                                                   (5, 1001, 777, 2)])
def test_qknorm_across_heads_launch_count(tokens, wq, wk, launches):
    """q and k of different widths share one launch on small grids where both can (see above)."""
    torch = _torch()
    from jitkern.ops import fused_inplace_qknorm_across_heads

    q = torch.randn(tokens, wq, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(tokens, wk, dtype=torch.bfloat16, device="cuda")
    qw, kw = torch.randn(wq, dtype=torch.bfloat16, device="cuda"), torch.randn(wk, dtype=torch.bfloat16, device="cuda")
    names = launched_kernels(lambda: fused_inplace_qknorm_across_heads(q, k, qw, kw), "norm_wide_kernel", "norm_narrow_kernel")
    assert len(names) == launches, names


@pytest.mark.parametrize("path", ["first call", "hot path"])
def test_bad_inputs_rejected(path):
    """Bad arguments raise TypeError (dtype, kind) or ValueError (shape, stride, device, value) naming
    them, before any launch, whether the op's function is not looked up yet or already is. The checks
    are the C++ entry points' own; Python only picks the instantiation by the input's dtype."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, norm, rmsnorm

    x = torch.randn(4, 64, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(64, dtype=torch.bfloat16, device="cuda")
    if path == "hot path":
        rmsnorm(x, w)
        fused_add_rmsnorm(x.clone(), x.clone(), w)
        fused_inplace_qknorm(x.clone().view(4, 1, 64), x.clone().view(4, 1, 64), w, w)
        fused_inplace_qknorm_across_heads(x.clone(), x.clone(), w, w)
        assert {op for op, _ in norm._FUNCTIONS} >= {"rmsnorm", "fused_add_rmsnorm", "qknorm", "qknorm_across_heads"}
    else:
        norm._FUNCTIONS.clear()

    def rejects(error, match, fn, *args, **kwargs):
        with pytest.raises(error, match=match) as info:
            fn(*args, **kwargs)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
        assert info.value.__context__ is None, "raised while handling another error"

    poisoned = torch.full_like(x, float("nan"))
    rejects(TypeError, "weight: DType mismatch: float32", rmsnorm, x, w.float(), poisoned)
    assert torch.isnan(poisoned).all(), "a rejected call wrote its output"
    rejects(ValueError, r"weight: Size mismatch for shape#0\('hidden_size'\): expected 64 \(resolved earlier\) but got 32", rmsnorm, x, w[:32])
    rejects(ValueError, r"input: Device mismatch: cpu:0", rmsnorm, x.cpu(), w)
    rejects(TypeError, "input must be a torch.Tensor, got list", rmsnorm, x.tolist(), w)
    rejects(TypeError, "argument 'weight' \\(the 2nd\\) must be a tensor, got a list", rmsnorm, x, w.tolist())
    rejects(TypeError, "input must be float16, bfloat16 or float32, got torch.float64", rmsnorm, x.to(torch.float64), w)
    rejects(ValueError, "input: Stride mismatch for stride#1", rmsnorm, x.t(), torch.randn(4, dtype=torch.bfloat16, device="cuda"))
    rejects(ValueError, "eps must be a finite non-negative", rmsnorm, x, w, eps=-1.0)
    rejects(TypeError, "argument 'eps' \\(the 4th\\) must be a float, got bool True", rmsnorm, x, w, eps=True)
    rejects(TypeError, "argument 'eps' \\(the 4th\\) must be a float, got a str", rmsnorm, x, w, eps="1e-6")
    rejects(ValueError, "input must have at least 1 dimension", rmsnorm, x[0, 0], w)
    rejects(ValueError, "output of shape \\(2, 2, 64\\) .* cannot be seen as rows", rmsnorm, x.view(2, 2, 64), w,
            poisoned.view(2, 2, 64).transpose(0, 1))
    rejects(ValueError, r"output: Size mismatch for shape#0\('num_tokens'\)", rmsnorm, x, w, poisoned[:2])
    rejects(ValueError, "output: Device mismatch", rmsnorm, x, w, poisoned.cpu())
    residual = x.clone()
    rejects(ValueError, r"residual: Size mismatch for shape#0\('num_tokens'\)", fused_add_rmsnorm, x, residual[:2], w)
    rejects(TypeError, "residual: DType mismatch: float16", fused_add_rmsnorm, x, residual.half(), w)
    assert torch.equal(residual, x), "a rejected fused_add_rmsnorm changed the residual"
    rejects(ValueError, r"k: Size mismatch for shape#0\('num_tokens'\)", fused_inplace_qknorm, x.view(4, 1, 64),
            x[:2].view(2, 1, 64).clone(), w, w)
    rejects(ValueError, "head_dim must be positive", fused_inplace_qknorm, x, x.clone(), w, w, head_dim=-64)
    rejects(TypeError, "argument 'head_dim' \\(the 6th\\) must be an integer", fused_inplace_qknorm, x, x.clone(), w, w, head_dim=64.0)
    rejects(TypeError, "argument 'head_dim'", fused_inplace_qknorm, x, x.clone(), w, w, head_dim=True)
    rejects(ValueError, r"k: Size mismatch for shape#0\('num_tokens'\)", fused_inplace_qknorm_across_heads, x, x[:2].clone(), w, w)
    rejects(ValueError, r"k_weight: Size mismatch for shape#0\('k_width'\)", fused_inplace_qknorm_across_heads, x, x.clone(), w, w[:8])
    rejects(TypeError, r"q_weight: DType mismatch", fused_inplace_qknorm_across_heads, x, x.clone(), w.half(), w)
    rejects(TypeError, r"rmsnorm\(input, weight, output, eps\) takes 4 arguments but 3 were given", norm._norm_module(torch.bfloat16).rmsnorm,
            x, w, x)


def test_cpp_entry_points_validate_before_launch():
    """The exported functions check on their own (callers may bypass the Python wrappers)."""
    torch = _torch()
    from jitkern.ops.norm import _norm_module

    m = _norm_module(torch.bfloat16)
    x = torch.randn(4, 64, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=r"Size mismatch for shape#0\('hidden_size'\): expected 64"):
        m.rmsnorm(x, w[:32], x, 1e-6)
    with pytest.raises(TypeError, match=r"DType mismatch: float32"):
        m.rmsnorm(x, w, x.float(), 1e-6)
    overlapping = torch.empty(200, dtype=torch.bfloat16, device="cuda").as_strided((4, 64), (32, 1))
    with pytest.raises(ValueError, match="output rows overlap: row stride 32 is smaller than the row width 64"):
        m.rmsnorm(x, w, overlapping, 1e-6)
    with pytest.raises(ValueError, match="eps must be a finite non-negative number"):
        m.rmsnorm(x, w, x, float("nan"))
    q2 = torch.randn(4, 3 * 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="q width 192 is not a multiple of head_dim 128"):
        m.qknorm(q2, q2.clone(), w, w, 1e-6, 128)
    with pytest.raises(ValueError, match="head_dim must be positive, or 0 when q and k are"):
        m.qknorm(q2, q2.clone(), w, w, 1e-6, -1)
    with pytest.raises(ValueError, match=r"head_dim must be positive unless q and k are both \[N, H, D\]"):
        m.qknorm(q2, q2.view(4, 3, 64).clone(), w, w, 1e-6, 0)  # 2-D q without head_dim
    with pytest.raises(ValueError, match=r"k: Dimension mismatch: expected 3 dimensions but got 4"):
        m.qknorm(q2.view(4, 3, 64), q2.view(4, 3, 64, 1).clone(), w, w, 1e-6, 64)
    overlapping = torch.empty(400, dtype=torch.bfloat16, device="cuda").as_strided((4, 128), (64, 1))
    with pytest.raises(ValueError, match="q rows overlap"):
        m.qknorm(overlapping, q2.view(4, 3, 64).clone(), w, w, 1e-6, 64)
    heads = torch.empty(800, dtype=torch.bfloat16, device="cuda").as_strided((4, 3, 64), (192, 32, 1))  # heads 32 apart, 64 wide
    with pytest.raises(ValueError, match=r"q overlaps itself: its dimension 1 \(3 elements, stride 32\)"):
        m.qknorm(heads, q2.view(4, 3, 64).clone(), w, w, 1e-6, 64)
    with pytest.raises(ValueError, match="q and k must not overlap"):  # each head would be normalised twice at once
        m.qknorm(q2.view(4, 3, 64), q2.view(4, 3, 64), w, w, 1e-6, 64)
    qk = torch.randn(4, 6, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="q and k must not overlap: they share memory"):  # k's first head is q's last
        m.qknorm(qk[:, :3], qk[:, 2:5], w, w, 1e-6, 64)
    m.qknorm(qk[:, 0::2], qk[:, 1::2], w, w, 1e-6, 64)  # heads that interleave share no element


def test_second_gpu_while_the_first_is_current():
    """Tensors on cuda:1 with cuda:0 current: the kernels run on the tensors' device, on that device's
    current stream (also inside a CUDA graph captured there), and leave the current device alone;
    tensors on different devices are rejected."""
    torch = _torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("NOT RUN: needs two CUDA GPUs")
    from jitkern.ops import fused_add_rmsnorm, fused_inplace_qknorm, rmsnorm

    torch.cuda.set_device(0)
    dev = torch.device("cuda:1")
    x = torch.randn(4097, 4096, dtype=torch.bfloat16, device=dev)
    w = torch.randn(4096, dtype=torch.bfloat16, device=dev)
    _assert_close(rmsnorm(x, w), _reference(x, w, 1e-6), "bfloat16")
    r = torch.randn_like(x)
    new_r = r + x
    fused_add_rmsnorm(x, r, w)
    _assert_close(x, _reference(new_r, w, 1e-6), "bfloat16")
    qkv = torch.randn(300, 48 * 128, dtype=torch.bfloat16, device=dev)
    qw, kw = torch.randn(128, dtype=torch.bfloat16, device=dev), torch.randn(128, dtype=torch.bfloat16, device=dev)
    q, k = qkv[:, : 32 * 128], qkv[:, 32 * 128 : 40 * 128]
    eq, ek = _reference(q.view(300, 32, 128), qw, 1e-6), _reference(k.view(300, 8, 128), kw, 1e-6)
    fused_inplace_qknorm(q, k, qw, kw, head_dim=128)
    _assert_close(q.view(300, 32, 128), eq, "bfloat16")
    _assert_close(k.view(300, 8, 128), ek, "bfloat16")
    assert torch.cuda.current_device() == 0, "a launch on cuda:1 changed the current device"

    stream = torch.cuda.Stream(device=dev)
    small = torch.randn(64, 4096, dtype=torch.bfloat16, device=dev)
    out = torch.full_like(small, float("nan"))
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        rmsnorm(small, w, out)  # warm-up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            rmsnorm(small, w, out)
    out.fill_(float("nan"))
    small.copy_(torch.randn_like(small))
    graph.replay()
    torch.cuda.synchronize(dev)
    _assert_close(out, _reference(small, w, 1e-6), "bfloat16")

    with pytest.raises(ValueError, match=r"weight: Device mismatch: expected cuda:1 \(resolved earlier\) but got cuda:0"):
        rmsnorm(x, w.to("cuda:0"))
    with pytest.raises(ValueError, match=r"residual: Device mismatch: expected cuda:1 \(resolved earlier\) but got cuda:0"):
        fused_add_rmsnorm(x, r.to("cuda:0"), w)


@pytest.mark.parametrize("shape", [(64,), (5, 64), (2, 3, 64), (2, 2, 3, 64)])
def test_every_op_takes_the_shapes_models_pass(shape):
    """[..., hidden] (and [..., heads, head_dim] for the per-head norm): leading dimensions are flattened,
    outputs keep the input's shape, in-place ops write through to the caller's tensors."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm

    x = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(shape[-1], dtype=torch.bfloat16, device="cuda")
    out = rmsnorm(x, w)
    assert out.shape == x.shape
    _assert_close(out, _reference(x, w, 1e-6), "bfloat16")
    given = torch.full_like(x, float("nan"))
    assert rmsnorm(x, w, given) is given
    _assert_close(given, _reference(x, w, 1e-6), "bfloat16")

    inp, residual = x.clone(), torch.randn_like(x)
    expected_residual = (residual.double() + x.double()).to(x.dtype)
    fused_add_rmsnorm(inp, residual, w)
    torch.testing.assert_close(residual, expected_residual, rtol=0, atol=0)
    _assert_close(inp, _reference(expected_residual, w, 1e-6), "bfloat16")

    q, k = x.clone(), x.clone()[..., :32].contiguous()
    fused_inplace_qknorm_across_heads(q, k, w, w[:32])
    _assert_close(q, _reference(x, w, 1e-6), "bfloat16")
    _assert_close(k, _reference(x[..., :32], w[:32], 1e-6), "bfloat16")

    if len(shape) >= 3:  # [..., heads, head_dim]
        q, k = x.clone(), x.clone()
        fused_inplace_qknorm(q, k, w, w)
        _assert_close(q, _reference(x, w, 1e-6), "bfloat16")
        _assert_close(k, _reference(x, w, 1e-6), "bfloat16")
