"""The 8-bit quantization family on the GPU: bit-exact q and exact scales against torch references that
compute the same way (fp32 division, round to nearest even, saturation), for every op, input dtype,
group size and scale layout; NaN/inf/zero rows; garbage in output_s; strided, 3-D, empty and huge
shapes; the fused norm + quant ops against jitkern's rmsnorm followed by the same quantization;
rounding="sglang" against SGLang's own kernel, bit for bit (its argument checks run without a GPU)."""

import pytest
from conftest import HERE, KERNELS, eagerly_then_from_a_graph
from kernel_profile import launched_kernels


DTYPES = ["float16", "bfloat16", "float32"]


def _torch():
    import torch

    return torch


def _finite_amax(x, dim=None):
    """The largest finite |x| (NaN and +-inf left out), over everything or over `dim` (keepdim)."""
    torch = _torch()
    a = x.float().abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return a.amax() if dim is None else a.amax(dim=dim, keepdim=True)


def _scale(amax, eps, qmax=448.0):
    """max(amax, eps) / qmax, an IEEE fp32 division (torch turns division by a Python number into a
    multiplication by its reciprocal, which can differ in the last bit)."""
    torch = _torch()
    amax = amax.float()
    return torch.clamp(amax, min=eps) / torch.full_like(amax, qmax)


def _quantize(x, s, dtype=None):
    """The reference quantization: (x.float() / s), then saturate and round to the 8-bit type."""
    torch = _torch()
    v = x.float() / s
    if dtype == torch.int8:
        return torch.nan_to_num(v.round().clamp(-127, 127), nan=0.0).to(torch.int8)
    return v.clamp(-448, 448).to(torch.float8_e4m3fn)


def _assert_q_equal(q, expected):
    """Bit-exact, NaN positions equal (any NaN encoding)."""
    torch = _torch()
    assert q.dtype == expected.dtype and q.shape == expected.shape
    if q.dtype == torch.int8:
        assert torch.equal(q, expected)
        return
    qn, en = torch.isnan(q.float()), torch.isnan(expected.float())
    assert torch.equal(qn, en), "NaN positions differ"
    a, b = q.view(torch.uint8)[~qn], expected.view(torch.uint8)[~en]
    mismatches = (a != b).sum().item()
    assert mismatches == 0, f"{mismatches} of {a.numel()} values differ"


def _x(shape, dtype_name, seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * 3).to(getattr(torch, dtype_name))


# ---- per-tensor ------------------------------------------------------------------------------------

# (rows, H): up to 4 rows of 4096 one CTA; then, on an H100's 132 SMs, the split path (amax per CTA, then
# quantize) at 256 x 1 up to 66 rows and 512 x 2 up to 264; larger ones memset + amax + quantize; odd
# widths the scalar path.
PER_TENSOR_SHAPES = [(1, 4096), (4, 4096), (8, 4096), (16, 4096), (32, 4096), (64, 4096), (65, 4096), (130, 4096), (264, 4096),
                     (3, 1000), (1, 7), (40, 1001), (4097, 4096), (2048, 2051)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", PER_TENSOR_SHAPES)
@pytest.mark.parametrize("garbage", [1e30, -5.0, float("nan")])
def test_per_tensor_dynamic_whatever_output_s_holds(dtype_name, shape, garbage):
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8

    x = _x(shape, dtype_name)
    s = torch.full((1,), garbage, dtype=torch.float32, device="cuda")
    q, s_out = per_tensor_quant_fp8(x, output_s=s)
    assert s_out is s
    expected_s = _scale(_finite_amax(x), 1e-10)
    assert torch.equal(s, expected_s.reshape(1)), f"scale {s.item()} != {expected_s.item()}"
    _assert_q_equal(q, _quantize(x, expected_s))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4096), (4097, 4096), (3, 1000), (1, 7)])
def test_per_tensor_static(dtype_name, shape):
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8

    x = _x(shape, dtype_name)
    s = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    q, s_out = per_tensor_quant_fp8(x, output_s=s, is_static=True)
    assert s_out is s and s.item() == pytest.approx(0.0123)
    _assert_q_equal(q, _quantize(x, s))


@pytest.mark.gpu
def test_per_tensor_strided_3d_huge_and_empty():
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8

    for rows, offset in ((300, 8), (40, 8), (20, 1)):  # strided rows, 16-byte aligned or not: two passes, split, split scalar
        big = _x((rows, 4096 + 8), "bfloat16")
        x = big[:, offset : offset + 4096 - (offset % 8)]
        q, s = per_tensor_quant_fp8(x)
        es = _scale(_finite_amax(x), 1e-10)
        assert torch.equal(s, es.reshape(1)), (rows, offset)
        _assert_q_equal(q, _quantize(x, es))
    x3 = _x((2, 5, 96), "float16")
    q3, s3 = per_tensor_quant_fp8(x3)
    assert q3.shape == (2, 5, 96)
    _assert_q_equal(q3, _quantize(x3, _scale(_finite_amax(x3), 1e-10)))
    huge = _x((19260817, 1), "bfloat16")
    qh, sh = per_tensor_quant_fp8(huge)
    eh = _scale(_finite_amax(huge), 1e-10)
    assert torch.equal(sh, eh.reshape(1))
    _assert_q_equal(qh, _quantize(huge, eh))
    empty = torch.empty(0, 4096, dtype=torch.bfloat16, device="cuda")
    qe, se = per_tensor_quant_fp8(empty, output_s=torch.full((1,), 7.0, device="cuda"))
    assert qe.shape == (0, 4096) and se.item() == 0.0


# One CTA (128 and 1024 threads), the split path at 256 x 1 and 512 x 2, two passes; the bad values in
# the first rows, or only in the last row (the last CTA of a split launch).
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8, 256), (4, 4096), (8, 4096), (16, 4096), (64, 4096), (130, 4096), (300, 4096)])
@pytest.mark.parametrize("where", ["first", "last"])
def test_per_tensor_nan_inf_zero(shape, where):
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8

    x = _x(shape, "bfloat16")
    rows = [0, 1, 2, 3] if where == "first" else [shape[0] - 1] * 4
    x[rows[0], 0], x[rows[1], 1], x[rows[2], 2], x[rows[3], 3] = float("nan"), float("inf"), float("-inf"), -0.0
    q, s = per_tensor_quant_fp8(x)
    assert q[rows[3], 3].view(torch.uint8).item() == 0x80, "-0 must stay -0"
    es = _scale(_finite_amax(x), 1e-10)
    assert torch.equal(s, es.reshape(1)), "NaN/inf entered the amax"
    _assert_q_equal(q, _quantize(x, es))
    assert torch.isnan(q[rows[0], 0].float()) and q[rows[1], 1].float().item() == 448.0 and q[rows[2], 2].float().item() == -448.0
    z = torch.zeros(4, 512, dtype=torch.bfloat16, device="cuda")
    qz, sz = per_tensor_quant_fp8(z)
    assert sz.item() == pytest.approx(1e-10 / 448) and not torch.isnan(qz.float()).any() and (qz.float() == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [4, 32, 130])
def test_per_tensor_reads_what_the_previous_kernel_wrote(rows):
    """The split path's quantize kernel loads its input before its PDL wait: here that input is written by
    the kernel just before it (jitkern's rmsnorm, itself launched with PDL), eagerly and from a CUDA graph."""
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8, rmsnorm

    w = _x((4096,), "bfloat16", seed=100)
    x = torch.empty(rows, 4096, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    q = torch.empty(rows, 4096, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(1, device="cuda")

    def step():
        rmsnorm(x, w, y, 1e-6)
        per_tensor_quant_fp8(y, q, s)

    def check(what):
        es = _scale(_finite_amax(y), 1e-10)
        assert torch.equal(s, es.reshape(1)), what
        _assert_q_equal(q, _quantize(y, es))

    eagerly_then_from_a_graph(lambda seed: x.copy_(_x((rows, 4096), "bfloat16", seed=seed) * (seed + 1)), step, check)


# ---- per-token -------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4096), (16, 4096), (33, 7168), (5, 1000), (2, 3), (7, 65536), (1024, 128), (600, 4096),
                                   (529, 7168), (700, 1000)])
def test_per_token(dtype_name, shape):
    torch = _torch()
    from jitkern.ops import per_token_quant_fp8

    x = _x(shape, dtype_name)
    x[0, 0] = float("nan")
    x[-1, -1] = float("inf")  # left out of its row's amax, saturates to 448
    if shape[0] > 1:
        x[1].zero_()
        x[1, 0] = float("-inf")  # a row of zeros and -inf: the eps scale, -448
    q, s = per_token_quant_fp8(x)
    es = _scale(_finite_amax(x, -1), 1e-10)
    assert s.shape == (shape[0], 1) and torch.equal(s, es)
    _assert_q_equal(q, _quantize(x, es))


@pytest.mark.gpu
def test_per_token_strided_3d_and_huge():
    torch = _torch()
    from jitkern.ops import per_token_quant_fp8

    x = _x((64, 4096 + 3), "bfloat16")[:, 3:]  # misaligned rows: the scalar path
    q, s = per_token_quant_fp8(x)
    es = _scale(_finite_amax(x, -1), 1e-10)
    assert torch.equal(s, es)
    _assert_q_equal(q, _quantize(x, es))
    x3 = _x((3, 4, 384), "float32")
    q3, s3 = per_token_quant_fp8(x3)
    assert s3.shape == (3, 4, 1)
    _assert_q_equal(q3, _quantize(x3, _scale(_finite_amax(x3, -1), 1e-10)))
    huge = _x((19260817, 1), "float16")
    qh, sh = per_token_quant_fp8(huge)
    eh = _scale(_finite_amax(huge, -1), 1e-10)
    assert torch.equal(sh, eh)
    _assert_q_equal(qh, _quantize(huge, eh))
    qe, se = per_token_quant_fp8(torch.empty(0, 64, dtype=torch.bfloat16, device="cuda"))
    assert qe.shape == (0, 64) and se.shape == (0, 1)


