"""The RMSNorm variants (Gemma's (1 + w), transformers' rounding order) on the GPU: against a float64
reference, and against the models' own float32 code (at most a few elements one rounding apart, where
rmsnorm's order differs from transformers' in many)."""

import pytest
from conftest import eagerly_then_from_a_graph
from kernel_profile import launched_kernels

TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-5)}
DTYPES = ["float16", "bfloat16", "float32"]
EPS = 1e-6


def _torch():
    import torch

    return torch


def _ops():
    import jitkern.ops

    return jitkern.ops


def _inputs(tokens, hidden, dtype, seed=0, stride_pad=0):
    """x [T, H] (a column slice of a wider buffer when stride_pad > 0) and a weight around 1."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(tokens, hidden + stride_pad, device="cuda", generator=g) * 2).to(dtype)[:, :hidden]
    w = (torch.rand(hidden, device="cuda", generator=g) - 0.5).to(dtype)
    return x, w


def _scale(x, eps=EPS):
    xd = x.double()
    return xd * (xd.pow(2).mean(-1, keepdim=True) + eps).rsqrt()


def _gemma_reference(x, w):
    return _scale(x) * (1 + w.double())


def _hf_reference(x, w):
    return w.double() * _scale(x).to(x.dtype).double()


def _close(actual, expected, dtype_name):
    torch = _torch()
    rtol, atol = TOL[dtype_name]
    assert not torch.isnan(actual).any()
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol)


CASES = [(dt, t, h, pad) for dt in DTYPES for t, h, pad in ((1, 4096, 0), (7, 128, 64), (300, 4096, 8), (33, 4097, 0), (5, 16384, 0), (64, 96, 0))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,tokens,hidden,pad", CASES)
def test_gemma_and_hf_norms(dtype_name, tokens, hidden, pad):
    """Every width path (narrow rows, wide rows, unaligned rows, rows wider than the registers), strided rows."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    x, w = _inputs(tokens, hidden, dtype, seed=tokens + hidden, stride_pad=pad)
    x0 = x.clone()
    _close(ops.gemma_rmsnorm(x, w, EPS), _gemma_reference(x, w), dtype_name)
    _close(ops.rmsnorm_hf(x, w, EPS), _hf_reference(x, w), dtype_name)
    assert torch.equal(x, x0)
    out = torch.full_like(x0, float("nan"))
    assert ops.gemma_rmsnorm(x, w, EPS, out=out) is out
    _close(out, _gemma_reference(x, w), dtype_name)
    r = torch.randn_like(x)
    x2, r2 = x.clone(), r.clone()
    ops.gemma_fused_add_rmsnorm(x2, r2, w, EPS)
    summed = (x.float() + r.float()).to(dtype)
    assert torch.equal(r2, summed), "residual: the sum rounded to the dtype"
    _close(x2, _gemma_reference(summed, w), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("tokens,hidden,kernel", [(1, 3584, "norm_static_kernel"), (2048, 3584, "norm_folded_kernel, 3584"),
                                                  (2048, 2560, "norm_static_kernel, 2560, 2"), (2048, 1536, "norm_static_kernel, 1536, 2"),
                                                  (2048, 4096, "norm_wide_kernel, 8, 4, false")])
def test_out_of_place_norms_take_rmsnorms_kernels(dtype_name, tokens, hidden, kernel):
    """gemma_rmsnorm and rmsnorm_hf take rmsnorm's launch (impl/norm_launch.cuh, launch_token_norm): its kernel built
    for the width below 4 rows an SM and, at any row count, for the widths whose vectors fill whole warps at two a
    thread but not at four (held at two: the general kernel spilled at four; from 4 rows an SM at 3584 folded onto
    half the threads), else the general one; the rows' bits are those of the same rows alone."""
    torch = _torch()
    ops = _ops()
    x, w = _inputs(tokens, hidden, getattr(torch, dtype_name), seed=hidden, stride_pad=8)
    for op, reference in ((ops.gemma_rmsnorm, _gemma_reference), (ops.rmsnorm_hf, _hf_reference)):
        names = [n for n in launched_kernels(lambda: op(x, w, EPS), "norm_") if "kernel" in n]
        assert len(names) == 1 and all(part in names[0] for part in kernel.split(", ", 1)), names
        out = op(x, w, EPS)
        _close(out, reference(x, w), dtype_name)
        assert torch.equal(op(x[:1], w, EPS), out[:1]), "a row alone and among many"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_rounding_orders_match_the_models_code(dtype_name):
    """Against the models' own float32 code: transformers' LlamaRMSNorm (rounds x * s to the dtype, then
    multiplies by the weight) and Gemma's (x * s * (1 + w) in float32, rounded once). The reductions add in
    another order, so a few elements may round the other way; rmsnorm, rounding once after the weight,
    differs from transformers' order in many more."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    x, w = _inputs(64, 4096, dtype, seed=3)
    xf = x.float()
    s = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    llama = w * s.to(dtype)
    gemma = (s * (1.0 + w.float())).to(dtype)

    def differs(a, b):
        return (a != b).float().mean().item()

    assert differs(ops.rmsnorm_hf(x, w, EPS), llama) < 0.005
    assert differs(ops.gemma_rmsnorm(x, w, EPS), gemma) < 0.005
    assert differs(ops.rmsnorm(x, w, eps=EPS), llama) > 0.05, "rmsnorm's own order is another one"


@pytest.mark.gpu
def test_leading_dimensions_nan_and_empty():
    torch = _torch()
    ops = _ops()
    x, w = _inputs(12, 256, torch.bfloat16, seed=5)
    x3 = x.view(3, 4, 256).clone()
    x3[1, 2, 7] = float("nan")
    out = ops.gemma_rmsnorm(x3, w, EPS)
    assert out.shape == (3, 4, 256) and torch.isnan(out[1, 2]).all()
    ok = torch.ones(3, 4, dtype=torch.bool, device="cuda")
    ok[1, 2] = False
    _close(out[ok], _gemma_reference(x3[ok], w), "bfloat16")
    r3 = torch.zeros_like(x3)
    ops.gemma_fused_add_rmsnorm(x3, r3, w, EPS)
    assert torch.isnan(r3[1, 2, 7]) and torch.isnan(x3[1, 2]).all() and not torch.isnan(x3[ok]).any()
    empty = torch.empty(0, 256, dtype=torch.bfloat16, device="cuda")
    assert ops.rmsnorm_hf(empty, w, EPS).shape == (0, 256)
    ops.gemma_fused_add_rmsnorm(empty, empty.clone(), w, EPS)


@pytest.mark.gpu
def test_dense_permuted_input():
    """Heads as attention hands them to a per-head norm (q.view(B, S, H, D).transpose(1, 2): dense, not contiguous):
    the allocated output is contiguous, eager and compiled alike."""
    torch = _torch()
    ops = _ops()
    x = (torch.randn(2, 5, 4, 128, device="cuda") * 2).to(torch.bfloat16).transpose(1, 2)
    w = _inputs(1, 128, torch.bfloat16, seed=2)[1]
    for op, reference in ((ops.gemma_rmsnorm, _gemma_reference), (ops.rmsnorm_hf, _hf_reference)):
        out = op(x, w, EPS)
        assert out.shape == x.shape and out.is_contiguous()
        _close(out, reference(x, w), "bfloat16")
        compiled = torch.compile(lambda a: op(a, w, EPS), fullgraph=True)(x)
        assert compiled.is_contiguous() and torch.equal(compiled, out)


@pytest.mark.gpu
def test_replays_in_a_cuda_graph_and_compiles():
    torch = _torch()
    ops = _ops()
    x = torch.empty(16, 2048, dtype=torch.bfloat16, device="cuda")
    r = torch.empty_like(x)
    w = _inputs(1, 2048, torch.bfloat16, seed=9)[1]
    state = {}
    ops.warmup(ops=["gemma_fused_add_rmsnorm"], dtypes=[torch.bfloat16])

    def prepare(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x.copy_(torch.randn(x.shape, generator=g, device="cuda"))
        r.copy_(torch.randn(x.shape, generator=g, device="cuda"))
        state["sum"] = (x.float() + r.float()).to(x.dtype)

    def step():
        ops.gemma_fused_add_rmsnorm(x, r, w, EPS)

    def check(what):
        assert torch.equal(r, state["sum"]), what
        _close(x, _gemma_reference(state["sum"], w), "bfloat16")

    eagerly_then_from_a_graph(prepare, step, check)

    def block(h, res):
        ops.gemma_fused_add_rmsnorm(h, res, w, EPS)
        return ops.rmsnorm_hf(h, w, EPS) + ops.gemma_rmsnorm(res, w, EPS)

    h, res = _inputs(8, 2048, torch.bfloat16, seed=1)[0].contiguous(), torch.randn(8, 2048, dtype=torch.bfloat16, device="cuda")
    expected = block(h.clone(), res.clone())
    assert torch.equal(torch.compile(block, fullgraph=True)(h.clone(), res.clone()), expected)
    torch.library.opcheck(torch.ops.jitkern.gemma_rmsnorm, (h, w, EPS))
    torch.library.opcheck(torch.ops.jitkern.rmsnorm_hf_out, (h, w, torch.empty_like(h), EPS))
    torch.library.opcheck(torch.ops.jitkern.gemma_fused_add_rmsnorm, (h.clone(), res.clone(), w, EPS))


@pytest.mark.gpu
def test_bad_arguments_are_named():
    torch = _torch()
    ops = _ops()
    x, w = _inputs(4, 256, torch.bfloat16)
    with pytest.raises(TypeError, match="weight"):
        ops.gemma_rmsnorm(x, w.float(), EPS)
    with pytest.raises(ValueError, match="weight"):
        ops.rmsnorm_hf(x, w[:128], EPS)
    with pytest.raises(ValueError, match="residual"):
        ops.gemma_fused_add_rmsnorm(x.clone(), x[:3].clone(), w, EPS)
    with pytest.raises(ValueError, match="eps"):
        ops.gemma_rmsnorm(x, w, -1.0)
    with pytest.raises(TypeError, match="input must be float16, bfloat16 or float32"):
        ops.gemma_rmsnorm(x.double(), w.double(), EPS)
