"""The gated activation family on the GPU: against a float64 torch reference, the fused fp8 forms bit for bit
against the unfused pair, bad input, and the torch custom ops (opcheck, torch.compile, CUDA graphs)."""

import pytest

pytestmark = pytest.mark.gpu

DTYPES = ["float16", "bfloat16", "float32"]
OPS = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"]
# One unit in the last place of the dtype (the kernel and the reference each round once), with an absolute
# floor for values near 0.
TOL = {"float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3), "float32": (1e-5, 1e-5)}


def _torch():
    import torch

    return torch


def _reference(op, x):
    torch = _torch()
    F = torch.nn.functional
    d = x.shape[-1] // 2
    g, u = x[..., :d].double(), x[..., d:].double()
    act = {"silu_and_mul": F.silu, "gelu_and_mul": F.gelu, "gelu_tanh_and_mul": lambda v: F.gelu(v, approximate="tanh")}[op]
    return (act(g) * u).to(x.dtype)


def _assert_close(actual, expected, dtype_name):
    torch = _torch()
    rtol, atol = TOL[dtype_name]
    assert not torch.isnan(actual).any(), "output has unwritten (NaN-poisoned) or NaN elements"
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol)


def _op(name):
    import jitkern.ops

    return getattr(jitkern.ops, name)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("tokens,d", [(1, 1), (1, 7), (1, 14336), (2, 64), (3, 100), (16, 4096), (64, 1), (257, 1000), (1000, 8),
                                      (4096, 1024), (16384, 256), (2048, 14336)])
def test_against_float64_reference(dtype_name, op, tokens, d):
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    x = torch.randn(tokens, 2 * d, dtype=dtype, device="cuda") * 3
    out = torch.full((tokens, d), float("nan"), dtype=dtype, device="cuda")
    assert _op(op)(out, x) is out
    _assert_close(out, _reference(op, x), dtype_name)


@pytest.mark.parametrize("op", OPS)
def test_large_prefill(op):
    """T = 16384 at d = 14336 (a Llama-3-8B MLP), bf16: the grid-stride path (more vectors than the grid's threads)."""
    torch = _torch()
    x = torch.randn(16384, 2 * 14336, dtype=torch.bfloat16, device="cuda")
    out = _op(op)(x)
    for rows in (slice(0, 64), slice(8000, 8064), slice(16320, 16384)):
        _assert_close(out[rows], _reference(op, x[rows]), "bfloat16")
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("pad", [1, 8])
def test_strided_rows_and_unaligned(dtype_name, op, pad):
    """Rows of a wider buffer (pad 1 also misaligns them: the scalar path); nothing outside out's rows is written."""
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    tokens, d = 37, 520
    big = torch.randn(tokens, 2 * d + pad, dtype=dtype, device="cuda")
    x = big[:, pad:]
    out_big = torch.full((tokens, d + 16), float("nan"), dtype=dtype, device="cuda")
    _op(op)(out_big[:, :d], x)
    _assert_close(out_big[:, :d], _reference(op, x), dtype_name)
    assert torch.isnan(out_big[:, d:]).all(), "wrote outside the output rows"


@pytest.mark.parametrize("op", OPS)
def test_broadcast_input_is_only_read(op):
    """An input whose rows overlap (one row expanded: row stride 0) is accepted: it is only read."""
    torch = _torch()
    x = torch.randn(1, 2 * 520, dtype=torch.bfloat16, device="cuda").expand(37, 2 * 520)
    _assert_close(_op(op)(x), _reference(op, x.contiguous()), "bfloat16")