@pytest.mark.gpu
def test_broadcast_inputs_are_only_read():
    """An input whose rows overlap (one row expanded: row stride 0) is accepted where it is only read: per-token
    quantization and the norm + quant ops (the fused-add ones too: they leave input as it was) give the bits of
    the same values made contiguous."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, per_token_quant_fp8, rmsnorm_group_quant_fp8

    x = _x((1, 4096), "bfloat16").expand(5, 4096)
    w = _x((4096,), "bfloat16", seed=3)
    for got, expected in ((per_token_quant_fp8(x), per_token_quant_fp8(x.contiguous())),
                          (rmsnorm_group_quant_fp8(x, w), rmsnorm_group_quant_fp8(x.contiguous(), w))):
        assert torch.equal(got[0].view(torch.uint8), expected[0].view(torch.uint8)) and torch.equal(got[1], expected[1])
    residual = _x((5, 4096), "bfloat16", seed=1)
    residual_ref = residual.clone()
    q, s = fused_add_rmsnorm_group_quant_fp8(x, residual, w)
    q_ref, s_ref = fused_add_rmsnorm_group_quant_fp8(x.contiguous(), residual_ref, w)
    assert torch.equal(residual, residual_ref) and torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)


# ---- per-token-group -------------------------------------------------------------------------------

def _group_reference(x, group_size, dtype, eps, ue8m0):
    torch = _torch()
    rows, h = x.reshape(-1, x.shape[-1]).shape
    g = x.reshape(rows, h // group_size, group_size)
    qmax = 127.0 if dtype == torch.int8 else 448.0
    s = _scale(_finite_amax(g, -1), eps, qmax)  # [rows, groups, 1]
    if ue8m0:
        bits = s.view(torch.int32)
        exponent = (bits >> 23) + ((bits & 0x7FFFFF) != 0).int()
        s = (exponent << 23).view(torch.float32)
        return _quantize(g, s, dtype).reshape(x.shape), s.reshape(rows, -1), exponent.reshape(rows, -1)
    return _quantize(g, s, dtype).reshape(x.shape), s.reshape(rows, -1), None


def _unpack_ue8m0(packed, groups):
    torch = _torch()
    p = packed.contiguous().view(torch.uint8).reshape(packed.shape[0], -1)  # little-endian: group 4k + b in byte b
    assert (p[:, groups:] == 0).all(), "padding bytes of the last word must be 0"
    return p[:, :groups].int()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("qdtype", ["float8_e4m3fn", "int8"])
@pytest.mark.parametrize("shape", [(1, 7168), (37, 4096), (130, 640), (3, 128)])
def test_per_token_group_row_major(dtype_name, group_size, qdtype, shape):
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    qd = getattr(torch, qdtype)
    x = _x(shape, dtype_name)
    x[0, 5] = float("nan")
    x[0, 6] = float("inf")  # left out of its group's amax; the other groups of its warp are unaffected
    x[-1, :group_size] = 0
    x[-1, 1] = float("-inf")  # a group of zeros and -inf: the eps scale
    q, s = per_token_group_quant_8bit(x, group_size, qd)
    eq, es, _ = _group_reference(x, group_size, qd, 1e-10, False)
    assert s.shape == (shape[0], shape[1] // group_size) and s.dtype == torch.float32
    assert torch.equal(s, es)
    _assert_q_equal(q, eq)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("layout", ["column_major", "tma_aligned", "ue8m0", "ue8m0_row_major"])
@pytest.mark.parametrize("rows", [1, 7, 130])
def test_per_token_group_scale_layouts(dtype_name, group_size, layout, rows):
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    h = 7168 if group_size == 128 else 640  # 56 and 20 groups: packed words with and without padding bytes
    x = _x((rows, h), dtype_name, seed=rows)
    flags = {"column_major": dict(column_major_scales=True), "tma_aligned": dict(column_major_scales=True, scale_tma_aligned=True),
             "ue8m0": dict(column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=True),
             "ue8m0_row_major": dict(scale_ue8m0=True)}[layout]
    q, s = per_token_group_quant_8bit(x, group_size, **flags)
    eq, es, exponent = _group_reference(x, group_size, torch.float8_e4m3fn, 1e-10, "ue8m0" in layout)
    _assert_q_equal(q, eq)
    groups = h // group_size
    if flags.get("column_major_scales"):
        assert s.stride(0) == 1, "column-major scales"
        if flags.get("scale_tma_aligned"):
            assert s.stride(1) % 4 == 0 and s.stride(1) >= rows, "columns padded to 16 bytes"
    if "ue8m0" in layout:
        assert s.dtype == torch.int32 and s.shape == (rows, -(-groups // 4))
        assert torch.equal(_unpack_ue8m0(s, groups), exponent)
    else:
        assert torch.equal(s, es)


def _one_ulp_share(quotients, qdtype):
    """The share of these fp32 quotients whose 8-bit code a one-ulp error (up or down) would change."""
    torch = _torch()
    code = (lambda v: v.round()) if qdtype == torch.int8 else (lambda v: v.clamp(-448, 448).to(qdtype).float())
    up, down = (torch.nextafter(quotients, torch.full_like(quotients, v)) for v in (float("inf"), float("-inf")))
    return ((code(up) != code(quotients)) | (code(down) != code(quotients))).float().mean().item()


def _boundary_dividends(s, count, qdtype, seed):
    """count fp32 dividends per scale s [G] (fp32) whose quotients x / s fall within two ulps of an fp32
    rounding midpoint beside a rounding boundary of the 8-bit type (fp8: the midpoints between its
    values, 1.mmm1 x 2^e for normal ones and odd multiples of 2^-10 below 2^-6; int8: the half-integers):
    where a division that is not correctly rounded gives another code."""
    torch = _torch()
    dev = "cuda"
    if qdtype == torch.int8:
        m = torch.arange(127, dtype=torch.float64, device=dev) + 0.5
    else:
        odd = torch.arange(1, 16, 2, dtype=torch.float64, device=dev)
        normal = ((16 + odd[None, :]) / 16 * torch.pow(2.0, torch.arange(-6, 9, dtype=torch.float64, device=dev))[:, None]).reshape(-1)
        m = torch.cat([odd * 2.0**-10, normal[normal < 448]])
    g = torch.Generator(device=dev).manual_seed(seed)
    pick = m[torch.randint(len(m), (len(s), count), generator=g, device=dev)]
    binade = torch.pow(2.0, torch.floor(torch.log2(pick)))
    side = torch.randint(2, pick.shape, generator=g, device=dev) * 2 - 1
    half_ulp = torch.where((side < 0) & (pick == binade), binade * 2.0**-25, binade * 2.0**-24)  # below a power of two: the finer binade
    x = ((pick + side * half_ulp) * s.double()[:, None]).float()
    steps = torch.randint(-2, 3, pick.shape, generator=g, device=dev)
    for step in (1, 2):
        x = torch.where(steps >= step, torch.nextafter(x, torch.full_like(x, float("inf"))), x)
        x = torch.where(steps <= -step, torch.nextafter(x, torch.full_like(x, float("-inf"))), x)
    sign = torch.randint(2, pick.shape, generator=g, device=dev) * 2 - 1
    return x * sign


@pytest.mark.gpu
@pytest.mark.parametrize("qdtype", ["float8_e4m3fn", "int8"])
def test_quotients_next_to_rounding_boundaries(qdtype):
    """The quantizers divide by the scale with a reciprocal and one correction, not a division per
    element: dividends placed where only a correctly rounded quotient gives the reference's code."""
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8, per_token_group_quant_8bit

    qd = getattr(torch, qdtype)
    groups, g = torch.Generator(device="cuda").manual_seed(7), 128
    amax = (1 + torch.rand(8192, generator=groups, device="cuda")) * torch.pow(2.0, torch.randint(-40, 40, (8192,), generator=groups,
                                                                                               device="cuda").float())
    s = _scale(amax, 1e-10, 127.0 if qd == torch.int8 else 448.0)
    body = _boundary_dividends(s, g - 1, qd, seed=8)
    body = torch.where(body.abs() <= amax[:, None], body, body / 2)  # each group's amax stays its first element
    x = torch.cat([amax[:, None], body], dim=1).reshape(64, -1)
    share = _one_ulp_share(body / s[:, None], qd)
    assert share > 0.2, f"the dividends must sit where one ulp changes the code ({share:.3f} do)"
    q, got_s = per_token_group_quant_8bit(x, g, qd)
    eq, es, _ = _group_reference(x, g, qd, 1e-10, False)
    assert torch.equal(got_s, es), "group scales"
    _assert_q_equal(q, eq)
    if qd == torch.float8_e4m3fn:  # one static scale, dividends placed for it
        scale = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
        y = _boundary_dividends(scale.expand(512), 1024, qd, seed=9).reshape(256, -1)
        q, _ = per_tensor_quant_fp8(y, output_s=scale, is_static=True)
        _assert_q_equal(q, _quantize(y, scale))


def _near_midpoints():
    """(B, s, x) rows of quant_near_midpoints.txt: every scale in [1, 2) and dividend whose quotient is within
    2^-24 ulp of an fp32 rounding midpoint beside B / 2^floor(log2 B)."""
    text = (HERE / "quant_near_midpoints.txt").read_text()
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    return [(int(b), float.fromhex(s), float.fromhex(x)) for b, s, x in rows]


@pytest.mark.gpu
@pytest.mark.parametrize("qdtype", ["float8_e4m3fn", "int8"])
def test_quotients_nearest_to_rounding_midpoints(qdtype):
    """Every pair of the exhaustive search whose quotient comes closest to a midpoint beside an 8-bit
    code's value or boundary, shifted by powers of two onto fp8's binades (normal and subnormal) or
    int8's half-integers, each in a group whose amax gives exactly that scale."""
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    qd = getattr(torch, qdtype)
    qmax = 127.0 if qd == torch.int8 else 448.0
    scales, dividends = [], []
    for b, s, x in _near_midpoints():
        e = b.bit_length() - 1  # x / s is next to b / 2^e, in [1, 2)
        if qd == torch.int8:
            shifts = [e - 1] if b <= 253 else []  # next to b / 2: a half-integer, inside the clamp
        else:
            shifts = [-8, -6, 0, 4, 7] if b < 32 else []  # at most 5 significant bits: fp8 values and boundaries
        for k in shifts:
            scales.append(s)
            dividends.append(x * 2.0**k)
    s = torch.tensor(scales, dtype=torch.float32, device="cuda")
    x = torch.tensor(dividends, dtype=torch.float32, device="cuda")
    assert len(s) >= 90, len(s)  # 19 pairs x 5 binades for fp8, 159 for int8
    # The amax whose scale max(amax, 1e-10) / qmax is exactly s: a float next to s * qmax.
    cands = [(s.double() * qmax).float()]
    for step in (float("inf"), float("-inf")):
        c = cands[0]
        for _ in range(4):
            c = torch.nextafter(c, torch.full_like(c, step))
            cands.append(c)
    cands = torch.stack(cands, dim=1)
    hits = cands / torch.full_like(cands, qmax) == s[:, None]
    found = hits.any(dim=1)
    assert found.float().mean() > 0.9, "an amax giving each scale exactly"
    amax = cands.gather(1, hits.int().argmax(dim=1, keepdim=True))[:, 0]
    x, s, amax = x[found], s[found], amax[found]
    groups = torch.zeros(len(x), 32, device="cuda")
    groups[:, 0], groups[:, 1], groups[:, 2] = amax, x, -x
    q, got_s = per_token_group_quant_8bit(groups, 32, qd)
    eq, es, _ = _group_reference(groups, 32, qd, 1e-10, False)
    assert torch.equal(es[:, 0], s), "the groups' scales are the searched ones"
    assert torch.equal(got_s, es), "group scales"
    _assert_q_equal(q, eq)
    share = _one_ulp_share(x / s, qd)
    assert share > 0.2, f"one ulp must change the code of many of these quotients ({share:.3f} do)"