@pytest.mark.parametrize("shape", [(128,), (5, 128), (2, 3, 128), (2, 2, 3, 128)])
def test_shapes_orders_and_returning_form(shape):
    """1-4-D inputs; (out, input) as vLLM orders them, (input, out) as sgl-kernel does, and (input) alone."""
    torch = _torch()
    x = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
    expected = _reference("silu_and_mul", x)
    silu_and_mul = _op("silu_and_mul")
    got = silu_and_mul(x)
    assert got.shape == (*shape[:-1], 64) and got.dtype == x.dtype
    _assert_close(got, expected, "bfloat16")
    out = torch.full((*shape[:-1], 64), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert silu_and_mul(out, x) is out
    _assert_close(out, expected, "bfloat16")
    out.fill_(float("nan"))
    assert silu_and_mul(x, out) is out
    _assert_close(out, expected, "bfloat16")


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_special_values(dtype_name):
    """Saturating and non-finite inputs: silu(-1e30) * u = -0 * u, NaN propagates, large gates stay finite
    (fp32 exactly; bf16, whose SiLU takes the fast exponential and division, within its rounding)."""
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    g = torch.tensor([-1e4, 1e4, -1e30, float("nan"), 0.0, 88.0, -88.0, 3.0], device="cuda")
    u = torch.tensor([2.0, 2.0, 2.0, 1.0, 5.0, 1.0, 1.0, float("inf")], device="cuda")
    x = torch.cat([g, u]).to(dtype)
    out = _op("silu_and_mul")(x)
    expected = _reference("silu_and_mul", x)
    assert torch.isnan(out[3]) and torch.isnan(expected[3])
    keep = torch.arange(8, device="cuda") != 3
    rtol, atol = (1e-6, 0.0) if dtype_name == "float32" else TOL[dtype_name]
    torch.testing.assert_close(out[keep], expected[keep], rtol=rtol, atol=atol, equal_nan=False)
    assert out[2].item() == 0.0 and out[7].item() == float("inf")


def _group_quant_pair(x, eps=1e-10, **layout):
    from jitkern.ops import per_token_group_quant_8bit, silu_and_mul

    return per_token_group_quant_8bit(silu_and_mul(x), 128, eps=eps, **layout)


LAYOUTS = [{}, {"column_major_scales": True}, {"column_major_scales": True, "scale_tma_aligned": True}, {"scale_ue8m0": True}]


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("tokens,d", [(1, 128), (3, 256), (64, 14336), (257, 1024), (4097, 512), (16384, 128)])
@pytest.mark.parametrize("layout", LAYOUTS, ids=["row-major", "column-major", "tma-aligned", "ue8m0"])
def test_group_quant_bit_equal_to_the_pair(dtype_name, tokens, d, layout):
    torch = _torch()
    from jitkern.ops import silu_and_mul_per_token_group_quant_fp8

    dtype = getattr(torch, dtype_name)
    x = torch.randn(tokens, 2 * d, dtype=dtype, device="cuda") * 4
    x[0, 5] = 300.0  # large values: saturation and scales far from 1
    if tokens > 2:
        x[1, : d // 2] = 0.0  # an all-zero group (the eps floor)
        x[2, 3] = float("nan")
        x[2, d + min(130, d - 1)] = float("inf")
    q_ref, s_ref = _group_quant_pair(x, **layout)
    q, s = silu_and_mul_per_token_group_quant_fp8(x, **layout)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (tokens, d)
    assert s.shape == s_ref.shape and s.stride() == s_ref.stride() and s.dtype == s_ref.dtype
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), "fp8 codes differ from silu_and_mul + per_token_group_quant_8bit"
    assert torch.equal(s.view(torch.int32) if s.dtype == torch.float32 else s, s_ref.view(torch.int32) if s.dtype == torch.float32 else s_ref)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("tokens", [1, 40, 4096])  # one vector per lane (1, 40), two (4096)
def test_group_quant_amax_from_every_position(dtype_name, tokens):
    """Each group's largest magnitude sits at another of its 128 places, positive or negative, so every lane,
    vector and half of a packed pair must reach the amax; plus groups of only NaN, of -0, and of +-inf."""
    torch = _torch()
    from jitkern.ops import silu_and_mul_per_token_group_quant_fp8

    dtype = getattr(torch, dtype_name)
    d = 1024
    gate = torch.rand(tokens, d, device="cuda") + 0.5
    up = torch.rand(tokens, d, device="cuda") * 2 - 1  # products of magnitude < 2
    groups = torch.arange(tokens * d // 128, device="cuda").view(tokens, d // 128)
    place = (groups * 37) % 128
    cols = groups % (d // 128) * 128 + place
    rows = torch.arange(tokens, device="cuda")[:, None].expand_as(cols)
    gate[rows, cols] = 4.0
    up[rows, cols] = torch.where(groups % 2 == 0, 40.0, -40.0)  # the group's largest product, ~ +-157
    if tokens >= 40:
        gate[1, 128:256] = float("nan")  # every product NaN: the eps scale, NaN codes
        gate[2, :128], up[2, :128] = 0.0, -1.0  # every product -0
        up[3, 300], up[3, 400] = float("inf"), float("-inf")  # a group of +inf and one of -inf
    x = torch.cat([gate, up], dim=1).to(dtype)
    q_ref, s_ref = _group_quant_pair(x)
    q, s = silu_and_mul_per_token_group_quant_fp8(x, eps=1e-10)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), "fp8 codes differ from silu_and_mul + per_token_group_quant_8bit"
    assert torch.equal(s.view(torch.int32), s_ref.view(torch.int32)), "scales differ from silu_and_mul + per_token_group_quant_8bit"
    ordinary = torch.ones_like(s_ref, dtype=torch.bool)
    ordinary[1:4] = False  # the rows of special groups (none where tokens < 40)
    assert (s_ref[ordinary] > 100 / 448).all(), "the test's largest products did not set the scales"


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_group_quant_strided_unaligned_and_3d(dtype_name):
    torch = _torch()
    from jitkern.ops import silu_and_mul_per_token_group_quant_fp8

    dtype = getattr(torch, dtype_name)
    big = torch.randn(33, 2 * 256 + 1, dtype=dtype, device="cuda")
    x = big[:, 1:]  # misaligned rows: the element-by-element path
    q_ref, s_ref = _group_quant_pair(x)
    q, s = silu_and_mul_per_token_group_quant_fp8(x, eps=1e-10)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)
    x3 = torch.randn(2, 5, 512, dtype=dtype, device="cuda")
    q_ref, s_ref = _group_quant_pair(x3)
    q_out = torch.empty(2, 5, 256, dtype=torch.float8_e4m3fn, device="cuda")
    s_out = torch.full((2, 5, 2), float("nan"), device="cuda")
    q, s = silu_and_mul_per_token_group_quant_fp8(x3, output_q=q_out, output_s=s_out)
    assert q is q_out and s is s_out
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("tokens,d", [(1, 14336), (5, 100), (300, 1024), (4096, 4096)])
@pytest.mark.parametrize("scale", [0.02, 1e-40])  # 1e-40: a subnormal scale whose reciprocal overflows
def test_static_quant_bit_equal_to_the_pair(dtype_name, tokens, d, scale):
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8, silu_and_mul, silu_and_mul_quant_fp8

    dtype = getattr(torch, dtype_name)
    x = torch.randn(tokens, 2 * d, dtype=dtype, device="cuda") * 4
    x[0, 0] = float("nan")
    s = torch.tensor([scale], dtype=torch.float32, device="cuda")
    q_ref, _ = per_tensor_quant_fp8(silu_and_mul(x), output_s=s.clone(), is_static=True)
    q = silu_and_mul_quant_fp8(x, s)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (tokens, d)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))


@pytest.mark.parametrize("path", ["first call", "hot path"])
def test_bad_inputs_rejected(path):
    """TypeError for a dtype, ValueError for a shape, stride, device or value, naming the argument, before
    any launch (the output stays poisoned)."""
    torch = _torch()
    from jitkern.ops import act, silu_and_mul, silu_and_mul_per_token_group_quant_fp8, silu_and_mul_quant_fp8

    x = torch.randn(4, 256, dtype=torch.bfloat16, device="cuda")
    if path == "hot path":
        silu_and_mul(x)
    else:
        act._FUNCTIONS.clear()
    out = torch.full((4, 128), float("nan"), dtype=torch.bfloat16, device="cuda")

    def rejects(error, match, fn, *args, **kwargs):
        with pytest.raises(error, match=match) as info:
            fn(*args, **kwargs)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
        assert info.value.__context__ is None, "raised while handling another error"

    rejects(TypeError, "out: DType mismatch", silu_and_mul, out.half(), x)
    rejects(ValueError, r"out: Size mismatch for shape#1\('d'\): expected 128 \(resolved earlier\) but got 100", silu_and_mul, out[:, :100], x)
    rejects(ValueError, r"out: Size mismatch for shape#0\('num_tokens'\)", silu_and_mul, out[:2], x)
    rejects(ValueError, "the last dimension of input must be even", silu_and_mul, x[:, :255])
    rejects(ValueError, "input: Device mismatch", silu_and_mul, x.cpu())
    rejects(ValueError, "out: Device mismatch", silu_and_mul, out.cpu(), x)
    rejects(TypeError, "silu_and_mul\\(\\): input must be a torch.Tensor, got list", silu_and_mul, x.tolist())
    rejects(TypeError, "input must be float16, bfloat16 or float32, got torch.float64", silu_and_mul, x.double())
    rejects(ValueError, "input: Stride mismatch", silu_and_mul, torch.randn(256, 4, dtype=torch.bfloat16, device="cuda").t())
    rejects(ValueError, "input must have at least 1 dimension", silu_and_mul, x[0, 0])
    assert torch.isnan(out).all(), "a rejected call wrote its output"
    rejects(ValueError, "group_size must be 128, got 64", silu_and_mul_per_token_group_quant_fp8, x, 64)
    rejects(TypeError, "group_size must be an int", silu_and_mul_per_token_group_quant_fp8, x, 128.0)
    rejects(ValueError, "must be a multiple of group_size", silu_and_mul_per_token_group_quant_fp8, x[:, :200])
    rejects(ValueError, "eps must be a finite positive number", silu_and_mul_per_token_group_quant_fp8, x, 128, 0.0)
    rejects(ValueError, r"output_s: Size mismatch", silu_and_mul_per_token_group_quant_fp8, x,
            output_s=torch.empty(4, 2, device="cuda"))
    rejects(ValueError, r"output_s must be int32 \(four UE8M0 exponents a word\) with scale_ue8m0=True", silu_and_mul_per_token_group_quant_fp8,
            x, scale_ue8m0=True, output_s=torch.empty(4, 1, device="cuda"))
    rejects(ValueError, "output_s overlaps itself", silu_and_mul_per_token_group_quant_fp8, x,
            output_s=torch.empty(1, 1, device="cuda").expand(4, 1))
    rejects(TypeError, "output_q must be a float8_e4m3fn tensor", silu_and_mul_quant_fp8, x, torch.ones(1, device="cuda"),
            output_q=torch.empty(4, 128, dtype=torch.int8, device="cuda"))
    rejects(TypeError, "scale: DType mismatch", silu_and_mul_quant_fp8, x, torch.ones(1, dtype=torch.float64, device="cuda"))
    rejects(ValueError, r"scale must be a float32 tensor of one element, got shape \(2,\)", silu_and_mul_quant_fp8, x,
            torch.ones(2, device="cuda"))