@pytest.mark.gpu
def test_per_token_group_misaligned_3d_and_errors():
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    x = _x((9, 512 + 1), "bfloat16")[:, 1:]  # misaligned: a warp per group
    q, s = per_token_group_quant_8bit(x, 128)
    eq, es, _ = _group_reference(x, 128, torch.float8_e4m3fn, 1e-10, False)
    assert torch.equal(s, es)
    _assert_q_equal(q, eq)
    x3 = _x((2, 3, 256), "float16")
    q3, s3 = per_token_group_quant_8bit(x3, 64, torch.int8, eps=1e-4)
    eq3, es3, _ = _group_reference(x3, 64, torch.int8, 1e-4, False)
    assert s3.shape == (2, 3, 4) and torch.equal(s3.reshape(6, 4), es3)
    _assert_q_equal(q3, eq3)
    with pytest.raises(ValueError, match="group_size"):
        per_token_group_quant_8bit(_x((2, 256), "bfloat16"), 48)
    with pytest.raises(ValueError, match="multiple of group_size"):
        per_token_group_quant_8bit(_x((2, 200), "bfloat16"), 64)
    with pytest.raises(ValueError, match="scale_ue8m0"):
        per_token_group_quant_8bit(_x((2, 256), "bfloat16"), 64, torch.int8, scale_ue8m0=True)
    with pytest.raises(TypeError, match="input"):
        per_token_group_quant_8bit(_x((2, 256), "bfloat16").int(), 64)
    # One export per output format; each refuses the others' outputs, naming the one they need.
    from jitkern.ops import quant

    m = quant._FAMILY.exports(torch.bfloat16)
    x2 = _x((2, 256), "bfloat16")
    q8, s32 = torch.empty(2, 256, dtype=torch.int8, device="cuda"), torch.empty(2, 4, device="cuda")
    with pytest.raises(ValueError, match=r"are for per_token_group_quant_int8 \(int8 output, fp32 scales\), not per_token_group_quant \("):
        m.per_token_group_quant(x2, q8, s32, 64, 1e-10)
    with pytest.raises(ValueError, match=r"are for per_token_group_quant \(fp8 output, fp32 scales\), not per_token_group_quant_ue8m0"):
        m.per_token_group_quant_ue8m0(x2, torch.empty(2, 256, dtype=torch.uint8, device="cuda"), s32, 64, 1e-10)
    q_int8, s_int8 = per_token_group_quant_8bit(x2, 64, torch.int8, output_q=q8, output_s=s32)
    assert q_int8 is q8 and s_int8 is s32 and q8.any(), "the op picks the int8 export from its outputs"