def test_cpp_entry_points_validate_before_launch():
    torch = _torch()
    from jitkern.ops import act

    m = act._FAMILY.exports(torch.bfloat16)
    x = torch.randn(4, 256, dtype=torch.bfloat16, device="cuda")
    overlapping = torch.empty(320, dtype=torch.bfloat16, device="cuda").as_strided((4, 128), (64, 1))
    with pytest.raises(ValueError, match="out rows overlap: row stride 64 is smaller than the row width 128"):
        m.silu_and_mul(x, overlapping)
    with pytest.raises(ValueError, match="input: Dimension mismatch"):
        m.gelu_and_mul(x.view(4, 2, 128), torch.empty(4, 128, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(TypeError, match=r"silu_and_mul\(input, out\) takes 2 arguments but 1 was given"):
        m.silu_and_mul(x)


def test_torch_custom_ops_opcheck_compile_and_graphs():
    torch = _torch()
    import jitkern.ops  # noqa: F401  (registers torch.ops.jitkern)
    from jitkern.ops import gelu_tanh_and_mul, silu_and_mul, silu_and_mul_per_token_group_quant_fp8, silu_and_mul_quant_fp8

    x = torch.randn(7, 512, dtype=torch.bfloat16, device="cuda")
    for op in OPS:
        torch.library.opcheck(getattr(torch.ops.jitkern, op), (x,))
        torch.library.opcheck(getattr(torch.ops.jitkern, op + "_out"), (x, torch.empty(7, 256, dtype=torch.bfloat16, device="cuda")))
    scale = torch.tensor([0.05], device="cuda")
    torch.library.opcheck(torch.ops.jitkern.silu_and_mul_quant_fp8, (x, scale))
    torch.library.opcheck(torch.ops.jitkern.silu_and_mul_per_token_group_quant_fp8, (x, 128, 1e-10, True, True, False))

    def mlp(h, out):
        y = silu_and_mul(h)
        gelu_tanh_and_mul(out, h)
        q, s = silu_and_mul_per_token_group_quant_fp8(h)
        return y, q, s, silu_and_mul_quant_fp8(h, scale)

    compiled = torch.compile(mlp, fullgraph=True, dynamic=True)
    for tokens in (3, 17):
        h = torch.randn(tokens, 512, dtype=torch.bfloat16, device="cuda")
        out, out_ref = torch.empty(tokens, 256, dtype=torch.bfloat16, device="cuda"), torch.empty(tokens, 256, dtype=torch.bfloat16, device="cuda")
        got, ref = compiled(h, out), mlp(h, out_ref)
        assert torch.equal(got[0], ref[0]) and torch.equal(out, out_ref)
        assert torch.equal(got[1].view(torch.uint8), ref[1].view(torch.uint8)) and torch.equal(got[2], ref[2])
        assert torch.equal(got[3].view(torch.uint8), ref[3].view(torch.uint8))

    h = torch.randn(64, 28672, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(64, 14336, dtype=torch.bfloat16, device="cuda")
    q = torch.empty(64, 14336, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(64, 112, device="cuda")
    silu_and_mul(out, h), silu_and_mul_per_token_group_quant_fp8(h, output_q=q, output_s=s)  # load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        silu_and_mul(out, h)
        silu_and_mul_per_token_group_quant_fp8(h, output_q=q, output_s=s)
    h.copy_(torch.randn_like(h))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _assert_close(out, _reference("silu_and_mul", h), "bfloat16")
    q_ref, s_ref = _group_quant_pair(h)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)