# (rows, H), eps: fp8 of 16-bit rows at the lean kernel's launches (an H200's 132 SMs: a few CTAs, trigger at
# start; one wave and several of more than 256 threads an SM, after the stores), part-filled CTAs and warps (15
# groups of 128), and, through per_group_kernel, an eps below kNormalScaleEps and strided rows.
@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("shape, eps", [((1, 7168), 1e-10), ((3, 640), 1e-20), ((255, 7168), 1e-10), ((1030, 7168), 1e-10)])
def test_per_token_group_fp8_at_each_launch(dtype_name, group_size, shape, eps):
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    x = _x(shape, dtype_name, seed=shape[0])
    x[0, 2 * group_size + 3] = float("inf")  # one group of its warp's takes the inf-safe division
    x[-1, -group_size:] = 0  # a group of zeros: the eps scale
    x[-1, -1] = float("nan")
    wide = torch.zeros(shape[0], shape[1] + 64, dtype=x.dtype, device=x.device)
    wide[:, :shape[1]] = x
    for flags in (dict(), dict(column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=True)):
        eq, es, exponent = _group_reference(x, group_size, torch.float8_e4m3fn, eps, bool(flags))
        for rows in (x, wide[:, :shape[1]]):  # contiguous, and strided rows (per_group_kernel)
            q, s = per_token_group_quant_8bit(rows, group_size, eps=eps, **flags)
            _assert_q_equal(q, eq)
            if flags:
                assert torch.equal(_unpack_ue8m0(s, shape[1] // group_size), exponent)
            else:
                assert torch.equal(s, es)


# per_group_lean_kernel's launches as the launch rule gives them: (CTA threads, trigger, rounding).
LEAN_LAUNCHES = [(128, 0, "exact"), (256, 2, "exact"), (128, 0, "sglang"), (128, 1, "sglang"), (256, 3, "sglang")]


@pytest.fixture(scope="module")
def lean_launches():
    import jitkern

    wrappers = [(f"lean_{d}_{'ue8m0' if u else 'fp32'}_{t}_{r}_{rounding}",
                 f"quant_group_lean_test::group_quant_lean<{d}_t, {'true' if u else 'false'}, {t}, {r}, "
                 f"device::quant::Rounding::k{rounding.capitalize()}>")
                for d in ("bf16", "fp16") for u in (False, True) for t, r, rounding in LEAN_LAUNCHES]
    return jitkern.load_jit("quant_group_lean_test", cuda_files=[str(KERNELS / "quant_group_lean.cuh")], cuda_wrappers=wrappers,
                            extra_include_paths=[str(jitkern.CSRC_DIR)], host_without_nvcc=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("launch", LEAN_LAUNCHES)
@pytest.mark.parametrize("shape", [(3, 640), (255, 7168)])
def test_per_token_group_fp8_lean_launches(lean_launches, dtype_name, ue8m0, launch, shape):
    """Every launch of the lean kernel, fp32 or UE8M0 scales (row-major), at each group size with +-inf and NaN in
    the groups (part-filled CTAs at (3, 640)), gives with the exact rounding the reference's codes and scales, with
    rounding="sglang" those of the general kernel (the same op on strided rows)."""
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    threads, trigger, rounding = launch
    short = {"bfloat16": "bf16", "float16": "fp16"}[dtype_name]
    fn = getattr(lean_launches, f"lean_{short}_{'ue8m0' if ue8m0 else 'fp32'}_{threads}_{trigger}_{rounding}")
    x = _x(shape, dtype_name, seed=3)
    x[0, 37], x[-1, 5], x[-1, -1] = float("inf"), float("-inf"), float("nan")
    strided = torch.zeros(shape[0], shape[1] + 64, dtype=x.dtype, device="cuda")[:, 64:]
    strided.copy_(x)
    for group_size in (32, 64, 128):
        groups = shape[1] // group_size
        q = torch.empty(shape, dtype=torch.uint8, device="cuda")
        s = (torch.empty(shape[0], -(-groups // 4), dtype=torch.int32, device="cuda") if ue8m0
             else torch.empty(shape[0], groups, device="cuda"))
        fn(x, q, s, group_size, 1e-10)
        if rounding == "exact":
            eq, es, exponent = _group_reference(x, group_size, torch.float8_e4m3fn, 1e-10, ue8m0)
            _assert_q_equal(q.view(torch.float8_e4m3fn), eq)
            assert torch.equal(_unpack_ue8m0(s, groups), exponent) if ue8m0 else torch.equal(s, es)
        else:
            eq, es = per_token_group_quant_8bit(strided, group_size, scale_ue8m0=ue8m0, rounding="sglang")
            assert torch.equal(q, eq.view(torch.uint8)) and torch.equal(s, es)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 64, 256, 1030])
def test_per_token_group_fp8_takes_the_kernel_its_grid_wants(rows):
    """bf16 [rows, 7168] in groups of 128 (8 lanes a group, CTAs of 128 threads): the lean kernel for at most 8
    CTAs and for more than 256 threads an SM, per_group_kernel between (64 rows on 132 SMs: 28672 threads)."""
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    ctas = -(-rows * 56 // 16)
    lean = ctas <= 8 or ctas * 128 > 256 * torch.cuda.get_device_properties(0).multi_processor_count
    x = _x((rows, 7168), "bfloat16")
    names = launched_kernels(lambda: per_token_group_quant_8bit(x, 128), "per_group_")
    assert len(names) == 1 and ("per_group_lean_kernel" in names[0]) == lean, names


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 16, 64, 256, 512])
def test_sglang_rounding_takes_the_lean_kernel_at_every_grid(rows):
    """rounding="sglang", bf16 [rows, 7168] in groups of 128 (8 lanes a group): the lean kernel at every grid, CTAs
    of 128 triggering at start for at most 8 CTAs, after the wait up to 1024 threads an SM, CTAs of 256 triggering
    after their loads above."""
    import re

    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    ctas = -(-rows * 56 // 16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    expected = (128, 0) if ctas <= 8 else (128, 1) if ctas * 128 <= 1024 * sms else (256, 3)
    x = _x((rows, 7168), "bfloat16")
    names = launched_kernels(lambda: per_token_group_quant_8bit(x, 128, rounding="sglang"), "per_group_")
    shape = [re.search(r"per_group_lean_kernel<.*, (\d+), (\d), \(device::quant::Rounding\)1>", n) for n in names]
    assert len(names) == 1 and shape[0] and (int(shape[0][1]), int(shape[0][2])) == expected, (names, expected)


@pytest.mark.gpu
def test_normal_scale_division_and_reciprocal_are_ieee():
    """normal_scale_for and normal_reciprocal (include/jitkern/impl/quant.cuh) give the IEEE quotients
    max(amax, eps) / 448 (/ 127) and 1 / s for every float of their ranges: checked one by one."""
    torch = _torch()
    import jitkern

    m = jitkern.load_jit("quant_normal_math_test", cuda_files=[str(KERNELS / "quant_normal_math.cuh")],
                         cuda_wrappers=[("normal_math_mismatches", "normal_math_mismatches")])
    counts = torch.full((4,), -1, dtype=torch.int64, device="cuda")
    m.normal_math_mismatches(counts)
    fp8, int8, reciprocal, seen = counts.tolist()
    assert seen == 0x7F800000, "every positive finite float"
    assert (fp8, int8, reciprocal) == (0, 0, 0)


# ---- rounding="sglang": SGLang's per_token_group_quant_8bit, bit for bit -----------------------------

def test_rounding_is_checked_and_named():
    """rounding= takes "exact" or "sglang"; anything else is a ValueError naming the argument and the choices,
    before any other check (no GPU, no torch needed)."""
    from jitkern.ops import per_token_group_quant_8bit
    from jitkern.ops.quant import ROUNDINGS, rounding_policy

    for bad in ("SGLang", "", None, 1):
        with pytest.raises(ValueError, match=rf"per_token_group_quant_8bit\(\): rounding must be one of 'exact', 'sglang', got {bad!r}"):
            per_token_group_quant_8bit(None, 128, rounding=bad)
    assert rounding_policy("sglang", "op").cpp == "device::quant::Rounding::kSglang" and rounding_policy("exact", "op").suffix == ""
    assert list(ROUNDINGS) == ["exact", "sglang"]


def test_both_roundings_are_prebuilt():
    """warmup and prebuild (ops.specs) build per_token_group_quant_8bit's exports of both rounding policies,
    each its own module exporting its instantiation."""
    from jitkern import ops

    specs = ops.specs(ops=["per_token_group_quant_8bit"], dtypes=["bfloat16"])
    wrappers = {s.name: s.cuda_wrappers[0][1] for s in specs}
    for fmt in ("", "_ue8m0", "_int8"):
        for suffix, policy in (("", "kExact"), ("_sglang", "kSglang")):
            name = f"quant_per_token_group_quant{fmt}{suffix}"
            assert wrappers.pop(name) == f"jitkern_quant::QuantOps<bf16_t>::per_token_group_quant{fmt}<device::quant::Rounding::{policy}>"
    assert not wrappers and set(specs) <= set(ops.specs())


def _reference_group_quant():
    """SGLang's per_token_group_quant (benchmarks/utils.py's reference machinery: the wheel REFERENCE_WHEEL
    names, or the installed package), or a skip reported as not run."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    from utils import reference_ops

    module = reference_ops("quantization.per_token_group_quant")
    if module is None:
        pytest.skip("NOT RUN: the reference (SGLang) is absent: set REFERENCE_WHEEL=/path/to/sglang-*.whl")
    return module.per_token_group_quant


def _with_special_groups(x, group_size):
    """x with special values in groups of its first and last rows (at least 9 groups a row): NaN, +-inf, all
    zeros, all subnormal, |x| above 2^126 (fp16: its largest), all NaN, a small amax (fp16: one whose UE8M0
    multiplier overflows fp16) beside zeros; the last row: +inf and -inf together, NaN beside one finite value."""
    torch = _torch()
    tiny = {torch.float32: 1e-40, torch.bfloat16: 1e-39, torch.float16: 3e-6}[x.dtype]
    huge = {torch.float32: 2e38, torch.bfloat16: 2e38, torch.float16: 6e4}[x.dtype]
    small = {torch.float32: 1e-12, torch.bfloat16: 1e-12, torch.float16: 1e-3}[x.dtype]
    g = x.view(x.shape[0], -1, group_size)
    u = torch.rand(g.shape[-1], device=x.device) - 0.5
    g[0, 0, 3] = float("nan")
    g[0, 1, 7] = float("inf")
    g[0, 2, 0], g[0, 2, -1] = float("-inf"), float("nan")
    g[0, 3] = 0
    g[0, 3, ::2] = -0.0
    g[0, 4] = (u * 2 * tiny).to(x.dtype)
    g[0, 5] = (u * 2 * huge).to(x.dtype)
    g[0, 6] = float("nan")
    g[0, 7] = (u * 2 * small).to(x.dtype)
    g[0, 7, ::3] = 0
    g[0, 8] = (u * 2 * small).to(x.dtype)
    g[0, 8, 1] = tiny
    g[-1, 0, 1], g[-1, 0, 2] = float("inf"), float("-inf")
    g[-1, 1] = float("nan")
    g[-1, 1, 5] = 2.5
    return x


# (output dtype, scale layout, group size, hidden, input dtypes): fp32 scales row- and column-major (TMA-aligned),
# UE8M0 in both layouts (whole words of four exponents and a part-filled last word), int8; each configuration
# and input dtype is a module of the reference's to build.
SGLANG_CONFIGS = [("float8_e4m3fn", "row", 128, 7168, DTYPES), ("float8_e4m3fn", "column", 64, 2048, ["bfloat16", "float32"]),
                  ("ue8m0", "column", 128, 2048, DTYPES), ("ue8m0", "row", 64, 640, ["bfloat16", "float16"]), ("int8", "row", 64, 1024, DTYPES),
                  ("int8", "column", 128, 2048, ["bfloat16"])]
SGLANG_ROWS = (1, 7, 130, 1030, 4096)  # 16-bit fp8: each of the lean kernel's three launches


@pytest.mark.gpu
def test_sglang_rounding_is_the_references_bits():
    """rounding="sglang" gives SGLang's own per_token_group_quant kernel's codes and scales bit for bit, for
    bf16/fp16/fp32 inputs, SGLANG_CONFIGS' formats and layouts, 1 to 4096 rows, with special values
    (_with_special_groups). One test: the reference's modules (one per configuration) build in parallel first."""
    torch = _torch()
    from concurrent.futures import ThreadPoolExecutor

    from jitkern.ops import group_scales_like, per_token_group_quant_8bit, quant

    reference = _reference_group_quant()

    def run(config, dtype_name, rows, ours=True):
        qname, layout, group_size, hidden, _ = config
        x = _with_special_groups(_x((rows, hidden), dtype_name, seed=rows), group_size)
        ue8m0, column = qname == "ue8m0", layout == "column"
        qdtype = torch.int8 if qname == "int8" else torch.float8_e4m3fn
        q, s = (per_token_group_quant_8bit if ours else group_scales_and_codes_like)(
            x, group_size, qdtype, column_major_scales=column, scale_tma_aligned=column, scale_ue8m0=ue8m0, rounding="sglang")
        rq = torch.full_like(q.view(torch.uint8), 0x55).view(q.dtype)
        rs = torch.empty_strided(s.shape, s.stride(), dtype=s.dtype, device=s.device).view(torch.int32).fill_(0x55555555).view(s.dtype)
        reference(x, rq, rs, group_size, ue8m0)
        return x, (q, s), (rq, rs)

    def group_scales_and_codes_like(x, group_size, qdtype, *, rounding, **flags):
        return torch.empty(x.shape, dtype=qdtype, device=x.device), group_scales_like(x, group_size, **flags)

    quant._FAMILY.warmup(exports=[e for e in quant._FAMILY.params if e.startswith("per_token_group_quant") and e.endswith("_sglang")],
                         dtypes=DTYPES)
    with ThreadPoolExecutor(8) as pool:  # the reference's builds, one module per configuration and dtype
        list(pool.map(lambda cd: run(*cd, 1, ours=False), [(c, d) for c in SGLANG_CONFIGS for d in c[-1]]))
    failures = []
    for config, dtype_name, rows in [(c, d, r) for c in SGLANG_CONFIGS for d in c[-1] for r in SGLANG_ROWS]:
        x, (q, s), (rq, rs) = run(config, dtype_name, rows)
        qb, rqb = q.view(torch.uint8), rq.view(torch.uint8)
        if not torch.equal(qb, rqb):
            at = (qb != rqb).nonzero()[:3].tolist()
            failures.append(f"{config[:4]} {dtype_name} {rows} rows: {int((qb != rqb).sum())} codes differ, e.g. at {at}: "
                            f"x {[x[r, c].item() for r, c in at]} jitkern {[qb[r, c].item() for r, c in at]} reference "
                            f"{[rqb[r, c].item() for r, c in at]}")
        if not torch.equal(s.view(torch.int32), rs.view(torch.int32)):
            failures.append(f"{config[:4]} {dtype_name} {rows} rows: scales differ: {int((s.view(torch.int32) != rs.view(torch.int32)).sum())}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("qname", ["float8_e4m3fn", "ue8m0", "int8"])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_sglang_rounding_is_the_same_on_every_kernel(dtype_name, qname, group_size):
    """rounding="sglang" gives the same bits on misaligned rows (a warp a group, element by element), strided
    rows and contiguous ones (the lean kernel, or per_group_kernel between), special values included."""
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    flags = dict(dtype=torch.int8 if qname == "int8" else None, scale_ue8m0=qname == "ue8m0", rounding="sglang")
    for rows in (3, 130):
        x = _with_special_groups(_x((rows, 1152), dtype_name, seed=rows), group_size)
        wide = torch.zeros(rows, 1152 + 64, dtype=x.dtype, device="cuda")
        q, s = per_token_group_quant_8bit(x, group_size, **flags)
        for other in (wide[:, 1:1153], wide[:, 64:]):  # misaligned; strided
            other.copy_(x)
            oq, os_ = per_token_group_quant_8bit(other, group_size, **flags)
            assert torch.equal(oq.view(torch.uint8), q.view(torch.uint8)) and torch.equal(os_.view(torch.int32), s.view(torch.int32)), (rows, other.stride())


@pytest.mark.gpu
def test_sglang_rounding_compiled_and_from_a_graph():
    """rounding="sglang" reaches the kernels through torch.compile and from a CUDA graph (a group holding +inf
    takes SGLang's scale, inf, and codes, 0 for its finite values, where the exact rounding leaves +-inf out), and
    its torch op passes opcheck."""
    torch = _torch()
    from jitkern.ops import per_token_group_quant_8bit

    x = _x((64, 2048), "bfloat16")
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(64, 16, device="cuda")

    def check(q, s, what):
        assert torch.isinf(s[0, 1]) and torch.isfinite(s[1:]).all(), what
        assert (q[0, 128:256].view(torch.uint8)[x[0, 128:256].isfinite()] & 0x7F == 0).all(), what
        assert torch.isfinite(per_token_group_quant_8bit(x, 128)[1][0, 1]), what  # the exact rounding's finite amax

    def prepare(seed):
        x.copy_(_x(x.shape, "bfloat16", seed=seed))
        x[0, 130] = float("inf")

    eagerly_then_from_a_graph(prepare, lambda: per_token_group_quant_8bit(x, 128, rounding="sglang", output_q=q, output_s=s),
                              lambda what: check(q, s, what))
    prepare(0)
    compiled = torch.compile(lambda x: per_token_group_quant_8bit(x, 128, rounding="sglang"), fullgraph=True)(x)
    eager = per_token_group_quant_8bit(x, 128, rounding="sglang")
    assert torch.equal(compiled[0].view(torch.uint8), eager[0].view(torch.uint8)) and torch.equal(compiled[1], eager[1])
    check(*compiled, "compiled")
    finite = _x(x.shape, "bfloat16", seed=9)  # (opcheck compares outputs as numbers: NaN codes would differ from themselves)
    for ue8m0 in (False, True):
        torch.library.opcheck(torch.ops.jitkern.per_token_group_quant_8bit, (finite, 128, False, 1e-10, ue8m0, ue8m0, ue8m0, "sglang"))


# ---- RMSNorm + quantization ------------------------------------------------------------------------

# (40000, 128): narrow rows, as many as the plain norms take two to a lane group for (the quantizing norms keep one);
# (700, 3584): 16-bit rows rmsnorm folds onto half the threads from 4 rows an SM (norm_folded_kernel, the same sums)
NORM_SHAPES = [(1, 4096), (16, 4096), (64, 4096), (4097, 4096), (3, 1000), (5, 128), (40000, 128), (2, 65536), (7, 20), (3, 3584),
               (700, 3584), (700, 2560)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("static", [False, True])
def test_rmsnorm_quant_matches_rmsnorm_then_quant(dtype_name, shape, static):
    torch = _torch()
    from jitkern.ops import rmsnorm, rmsnorm_quant_fp8

    x = _x(shape, dtype_name)
    w = _x(shape[-1:], dtype_name, seed=1)
    y = rmsnorm(x, w, eps=1e-6)
    if static:
        scale = torch.tensor([0.02], device="cuda")
        q, s = rmsnorm_quant_fp8(x, w, 1e-6, scale=scale)
        assert s is scale
        _assert_q_equal(q, _quantize(y, scale))
    else:
        q, s = rmsnorm_quant_fp8(x, w, 1e-6)
        es = _scale(_finite_amax(y, -1), 1e-10)
        assert s.shape == (shape[0], 1) and torch.equal(s, es)
        _assert_q_equal(q, _quantize(y, es))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("static", [False, True])
def test_fused_add_rmsnorm_quant_matches_unfused(dtype_name, shape, static):
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm, fused_add_rmsnorm_quant_fp8

    x = _x(shape, dtype_name)
    r = _x(shape, dtype_name, seed=2)
    w = _x(shape[-1:], dtype_name, seed=1)
    x_ref, r_ref = x.clone(), r.clone()
    fused_add_rmsnorm(x_ref, r_ref, w, 1e-6)  # x_ref = rmsnorm(r + x), r_ref = r + x
    x_before = x.clone()
    scale = torch.tensor([0.05], device="cuda") if static else None
    q, s = fused_add_rmsnorm_quant_fp8(x, r, w, 1e-6, scale=scale)
    assert torch.equal(r, r_ref), "residual must be updated as fused_add_rmsnorm updates it"
    assert torch.equal(x, x_before), "input must be left as it was"
    es = scale if static else _scale(_finite_amax(x_ref, -1), 1e-10)
    if not static:
        assert torch.equal(s, es)
    _assert_q_equal(q, _quantize(x_ref, es))


@pytest.mark.gpu
def test_norm_quant_strided_3d_and_nan():
    torch = _torch()
    from jitkern.ops import rmsnorm, rmsnorm_quant_fp8

    big = _x((33, 4096 + 64), "bfloat16")
    x = big[:, 64:]
    w = _x((4096,), "bfloat16", seed=3)
    y = rmsnorm(x, w, eps=1e-5)
    q, s = rmsnorm_quant_fp8(x, w, 1e-5)
    assert torch.equal(s, _scale(_finite_amax(y, -1), 1e-10))
    _assert_q_equal(q, _quantize(y, s))
    x3 = _x((2, 3, 1024), "float16")
    w3 = _x((1024,), "float16", seed=4)
    q3, s3 = rmsnorm_quant_fp8(x3, w3)
    y3 = rmsnorm(x3.reshape(6, 1024), w3)
    assert q3.shape == (2, 3, 1024) and s3.shape == (2, 3, 1)
    _assert_q_equal(q3.reshape(6, 1024), _quantize(y3, s3.reshape(6, 1)))
    xn = _x((4, 4096), "bfloat16")
    xn[1, 7] = float("nan")
    qn, sn = rmsnorm_quant_fp8(xn, w)
    assert torch.isnan(qn[1].float()).all(), "a NaN in a row makes its norm NaN, and every q of the row NaN"
    assert not torch.isnan(qn[[0, 2, 3]].float()).any()


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [4096, 128, 20000])  # wide rows, narrow rows, rows wider than the registers
def test_norm_quant_inf_after_the_norm(hidden):
    """A huge weight overflows some normalised values to +-inf: they stay out of the row's amax and
    saturate, as the reference (rmsnorm, then the quantization) has them."""
    torch = _torch()
    from jitkern.ops import rmsnorm, rmsnorm_quant_fp8

    x = _x((8, hidden), "bfloat16")
    w = _x((hidden,), "bfloat16", seed=5)
    w[3:11] = 3e38
    y = rmsnorm(x, w, eps=1e-6)
    assert torch.isinf(y.float()).any() and not torch.isinf(y.float()).all(dim=-1).any()
    q, s = rmsnorm_quant_fp8(x, w, 1e-6)
    es = _scale(_finite_amax(y, -1), 1e-10)
    assert torch.equal(s, es)
    _assert_q_equal(q, _quantize(y, es))


@pytest.mark.gpu
def test_quant_ops_type_errors():
    torch = _torch()
    from jitkern.ops import per_tensor_quant_fp8, per_token_quant_fp8, rmsnorm_quant_fp8

    x = _x((4, 256), "bfloat16")
    with pytest.raises(TypeError, match="output_q"):
        per_token_quant_fp8(x, output_q=torch.empty(4, 256, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match="output_s"):
        per_tensor_quant_fp8(x, is_static=True)
    with pytest.raises(ValueError, match="output_q"):
        per_token_quant_fp8(x, output_q=torch.empty(4, 128, dtype=torch.float8_e4m3fn, device="cuda"))
    with pytest.raises(TypeError, match="weight"):
        rmsnorm_quant_fp8(x, torch.ones(256, device="cuda"))
    with pytest.raises(ValueError, match="scale"):
        rmsnorm_quant_fp8(x, torch.ones(256, dtype=torch.bfloat16, device="cuda"), scale=torch.ones(2, device="cuda"))


# ---- RMSNorm + per-group quantization --------------------------------------------------------------

# Wide rows held exactly (2048, 4096, 7168 bf16), held in part with a warp half-held (1152 bf16: 144 vectors
# on 64 threads, the third vector of lanes 0-15 only), wider than the registers (65536); narrow rows (128,
# 256: a lane group per row); many rows (5000: the token-rows kernel); 640: 5 groups of 128, 10 of 64
# (UE8M0 words with padding bytes).
GROUP_NORM_SHAPES = [(1, 2048), (7, 4096), (33, 7168), (9, 1152), (2, 65536), (5, 128), (300, 256), (5000, 4096), (3, 640)]
GROUP_LAYOUTS = {"row_major": {}, "column_major": dict(column_major_scales=True),
                 "tma_aligned": dict(column_major_scales=True, scale_tma_aligned=True),
                 "ue8m0": dict(column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=True),
                 "ue8m0_row_major": dict(scale_ue8m0=True)}


def _norm_group_unfused(x, residual, w, eps, group_size, flags):
    """jitkern's rmsnorm (or fused_add_rmsnorm, on copies) then per_token_group_quant_8bit. Returns (q, s,
    new residual or None)."""
    from jitkern.ops import fused_add_rmsnorm, per_token_group_quant_8bit, rmsnorm

    if residual is None:
        y, r = rmsnorm(x, w, eps=eps), None
    else:
        y, r = x.clone(), residual.clone()
        fused_add_rmsnorm(y, r, w, eps)
    q, s = per_token_group_quant_8bit(y, group_size, **flags)
    return q, s, r


# The fused ops add a row's sum of squares as one vector a thread adds it, where rmsnorm's kernel holds two or
# four vectors a thread (another order), so the sums may round one ulp apart: a normalised value then differs by an
# ulp where it sits at a rounding boundary (fp32: most values of such a row, by an fp32 ulp). Against
# rmsnorm then per_token_group_quant_8bit the codes are compared to within one step, the scales to within
# a few ulps of the input's dtype (UE8M0: one exponent step), and nearly all must be equal (the float64
# test below holds them to the exact values).

def _assert_q_close(q, expected, max_share=0.01):
    """NaN positions equal; every other code at most one fp8 step from the expected one; at most max_share
    of them differing."""
    torch = _torch()
    assert q.dtype == expected.dtype == torch.float8_e4m3fn and q.shape == expected.shape
    qn, en = torch.isnan(q.float()), torch.isnan(expected.float())
    assert torch.equal(qn, en), "NaN positions differ"
    a, b = q.view(torch.uint8)[~qn].int(), expected.view(torch.uint8)[~en].int()
    steps_from_zero = lambda c: torch.where(c >= 128, 128 - c, c)  # noqa: E731 - e4m3fn bytes in magnitude order, signed
    steps = (steps_from_zero(a) - steps_from_zero(b)).abs()
    assert steps.numel() == 0 or steps.max().item() <= 1, f"a code {steps.max().item()} steps away"
    share = (steps != 0).float().mean().item() if steps.numel() else 0.0
    assert share <= max_share, f"{share:.4f} of the codes differ"


def _assert_scales_close(s, expected, dtype):
    """The layout exact (shape, dtype, strides); fp32 scales within a few ulps of `dtype` (the input's: an
    ulp of the largest value, the products' roundings and the division's) and, for 16-bit inputs, 90% of
    them equal; UE8M0 exponents (and the packed words' zero padding) at most one step apart and 99% equal."""
    torch = _torch()
    assert s.shape == expected.shape and s.dtype == expected.dtype and s.stride() == expected.stride(), (s.shape, s.stride(), expected.stride())
    if s.dtype == torch.int32:
        # Copied into fresh tensors: a column-major [rows, 1] tensor counts as contiguous but keeps its stride.
        a, b = (torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t).view(torch.uint8).int() for t in (s, expected))
        assert (a - b).abs().max().item() <= 1 if a.numel() else True
        assert a.numel() == 0 or (a != b).float().mean().item() <= 0.01
        return
    assert torch.allclose(s, expected, rtol=4 * torch.finfo(dtype).eps, atol=0), "scales further apart than a few ulps of the input's dtype"
    if dtype != torch.float32 and s.numel():
        assert (s == expected).float().mean().item() >= 0.9, "most scales must be equal"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", GROUP_NORM_SHAPES)
@pytest.mark.parametrize("group_size", [64, 128])
@pytest.mark.parametrize("fused", [False, True])
def test_norm_group_quant_matches_norm_then_group_quant(dtype_name, shape, group_size, fused):
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, rmsnorm_group_quant_fp8

    x = _x(shape, dtype_name)
    w = _x(shape[-1:], dtype_name, seed=1)
    r = _x(shape, dtype_name, seed=2) if fused else None
    for layout, flags in GROUP_LAYOUTS.items():
        eq, es, er = _norm_group_unfused(x, r, w, 1e-6, group_size, flags)
        if fused:
            x_before, r_run = x.clone(), r.clone()
            q, s = fused_add_rmsnorm_group_quant_fp8(x, r_run, w, 1e-6, group_size=group_size, **flags)
            assert torch.equal(r_run, er), "residual must be updated as fused_add_rmsnorm updates it"
            assert torch.equal(x, x_before), "input must be left as it was"
        else:
            q, s = rmsnorm_group_quant_fp8(x, w, 1e-6, group_size=group_size, **flags)
        _assert_q_close(q, eq)
        _assert_scales_close(s, es, x.dtype)


def _uncertain_codes(y64, dtype, s, group_size, rel):
    """The fp8 codes of y64 [rows, H] (float64) rounded to `dtype` and divided by the group scales s
    [rows, groups] (fp32), with y64 moved by -rel and +rel (relative) first: what an fp32 computation of y
    within rel of the exact value can give. Returns (low codes, high codes) as uint8."""
    torch = _torch()
    rows, h = y64.shape
    codes = []
    for f in (1 - rel, 1 + rel):
        yt = (y64 * f).to(dtype).float().reshape(rows, h // group_size, group_size)
        codes.append((yt / s.reshape(rows, -1, 1)).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).reshape(rows, h))
    return codes


# fp32 rmsnorm against the exact one: the sum of squares (a few dozen terms a thread, then a tree), rsqrtf
# (2 ulp) and two products stay within about 2^-21; 2^-17 leaves a margin and few fp16 values ambiguous.
REL = 2.0**-17


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(16, 2048), (64, 7168), (3, 256)])
@pytest.mark.parametrize("group_size", [64, 128])
def test_norm_group_quant_against_float64(dtype_name, shape, group_size):
    """Against a float64 RMSNorm (rounded to the input's dtype, as the op rounds it) then the group
    quantization: scales equal, except where the group's largest |y| is within REL of a rounding
    boundary of the input's dtype (fp32 inputs: equal within REL); every code equal to the one both
    REL-neighbours of the exact y give, where they agree (the others, at rounding boundaries, are
    counted: at most a few percent)."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8

    dtype = getattr(torch, dtype_name)
    eps = 1e-6
    x, r, w = _x(shape, dtype_name), _x(shape, dtype_name, seed=2), _x(shape[-1:], dtype_name, seed=1)
    total = (x.double() + r.double()).to(dtype)  # the residual the op stores, rounded as fused_add_rmsnorm rounds it
    r_run = r.clone()
    q, s = fused_add_rmsnorm_group_quant_fp8(x, r_run, w, eps, group_size=group_size)
    assert torch.equal(r_run, total)
    t64 = total.double()
    y64 = t64 * torch.rsqrt(t64.square().mean(-1, keepdim=True) + eps) * w.double()
    rows, h = shape
    g = y64.reshape(rows, h // group_size, group_size)
    amax_lo = (g * (1 - REL)).to(dtype).float().abs().amax(-1)
    amax_hi = (g * (1 + REL)).to(dtype).float().abs().amax(-1)
    s_ref = _scale(g.to(dtype).float().abs().amax(-1), 1e-10)
    if dtype == torch.float32:
        assert torch.allclose(s, s_ref, rtol=2 * REL, atol=0)
    else:
        certain = amax_lo == amax_hi
        assert certain.float().mean().item() > 0.9, "most groups' amax must be away from a rounding boundary"
        assert torch.equal(s[certain], s_ref[certain]), "scales differ where the float64 amax is unambiguous"
    lo, hi = _uncertain_codes(y64, dtype, s, group_size, REL)
    qb = q.view(torch.uint8)
    agree = lo == hi
    assert torch.equal(qb[agree], lo[agree]), f"{(qb[agree] != lo[agree]).sum().item()} codes differ away from rounding boundaries"
    assert ((qb == lo) | (qb == hi)).all(), "codes at a boundary must be one of its neighbours'"
    assert agree.float().mean().item() > 0.95


@pytest.mark.gpu
def test_norm_group_quant_nan_inf_empty_and_3d():
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, rmsnorm_group_quant_fp8

    w = _x((4096,), "bfloat16", seed=3)
    x = _x((6, 4096), "bfloat16")
    x[1, 7] = float("nan")  # the whole normalised row is NaN: every code NaN, every scale the eps one
    x[2, 9] = float("inf")  # likewise (inf / inf)
    w_inf = w.clone()
    w_inf[3:11] = 3e38  # some normalised values overflow to +-inf: out of their group's amax, saturated
    for weight in (w, w_inf):
        for flags in GROUP_LAYOUTS.values():
            q, s = rmsnorm_group_quant_fp8(x, weight, 1e-6, **flags)
            eq, es, _ = _norm_group_unfused(x, None, weight, 1e-6, 128, flags)
            _assert_q_close(q, eq)
            _assert_scales_close(s, es, x.dtype)
    q, s = rmsnorm_group_quant_fp8(x, w, 1e-6)
    assert torch.isnan(q[1].float()).all() and not torch.isnan(q[[0, 3, 4, 5]].float()).any()
    assert (s[1] == _scale(torch.zeros(1, device="cuda"), 1e-10)).all()
    # Leading dimensions kept; empty inputs give empty outputs of the right shapes, without a launch.
    x3, r3 = _x((2, 3, 512), "float16"), _x((2, 3, 512), "float16", seed=1)
    w3 = _x((512,), "float16", seed=2)
    r3_flat = r3.reshape(6, 512).clone()
    q3, s3 = fused_add_rmsnorm_group_quant_fp8(x3, r3, w3, group_size=64)
    qf, sf = fused_add_rmsnorm_group_quant_fp8(x3.reshape(6, 512), r3_flat, w3, group_size=64)
    assert q3.shape == (2, 3, 512) and s3.shape == (2, 3, 8)
    _assert_q_equal(q3.reshape(6, 512), qf)
    assert torch.equal(s3.reshape(6, 8), sf) and torch.equal(r3.reshape(6, 512), r3_flat)
    for shape in ((0, 4096), (2, 0, 4096)):
        e = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
        for flags in GROUP_LAYOUTS.values():
            qe, se = rmsnorm_group_quant_fp8(e, w, **flags)
            assert qe.shape == shape and se.numel() == 0
            qe, se = fused_add_rmsnorm_group_quant_fp8(e, e.clone(), w, **flags)
            assert qe.shape == shape and se.numel() == 0
    # Strided rows (16-byte aligned): as the contiguous copy.
    big = _x((33, 4096 + 64), "bfloat16")
    xs = big[:, 64:]
    qs, ss = rmsnorm_group_quant_fp8(xs, w, column_major_scales=True, scale_tma_aligned=True)
    eq, es, _ = _norm_group_unfused(xs.contiguous(), None, w, 1e-6, 128, dict(column_major_scales=True, scale_tma_aligned=True))
    _assert_q_close(qs, eq)
    _assert_scales_close(ss, es, xs.dtype)


@pytest.mark.gpu
def test_norm_group_quant_errors():
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, per_token_group_quant_8bit, rmsnorm_group_quant_fp8

    x = _x((4, 512), "bfloat16")
    w = _x((512,), "bfloat16", seed=1)
    with pytest.raises(ValueError, match="group_size must be 64 or 128, got 32"):
        rmsnorm_group_quant_fp8(x, w, group_size=32)
    with pytest.raises(ValueError, match="group_size must be 64 or 128, got 0"):
        rmsnorm_group_quant_fp8(x, w, group_size=0)
    with pytest.raises(TypeError, match="group_size must be an int"):
        rmsnorm_group_quant_fp8(x, w, group_size=128.0)
    x200 = _x((4, 192), "bfloat16")
    with pytest.raises(ValueError, match=r"last dimension of input \(192\) must be a multiple of group_size \(128\)"):
        rmsnorm_group_quant_fp8(x200, _x((192,), "bfloat16"))
    with pytest.raises(ValueError, match=r"last dimension of input \(192\) must be a multiple of group_size \(128\)"):
        fused_add_rmsnorm_group_quant_fp8(x200, x200.clone(), _x((192,), "bfloat16"))
    misaligned = _x((4, 513), "bfloat16")[:, 1:]
    with pytest.raises(ValueError, match="needs input, weight at 16-byte aligned addresses"):
        rmsnorm_group_quant_fp8(misaligned, w)
    with pytest.raises(ValueError, match="needs input, residual, weight"):
        fused_add_rmsnorm_group_quant_fp8(x, _x((4, 513), "bfloat16")[:, 1:], w)
    with pytest.raises(TypeError, match="weight"):
        rmsnorm_group_quant_fp8(x, w.float())
    with pytest.raises(TypeError, match="output_q"):
        rmsnorm_group_quant_fp8(x, w, output_q=torch.empty(4, 512, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match="output_s"):  # 4 groups of 128 need 4 scales a row
        rmsnorm_group_quant_fp8(x, w, output_s=torch.empty(4, 2, device="cuda"))
    with pytest.raises(ValueError, match=r"output_s overlaps itself: its dimension 0 \(4 elements, stride 0\)"):
        rmsnorm_group_quant_fp8(x, w, output_s=torch.empty(1, 4, device="cuda").expand(4, 4))
    with pytest.raises(ValueError, match=r"output_s must be int32 \(four UE8M0 exponents a word\) with scale_ue8m0=True, got torch.float32"):
        rmsnorm_group_quant_fp8(x, w, scale_ue8m0=True, output_s=torch.empty(4, 4, device="cuda"))
    with pytest.raises(ValueError, match="fused_add_rmsnorm_group_quant_fp8\\(\\): output_s must be float32 with scale_ue8m0=False, got torch.int32"):
        fused_add_rmsnorm_group_quant_fp8(x, x.clone(), w, output_s=torch.empty(4, 1, dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="output_s must be float32 with scale_ue8m0=False"):
        per_token_group_quant_8bit(x, 128, output_s=torch.empty(4, 1, dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match=r"rmsnorm_group_quant_fp8\(\): scale_tma_aligned applies to column_major_scales=True only"):
        rmsnorm_group_quant_fp8(x, w, scale_tma_aligned=True)
    from jitkern.ops import quant

    m = quant._FAMILY.exports(torch.bfloat16)
    q8 = torch.empty(4, 512, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match=r"output_s must be int32 \(packed UE8M0 exponents\) for this export, got float32"):
        m.rmsnorm_group_quant_ue8m0_g128(x, w, q8, torch.empty(4, 4, device="cuda"), 128, 1e-6)
    with pytest.raises(ValueError, match="output_s must be float32 for this export, got int32"):
        m.fused_add_rmsnorm_group_quant_g128(x, x.clone(), w, q8, torch.empty(4, 1, dtype=torch.int32, device="cuda"), 128, 1e-6)
    # each group size's export is its own module, built for that size alone
    with pytest.raises(ValueError, match="group_size must be 128 for this export, got 64"):
        m.rmsnorm_group_quant_g128(x, w, q8, torch.empty(4, 8, device="cuda"), 64, 1e-6)
    with pytest.raises(ValueError, match="group_size must be 64 for this export, got 128"):
        m.fused_add_rmsnorm_group_quant_ue8m0_g64(x, x.clone(), w, q8, torch.empty(4, 1, dtype=torch.int32, device="cuda"), 128, 1e-6)


# Many-row launches: (dtype, hidden, group size); 5248 and 6400 bf16 and 1152 fp32 leave the last warp of a row
# part-held (bf16 from 4096 on: the many-row kernel under its launch bounds, NormGroupSchedule::kManyBoundThreads),
# 4096 fp32 is the widest row of one vector a thread, 64 bf16 groups of 8 vectors. (benchmarks/bench_quant.py
# `group` checks the other schedules of benchmarks/kernels/norm_group_schedules.cuh against the product.)
MANY_ROW_CASES = [("bfloat16", 7168, 128), ("bfloat16", 6400, 128), ("bfloat16", 5248, 128), ("bfloat16", 4096, 64), ("float16", 4096, 128),
                  ("float32", 4096, 128), ("float32", 1152, 128)]


def _many_rows():
    """Rows enough for the many-row launch (4 an SM), and an odd few more."""
    return 4 * _torch().cuda.get_device_properties(0).multi_processor_count + 5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,hidden,group_size", MANY_ROW_CASES)
def test_norm_group_quant_many_rows_give_the_bits_of_few(dtype_name, hidden, group_size):
    """The many-row launch gives, row for row, the codes, scales and residual that the same rows get in launches of
    fewer rows (the decode ones, fewer vectors a lane: an odd number of rows between one and four an SM, a few, one),
    bit for bit: their sums of squares are added in the same order."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, rmsnorm_group_quant_fp8

    flags = dict(column_major_scales=True, scale_tma_aligned=True)
    rows, few = _many_rows(), 9
    between = 2 * torch.cuda.get_device_properties(0).multi_processor_count + 1
    x, w, r = _x((rows, hidden), dtype_name), _x((hidden,), dtype_name, seed=1), _x((rows, hidden), dtype_name, seed=2)
    x[3, 5] = float("nan")  # a NaN row and an inf one: both launches write them alike
    x[7, 9] = float("inf")
    for fused in (False, True):
        def run(n):
            res = r[:n].clone() if fused else None
            q, s = (fused_add_rmsnorm_group_quant_fp8(x[:n], res, w, group_size=group_size, **flags) if fused else
                    rmsnorm_group_quant_fp8(x[:n], w, group_size=group_size, **flags))
            return q, s, res

        q, s, res = run(rows)
        for n in (between, few, 3, 1):  # 3, 1: the fused add's rows of more than 512 vectors over clusters of CTAs
            qf, sf, resf = run(n)
            _assert_q_equal(q[:n], qf)
            assert torch.equal(s[:n], sf), f"scales differ (fused={fused}, {n} rows)"
            if fused:  # bit for bit, NaN included
                bits = torch.int16 if res.element_size() == 2 else torch.int32
                assert torch.equal(res[:n].view(bits), resf.view(bits)), f"residual differs ({n} rows)"
        eq, es, _ = _norm_group_unfused(x, r if fused else None, w, 1e-6, group_size, flags)
        _assert_q_close(q, eq)  # and those bits are the op's
        _assert_scales_close(s, es, x.dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,hidden,rounding,ue8m0", [("bfloat16", 7168, "exact", False), ("float16", 4096, "sglang", True),
                                                             ("bfloat16", 2048, "exact", True)])
def test_norm_group_quant_eight_waves_of_many_rows_give_the_bits_of_few(dtype_name, hidden, rounding, ue8m0):
    """rmsnorm_group_quant_fp8 over eight waves of many rows (4 vectors a lane) gives, row for row, the bits of
    launches of 256 rows (2 vectors a lane), with either rounding and scale format."""
    torch = _torch()
    from jitkern.ops import rmsnorm_group_quant_fp8

    flags = dict(column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=ue8m0, rounding=rounding)
    rows = 8 * _many_rows() + 3
    x, w = _x((rows, hidden), dtype_name), _x((hidden,), dtype_name, seed=1)
    x[rows - 2, 5] = float("nan")
    x[rows - 1, 9] = float("inf")
    q, s = rmsnorm_group_quant_fp8(x, w, **flags)
    for first in range(0, rows, 256):
        qf, sf = rmsnorm_group_quant_fp8(x[first:first + 256], w, **flags)
        _assert_q_equal(q[first:first + 256], qf)
        assert torch.equal(s[first:first + 256], sf), f"scales differ from row {first}"


@pytest.mark.gpu
def test_norm_group_quant_many_rows_launch_the_group_rows_kernel():
    """The product's schedule (NormGroupSchedule): norm_group_rows_kernel with four vectors of a group a lane for
    rmsnorm_group_quant_fp8 and two for the fused add at many rows, the plain op's rows of 4096 to 7168 (exact
    rounding, fp32 scales) under launch bounds of 224 threads and 5 CTAs an SM, the sglang rounding's not; two and
    one vectors a lane at 256 rows, the plain op's rows of 7168 two a CTA there (of 6144 and 4096 one; no more rows
    than SMs one); up to 4 rows of the fused add wider than 512 vectors each over a cluster of CTAs
    (norm_group_cluster_kernel)."""
    import re

    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, rmsnorm_group_quant_fp8

    x = _x((_many_rows(), 7168), "bfloat16")
    w = _x((7168,), "bfloat16", seed=1)

    def launched(fn):
        names = launched_kernels(fn, "norm_wide_kernel", "norm_group_rows_kernel", "norm_group_cluster_kernel")
        assert len(names) == 1, names
        if "norm_group_cluster_kernel" in names[0]:
            return "cluster"
        lanes = re.findall(r"norm_group_rows_kernel(?:<[^,]+, 8, 128, |I\w+?Li8ELi128ELi)(\d+)", names[0])  # demangled or not
        if not lanes:
            return "one" if "norm_wide_kernel" in names[0] else names[0]
        # the last template arguments: kBoundThreads, kMinBlocks, kRows
        bounds_rows = re.search(r", (\d+), (\d+), (\d+)>|Li(\d+)ELi(\d+)ELi(\d+)EEEv", names[0])
        assert bounds_rows, names[0]
        threads, blocks, per_cta = (int(v) for v in bounds_rows.groups() if v is not None)
        return f"lanes{lanes[0]}" + (f" bounded {threads} {blocks}" if threads else "") + (f" rows{per_cta}" if per_cta > 1 else "")

    assert launched(lambda: rmsnorm_group_quant_fp8(x, w)) == "lanes4 bounded 224 5"
    assert launched(lambda: rmsnorm_group_quant_fp8(x, w, rounding="sglang")) == "lanes4"
    x4k, w4k = x[:, :4096].contiguous(), w[:4096].contiguous()
    assert launched(lambda: rmsnorm_group_quant_fp8(x4k, w4k)) == "lanes4 bounded 224 5"
    assert launched(lambda: rmsnorm_group_quant_fp8(x4k[:256], w4k)) == "lanes2"
    x6k, w6k = x[:256, :6144].contiguous(), w[:6144].contiguous()
    assert launched(lambda: rmsnorm_group_quant_fp8(x6k, w6k)) == "lanes2"
    assert launched(lambda: rmsnorm_group_quant_fp8(x[:torch.cuda.get_device_properties(0).multi_processor_count], w)) == "lanes2"
    assert launched(lambda: fused_add_rmsnorm_group_quant_fp8(x, x.clone(), w)) == "lanes2"
    assert launched(lambda: rmsnorm_group_quant_fp8(x[:256], w)) == "lanes2 rows2"
    assert launched(lambda: fused_add_rmsnorm_group_quant_fp8(x[:256], x[:256].clone(), w)) == "lanes1"
    assert launched(lambda: fused_add_rmsnorm_group_quant_fp8(x[:1], x[:1].clone(), w)) == "cluster"
    assert launched(lambda: fused_add_rmsnorm_group_quant_fp8(x[:4], x[:4].clone(), w)) == "cluster"
    assert launched(lambda: fused_add_rmsnorm_group_quant_fp8(x[:5], x[:5].clone(), w)) == "lanes1"
    assert launched(lambda: rmsnorm_group_quant_fp8(x[:1], w)) == "lanes2"
    x4, w4 = x[:1, :4096].contiguous(), w[:4096].contiguous()  # 512 vectors: not split
    assert launched(lambda: fused_add_rmsnorm_group_quant_fp8(x4, x4.clone(), w4)) == "lanes1"


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("tokens", [3, 64, 5000])
def test_norm_group_quant_reads_what_the_previous_kernel_wrote_from_a_graph(tokens, fused):
    """The op (fused: the fused add) after the kernel that writes its input (PDL), eagerly and replayed from a CUDA
    graph, into given outputs in the TMA-aligned UE8M0 layout."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, group_scales_like, rmsnorm_group_quant_fp8

    h = 7168
    src, r0 = _x((tokens, h), "bfloat16"), _x((tokens, h), "bfloat16", seed=9)
    x, r = torch.empty_like(src), torch.empty_like(r0)
    w = _x((h,), "bfloat16", seed=1)
    flags = dict(column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=True)
    q = torch.empty(tokens, h, dtype=torch.float8_e4m3fn, device="cuda")
    s = group_scales_like(x, 128, **flags)

    def prepare(seed):
        src.copy_(_x((tokens, h), "bfloat16", seed=seed) * (seed + 1))
        q.view(torch.uint8).fill_(0x7F)
        s.fill_(-1)

    def step():
        torch.mul(src, 1.0, out=x)
        if fused:
            r.copy_(r0)
            fused_add_rmsnorm_group_quant_fp8(x, r, w, 1e-6, output_q=q, output_s=s, **flags)
        else:
            rmsnorm_group_quant_fp8(x, w, 1e-6, output_q=q, output_s=s, **flags)

    def check(what):
        eq, es, er = _norm_group_unfused(x, r0 if fused else None, w, 1e-6, 128, flags)
        if fused:
            assert torch.equal(r, er), what
        _assert_q_close(q, eq)
        _assert_scales_close(s, es, x.dtype)

    eagerly_then_from_a_graph(prepare, step, check)


def _exactly_summed(shape, dtype_name, seed, bound=12):
    """Values k / 8 with |k| <= bound, exact in every input dtype: their squares (and those of sums of two) are
    multiples of 2^-6 and a row's sum of squares stays below 2^18, so fp32 adds it exactly in any order."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randint(-bound, bound + 1, shape, generator=g, device="cuda").float() / 8).to(getattr(torch, dtype_name))


# (rows, H) reaching each launch of the norm + group ops: a few 16-bit rows of the fused add over clusters of CTAs
# (norm_group_cluster_kernel), the group rows kernel at few rows, at an odd number between one and four an SM (two
# rows a CTA at 7168 bf16) and at many rows ("many": 4 an SM and 5 more; bf16 under its launch bounds), the norm
# kernels' launch (rows wider than 1024 vectors).
ROUNDING_SHAPES = [(1, 7168), (3, 5248), (9, 4096), (301, 7168), ("many", 4096), ("many", 7168), (3, 16384)]


@pytest.mark.gpu
@pytest.mark.parametrize("rounding", ["exact", "sglang"])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("rows,hidden", ROUNDING_SHAPES)
def test_norm_group_quant_is_norm_then_group_quant_bit_for_bit(rounding, fused, dtype_name, rows, hidden):
    """Rows whose sums of squares fp32 adds exactly (rmsnorm's order and the fused op's then give the same
    normalised row): the fused op writes the codes and scales of rmsnorm (or fused_add_rmsnorm) then
    per_token_group_quant_8bit with the same rounding, bit for bit, in every scale layout and both group sizes;
    a NaN row, an inf row, a zero row and normalised values overflowing to +-inf included."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, rmsnorm_group_quant_fp8

    rows = _many_rows() if rows == "many" else rows
    x, w = _exactly_summed((rows, hidden), dtype_name, 0), _x((hidden,), dtype_name, seed=1)
    r = _exactly_summed((rows, hidden), dtype_name, 2) if fused else None
    x[rows // 2, 5] = float("nan")
    x[rows - 1, 9] = float("inf")
    if rows > 2:
        x[1].zero_()
        if fused:
            r[1].zero_()
    w[3:11] = torch.finfo(w.dtype).max  # some normalised values overflow (fp32 rows: to +-inf through the weight)
    for group_size in (64, 128):
        for layout, flags in GROUP_LAYOUTS.items():
            flags = dict(flags, rounding=rounding)
            eq, es, er = _norm_group_unfused(x, r, w, 1e-6, group_size, flags)
            r_run = r.clone() if fused else None
            q, s = (fused_add_rmsnorm_group_quant_fp8(x, r_run, w, 1e-6, group_size=group_size, **flags) if fused else
                    rmsnorm_group_quant_fp8(x, w, 1e-6, group_size=group_size, **flags))
            where = f"{layout}, group {group_size}"
            _assert_q_equal(q, eq)
            assert s.stride() == es.stride() and torch.equal(s.view(torch.int32), es.view(torch.int32)), f"{where}: scales differ"
            if fused:
                bits = torch.int16 if r_run.element_size() == 2 else torch.int32
                assert torch.equal(r_run.view(bits), er.view(bits)), f"{where}: residual differs"


@pytest.mark.gpu
def test_norm_group_quant_rounding_argument():
    """rounding= takes "exact" (the default: the same bits as without it) or "sglang", anything else a ValueError
    naming it; the two differ where SGLang's multiply rounds another way than the division."""
    torch = _torch()
    from jitkern.ops import fused_add_rmsnorm_group_quant_fp8, rmsnorm_group_quant_fp8

    x, w = _x((4, 4096), "bfloat16"), _x((4096,), "bfloat16", seed=1)
    for bad in ("fast", "EXACT", None, 1):
        with pytest.raises(ValueError, match=r"rmsnorm_group_quant_fp8\(\): rounding must be one of 'exact', 'sglang', got"):
            rmsnorm_group_quant_fp8(x, w, rounding=bad)
        with pytest.raises(ValueError, match=r"fused_add_rmsnorm_group_quant_fp8\(\): rounding must be one of"):
            fused_add_rmsnorm_group_quant_fp8(x, x.clone(), w, rounding=bad)
    q, s = rmsnorm_group_quant_fp8(x, w)
    qe, se = rmsnorm_group_quant_fp8(x, w, rounding="exact")
    qs, ss = rmsnorm_group_quant_fp8(x, w, rounding="sglang")
    _assert_q_equal(q, qe)
    assert torch.equal(s, se)
    assert not torch.equal(q.view(torch.uint8), qs.view(torch.uint8)) or not torch.equal(s, ss), "sglang rounding gave the exact bits"


# ---- PyTorch integration ---------------------------------------------------------------------------

@pytest.mark.gpu
def test_opcheck_quant_ops():
    torch = _torch()
    import jitkern.ops  # noqa: F401

    x = _x((7, 512), "bfloat16")
    w = _x((512,), "bfloat16", seed=1)
    scale = torch.tensor([0.03], device="cuda")
    ops = torch.ops.jitkern
    torch.library.opcheck(ops.per_tensor_quant_fp8, (x, None))
    torch.library.opcheck(ops.per_tensor_quant_fp8, (x, scale))
    torch.library.opcheck(ops.per_token_quant_fp8, (x,))
    for cm, tma, ue in ((False, False, False), (True, True, False), (True, True, True)):
        torch.library.opcheck(ops.per_token_group_quant_8bit, (x, 128, False, 1e-10, cm, tma, ue))
    torch.library.opcheck(ops.per_token_group_quant_8bit, (x, 64, True, 1e-10, False, False, False))
    torch.library.opcheck(ops.rmsnorm_quant_fp8, (x, w, 1e-6, None))
    torch.library.opcheck(ops.rmsnorm_quant_fp8, (x, w, 1e-6, scale))
    torch.library.opcheck(ops.fused_add_rmsnorm_quant_fp8, (x, x.clone(), w, 1e-6, None))
    for group_size, cm, tma, ue in ((128, False, False, False), (64, True, True, False), (128, True, True, True)):
        for rounding in ("exact", "sglang"):
            torch.library.opcheck(ops.rmsnorm_group_quant_fp8, (x, w, 1e-6, group_size, cm, tma, ue, rounding))
            torch.library.opcheck(ops.fused_add_rmsnorm_group_quant_fp8, (x, x.clone(), w, 1e-6, group_size, cm, tma, ue, rounding))


@pytest.mark.gpu
def test_compiled_and_graph_captured_quant():
    """torch.compile(fullgraph=True) gives the eager results; the dynamic per-tensor paths (one CTA, split,
    memset + two launches) replay correctly from a CUDA graph."""
    torch = _torch()
    from jitkern.ops import (fused_add_rmsnorm_group_quant_fp8, fused_add_rmsnorm_quant_fp8, per_tensor_quant_fp8,
                             per_token_group_quant_8bit, rmsnorm_group_quant_fp8)

    def f(x, r, w):
        q, s = fused_add_rmsnorm_quant_fp8(x, r, w, 1e-6)
        gq, gs = per_token_group_quant_8bit(x, 128, column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=True)
        tq, ts = per_tensor_quant_fp8(x)
        nq, ns = rmsnorm_group_quant_fp8(x, w, 1e-6, group_size=64, column_major_scales=True, scale_tma_aligned=True)
        fq, fs = fused_add_rmsnorm_group_quant_fp8(x, r, w, 1e-6, scale_ue8m0=True)
        return q, s, gq, gs, tq, ts, nq, ns, fq, fs

    x, w = _x((9, 1024), "bfloat16"), _x((1024,), "bfloat16", seed=1)
    r = _x((9, 1024), "bfloat16", seed=2)
    r_eager = r.clone()
    eager = f(x, r_eager, w)
    r_compiled = r.clone()
    compiled = torch.compile(f, fullgraph=True)(x, r_compiled, w)
    assert torch.equal(r_eager, r_compiled)
    for a, b in zip(eager, compiled):
        assert a.shape == b.shape
        if a.dtype == torch.float8_e4m3fn:
            _assert_q_equal(b, a)
        else:
            assert torch.equal(a.contiguous(), b.contiguous())

    for shape in ((4, 4096), (16, 4096), (4097, 4096)):  # one CTA; split; memset + amax + quantize
        xs = _x(shape, "bfloat16")
        q = torch.empty(shape, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(1, device="cuda")
        per_tensor_quant_fp8(xs, q, s)  # loaded before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            per_tensor_quant_fp8(xs, q, s)
        xs.mul_(-2.5)
        s.fill_(1e30)
        graph.replay()
        torch.cuda.synchronize()
        es = _scale(_finite_amax(xs), 1e-10)
        assert torch.equal(s, es.reshape(1))
        _assert_q_equal(q, _quantize(xs, es))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256,), (3, 256), (2, 3, 256), (2, 2, 3, 256)])
def test_every_op_takes_the_shapes_models_pass(shape):
    """[..., hidden]: each op on a 1-4-D input gives the bits it gives on the [rows, hidden] view, and
    its outputs keep the input's leading dimensions."""
    torch = _torch()
    from jitkern.ops import (fused_add_rmsnorm_group_quant_fp8, fused_add_rmsnorm_quant_fp8, per_tensor_quant_fp8, per_token_group_quant_8bit,
                             per_token_quant_fp8, rmsnorm_group_quant_fp8, rmsnorm_quant_fp8)

    x = _x(shape, "bfloat16")
    flat = x.reshape(-1, shape[-1])
    lead = shape[:-1]
    w = _x((shape[-1],), "bfloat16")
    scale = torch.full((1,), 0.02, device="cuda")

    def same(got, expected, got_shape):
        assert got.shape == got_shape, (got.shape, got_shape)
        assert torch.equal(got.reshape(expected.shape).view(torch.uint8) if got.dtype == torch.float8_e4m3fn else got.reshape(expected.shape),
                           expected.view(torch.uint8) if expected.dtype == torch.float8_e4m3fn else expected)

    q, s = per_tensor_quant_fp8(x)
    fq, fs = per_tensor_quant_fp8(flat)
    same(q, fq, shape)
    assert torch.equal(s, fs)
    q, s = per_token_quant_fp8(x)
    fq, fs = per_token_quant_fp8(flat)
    same(q, fq, shape)
    same(s, fs, (*lead, 1))
    q, s = per_token_group_quant_8bit(x, 128)
    fq, fs = per_token_group_quant_8bit(flat, 128)
    same(q, fq, shape)
    same(s, fs, (*lead, 2))
    for static in (None, scale):
        q, s = rmsnorm_quant_fp8(x, w, scale=static)
        fq, fs = rmsnorm_quant_fp8(flat, w, scale=static)
        same(q, fq, shape)
        same(s, fs, (*lead, 1) if static is None else (1,))
        residual = _x(shape, "bfloat16", seed=1)
        flat_residual = residual.reshape(-1, shape[-1]).clone()
        q, s = fused_add_rmsnorm_quant_fp8(x, residual, w, scale=static)
        fq, fs = fused_add_rmsnorm_quant_fp8(flat, flat_residual, w, scale=static)
        same(q, fq, shape)
        same(residual, flat_residual, shape)
    for ue8m0 in (False, True):
        q, s = rmsnorm_group_quant_fp8(x, w, scale_ue8m0=ue8m0)
        fq, fs = rmsnorm_group_quant_fp8(flat, w, scale_ue8m0=ue8m0)
        same(q, fq, shape)
        same(s, fs, (*lead, 2) if not ue8m0 else fs.shape)
        residual = _x(shape, "bfloat16", seed=1)
        flat_residual = residual.reshape(-1, shape[-1]).clone()
        q, s = fused_add_rmsnorm_group_quant_fp8(x, residual, w, group_size=64, scale_ue8m0=ue8m0)
        fq, fs = fused_add_rmsnorm_group_quant_fp8(flat, flat_residual, w, group_size=64, scale_ue8m0=ue8m0)
        same(q, fq, shape)
        same(s, fs, (*lead, 4) if not ue8m0 else fs.shape)
        same(residual, flat_residual, shape)
