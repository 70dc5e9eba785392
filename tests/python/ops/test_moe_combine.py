"""The MoE combine family on the GPU: moe_sum and moe_weighted_sum against a float64 torch reference (strided
rows, unaligned hidden sizes, skipped experts, the shared expert, NaN), bad input, and the torch custom ops
(opcheck, torch.compile, CUDA graphs); without a GPU, the SASS of the weighted sum's ring kernels."""

import pytest

from conftest import eagerly_then_from_a_graph
from kernel_profile import launched_kernels

DTYPES = ["float16", "bfloat16", "float32"]
# One rounding of an fp32 sum: a unit in the last place of the dtype, with an absolute floor near 0.
TOL = {"float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2), "float32": (1e-5, 1e-5)}


def _torch():
    import torch

    return torch


def _close(actual, expected, dtype):
    torch = _torch()
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol)


def _weighted_reference(x, w, ids=None, shared=None, scale=1.0):
    """float64: scale * sum_j w[t, j] x[t, j] over ids >= 0, + shared, rounded to x's dtype."""
    keep = (ids >= 0).double() if ids is not None else 1.0
    y = ((w.double() * scale * keep).unsqueeze(-1) * x.double()).sum(1)
    if shared is not None:
        y = y + shared.double()
    return y.to(x.dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, topk, hidden", [(1, 8, 7168), (7, 2, 4096), (64, 1, 2048), (300, 6, 100), (0, 8, 512), (3, 64, 24)])
def test_moe_sum_matches_float64(dtype, tokens, topk, hidden):
    torch = _torch()
    from jitkern.ops import moe_sum

    x = torch.randn(tokens, topk, hidden, dtype=getattr(torch, dtype), device="cuda")
    out = moe_sum(x)
    assert out.shape == (tokens, hidden) and out.dtype == x.dtype
    _close(out, x.double().sum(1).to(x.dtype), dtype)


def _fma_rounded_once(a, b, c):
    """fp32 fma(a, b, c) of float32 tensors, rounded once: the product is exact in float64 and the sum is rounded
    to odd there (TwoSum's error moves an inexact result with an even last bit one ulp toward the exact sum), so
    its rounding to float32 is the exact sum's (a float64 sum rounded to nearest, then to float32, can round twice:
    1 + 2^-23 + 2^-24 - 2^-60 becomes 1 + 2^-22)."""
    torch = _torch()
    p, c = a.double() * b.double(), c.double()
    s = p + c
    back = s - p
    err = (p - (s - back)) + (c - back)
    nudge = (err != 0) & ((s.view(torch.int64) & 1) == 0) & torch.isfinite(s)
    toward = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    return torch.where(nudge, torch.nextafter(s, toward), s).float()


def _sequential_fma(x, w=None, ids=None, shared=None, scale=1.0):
    """The kernel's arithmetic, step by step: acc = fma(w_j * scale, x_j, acc) in fp32 over j in order (w_j = 1 without
    weights: an add), skipping ids < 0, + shared, one rounding; each fma rounded once (_fma_rounded_once)."""
    torch = _torch()
    acc = torch.zeros(x.shape[0], x.shape[2], dtype=torch.float32, device=x.device)
    for j in range(x.shape[1]):
        wj = (w[:, j].float() * scale).unsqueeze(-1).expand_as(acc) if w is not None else torch.ones_like(acc)
        step = _fma_rounded_once(wj, x[:, j].float(), acc)
        acc = torch.where((ids[:, j] >= 0).unsqueeze(-1), step, acc) if ids is not None else step
    if shared is not None:
        acc = acc + shared.float()
    return acc.to(x.dtype)


@pytest.mark.torch
def test_sequential_fma_rounds_each_step_once():
    """The reference's fma is the correctly rounded one where a float64 sum rounded again to float32 is not: after
    acc = 1 + 2^-23, w x = 2^-24 (1 - 2^-36) gives 1 + 2^-23 (the exact sum is just below the midpoint), not 1 + 2^-22;
    and a sum that is exact in float64 is unchanged."""
    torch = _torch()
    acc = 1 + 2**-23
    x = torch.tensor([[[acc, 3.0], [2**-12 * (1 - 2**-18), 0.5]]], dtype=torch.float32)
    w = torch.tensor([[1.0, 2**-12 * (1 + 2**-18)]], dtype=torch.float32)
    assert _sequential_fma(x, w).tolist() == [[acc, 3.0 + 2**-13]]


def _round_to_float32(q):
    """A rational rounded to the nearest float32 (ties to even; normal and subnormal range), as a Python float."""
    from fractions import Fraction

    if q == 0:
        return 0.0
    sign, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    n, rest = divmod(q, ulp)
    if rest > ulp / 2 or (rest == ulp / 2 and n % 2 == 1):
        n += 1
    return sign * float(n * ulp)


@pytest.mark.torch
def test_fma_reference_is_the_correctly_rounded_fma():
    """_fma_rounded_once against exact rational arithmetic: products and addends whose exponents lie up to about 100 apart
    (float64 sums inexact), sums 2^-60 to either side of a float32 tie, and a zero sum."""
    import random
    from fractions import Fraction

    torch = _torch()
    rng = random.Random(59)
    f32 = lambda v: torch.tensor(v, dtype=torch.float32).item()  # noqa: E731
    cases = [(f32(rng.uniform(-2, 2) * 2.0 ** rng.randint(-20, 20)), f32(rng.uniform(-2, 2) * 2.0 ** rng.randint(-20, 20)),
              f32(rng.uniform(-2, 2) * 2.0 ** rng.randint(-60, 60))) for _ in range(3000)]
    half_ulp_less = (2**-12 * (1 + 2**-18), 2**-12 * (1 - 2**-18))  # their product: 2^-24 - 2^-60
    for k in range(1, 9):  # 1 + k ulp, then half an ulp up less 2^-60 or down plus 2^-60: both parities and signs
        for s in (1, -1):
            cases.append((s * half_ulp_less[0], half_ulp_less[1], 1 + k * 2**-23))
            cases.append((-s * half_ulp_less[0], half_ulp_less[1], -(1 + k * 2**-23)))
    cases.append((3.0, 0.5, -1.5))
    a, b, c = (torch.tensor(column, dtype=torch.float32) for column in zip(*cases))
    got = _fma_rounded_once(a, b, c).tolist()
    want = [_round_to_float32(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in cases]
    assert got == want


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, topk, hidden", [(1, 8, 7168), (64, 9, 7168), (300, 64, 1024), (5, 17, 100), (2, 1, 8),
                                                  (70, 2, 4096), (300, 3, 512), (16, 8, 7168)])
def test_moe_sum_keeps_the_experts_order_bit_for_bit(dtype, tokens, topk, hidden):
    """The experts' rows are loaded several at once (a ring of 8 or 3 loads in flight, or 8 at once) but added in
    order: the same bits as one fp32 add after another (each schedule of the launch rule: decode T = 1, 2 and T = 16
    (8 at once), 16-byte vectors T = 64, 300, rows without 16-byte vectors; k below, at and past the ring's depth)."""
    torch = _torch()
    from jitkern.ops import moe_sum

    x = torch.randn(tokens, topk, hidden, dtype=getattr(torch, dtype), device="cuda") * 100
    assert torch.equal(moe_sum(x), _sequential_fma(x))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("tokens, topk, hidden", [(1, 8, 7168), (16, 8, 7168), (64, 12, 7168), (300, 20, 512), (3, 9, 36),
                                                  (2400, 4, 1024)])
def test_moe_weighted_sum_keeps_the_experts_order_bit_for_bit(dtype, tokens, topk, hidden):
    """fma(weight * scale, row, acc) over the experts in order, the skipped ones left out, then the shared row: the
    same bits as that sequence computed step by step, in each schedule (T = 2400: several waves)."""
    torch = _torch()
    from jitkern.ops import moe_weighted_sum

    t = getattr(torch, dtype)
    x = torch.randn(tokens, topk, hidden, dtype=t, device="cuda")
    w = torch.rand(tokens, topk, device="cuda")
    ids = torch.randint(0, 256, (tokens, topk), dtype=torch.int32, device="cuda")
    ids[::2, 3] = -1
    ids[1::2, topk - 1] = -1  # the last chunk's last expert
    ids[::5] = -1  # every expert of some tokens: the shared row alone
    x[ids < 0] = float("nan")
    s = torch.randn(tokens, hidden, dtype=t, device="cuda")
    out = moe_weighted_sum(x, w, ids, s, routed_scaling_factor=2.5)
    assert torch.equal(out, _sequential_fma(x, w, ids, s, 2.5))
    assert torch.equal(out[::5], s[::5])
    assert torch.equal(moe_weighted_sum(x[:, :, :0], w), torch.empty(tokens, 0, dtype=t, device="cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, hidden", [(1, 7168), (16, 7168), (64, 7168), (256, 7168), (2400, 1024), (1, 4104), (64, 4104),
                                            (3, 36)])
def test_eight_experts_without_ids_or_shared_row_bit_for_bit(dtype, tokens, hidden):
    """k = 8 without ids or shared row (bf16: the unrolled kernels, 8-byte vectors up to 18 tokens of 7168, 16-byte
    above; the weights shuffled from the lane that loaded each, strided rows of them): the same bits as one fma after
    another, at rows whose last warp is part past the row (4104 elements) and rows without vectors (36)."""
    torch = _torch()
    from jitkern.ops import moe_sum, moe_weighted_sum

    x = torch.randn(tokens, 8, hidden, dtype=getattr(torch, dtype), device="cuda") * 100
    w = torch.rand(tokens, 11, device="cuda")[:, 2:10]
    assert torch.equal(moe_weighted_sum(x, w, routed_scaling_factor=2.5), _sequential_fma(x, w, None, None, 2.5))
    assert torch.equal(moe_sum(x), _sequential_fma(x))


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 16, 256])
def test_eight_experts_take_the_unrolled_kernels_and_the_rest_the_runtime_k_schedules(tokens):
    """bf16 rows of k = 8 without ids or shared row run combine_kernel<..., k = 8> (8-byte vectors 8 in flight at 1 and
    16 tokens of 7168, 16-byte 4 in flight at 256); k = 6, ids, a shared row or fp16 rows the runtime-k schedules
    (kernel names from the profiler)."""
    import re

    torch = _torch()
    from jitkern.ops import moe_sum, moe_weighted_sum

    def kernel_of(fn):
        names = [n for n in launched_kernels(fn, "moe_combine") if "kernel" in n]
        assert len(names) == 1, names
        return names[0]

    def unrolled(name):  # (vector bytes, loads in flight, weighted) of combine_kernel<T, bytes, CTA, CTAs, depth, weighted, k = 8>
        m = re.search(r"combine_kernel<[^,]+, (\d+), \d+, \d+, (\d+), (true|false|\(bool\)[01]), 8>", name)
        return m and (int(m.group(1)), int(m.group(2)), m.group(3) in ("true", "(bool)1"))

    x = torch.randn(tokens, 8, 7168, dtype=torch.bfloat16, device="cuda")
    w = torch.rand(tokens, 8, device="cuda")
    ids = torch.zeros(tokens, 8, dtype=torch.int32, device="cuda")
    shared = torch.randn(tokens, 7168, dtype=torch.bfloat16, device="cuda")
    shape = (8, 8) if tokens <= 16 else (16, 4)
    assert unrolled(kernel_of(lambda: moe_sum(x))) == (*shape, False)
    assert unrolled(kernel_of(lambda: moe_weighted_sum(x, w))) == (*shape, True)
    for name in (kernel_of(lambda: moe_weighted_sum(x, w, ids)), kernel_of(lambda: moe_weighted_sum(x, w, None, shared)),
                 kernel_of(lambda: moe_sum(x[:, :6])), kernel_of(lambda: moe_weighted_sum(x[:, :6], w[:, :6])),
                 kernel_of(lambda: moe_sum(x.half())), kernel_of(lambda: moe_weighted_sum(x.half(), w))):
        assert not unrolled(name), name


@pytest.mark.toolchain
def test_unrolled_kernels_of_eight_experts_load_each_weight_once_and_spill_nothing(tmp_path):
    """Without a GPU: the bf16 modules' kernels (ptxas for sm_90a) spill nothing, and the k = 8 kernels (SASS) run
    straight through, no branch back: moe_weighted_sum's load the token's weights once, a 4-byte load a lane before
    the rows, shuffled to the warp at each expert's step, 3 (16-byte vectors: the 4th once the first row is added) or 8
    (8-byte) rows' loads issued before the first weight is applied (a weight loaded a ring slot, spilled at the 32-register cap, waited for its load in
    the loop: 7.21 against moe_sum's 4.66 us at 256 tokens of 8 x 7168 bf16 on an H200)."""
    import re

    import jitkern
    from sm90a_cubin import sass_functions, sass_tool, sm90a_cubin

    tool = sass_tool()
    if tool is None:
        pytest.skip("NOT RUN: nvcc with cuobjdump or nvdisasm is not installed")
    cubin, log = sm90a_cubin(tmp_path, "combine", f'#include "{jitkern.CSRC_DIR / "moe_combine.cuh"}"\n'
                             "void* entries[] = {(void*)&jitkern_moe_combine::MoeCombineOps<bf16_t>::moe_weighted_sum,"
                             " (void*)&jitkern_moe_combine::MoeCombineOps<bf16_t>::moe_sum};\n")
    spills = re.findall(r"(\d+) bytes spill stores", log)
    assert len(spills) == 12 and set(spills) == {"0"}, log  # 6 kernels a module
    bodies = sass_functions(tool, cubin, r"combine_kernel\w*Li8EE")  # k = 8
    assert len(bodies) == 4, sorted(bodies)  # 16-byte and 8-byte vectors, each op
    for name, body in bodies.items():
        code = [(int(at, 16), re.sub(r"^@!?P\w+\s+", "", op).strip()) for at, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)]
        ops = [op for _, op in code]
        assert not [at for at, op in code for target in re.findall(r"^BRA (?:`\(\S+\) )?0x([0-9a-f]+)", op) if int(target, 16) < at], name
        assert not [op for op in ops if op.startswith(("LDL", "STL"))], (name, ops)
        rows = [i for i, op in enumerate(ops) if re.match(r"LDG\.E\.(64|128) ", op)]
        assert len(rows) == 8, (name, ops)
        if "Lb1E" in name:  # the weighted sum's
            weights = [i for i, op in enumerate(ops) if re.match(r"LDG\.E(\.CONSTANT)? ", op)]
            shuffles = [i for i, op in enumerate(ops) if op.startswith("SHFL.IDX")]
            assert len(weights) == 1 and weights[0] < rows[1], (name, ops)
            assert len(shuffles) == 8 and rows[2 if "Li16E" in name else 7] < shuffles[0], (name, ops)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 64, 4096])
def test_chained_launches_replayed_from_a_graph(tokens):
    """moe_sum's output read at once by moe_weighted_sum (PDL: the second waits for the first whatever the place of
    the first's trigger and the schedule, which move with the grid: T = 1, 64, 4096), eagerly and from a CUDA graph."""
    torch = _torch()
    from jitkern.ops import moe_sum, moe_weighted_sum

    x = torch.empty(tokens, 8, 1024, dtype=torch.bfloat16, device="cuda")
    w = torch.empty(tokens, 1, device="cuda")
    summed = torch.empty(tokens, 1024, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(tokens, 1024, dtype=torch.bfloat16, device="cuda")

    def prepare(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x.copy_(torch.randn(tokens, 8, 1024, generator=g, device="cuda"))
        w.copy_(torch.rand(tokens, 1, generator=g, device="cuda"))
        summed.fill_(float("nan"))
        out.fill_(float("nan"))

    def step():
        moe_sum(x, summed)
        moe_weighted_sum(summed.view(tokens, 1, 1024), w, output=out)

    def check(what):
        expected = _sequential_fma(x)
        assert torch.equal(summed, expected), what
        assert torch.equal(out, _sequential_fma(expected.view(tokens, 1, 1024), w)), what

    prepare(0)
    step()  # builds the modules outside the capture
    eagerly_then_from_a_graph(prepare, step, check)


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [8, 3])
@pytest.mark.parametrize("ids_dtype", ["int32", "int64"])
def test_more_tokens_than_a_grid_holds(hidden, ids_dtype):
    """65535 tokens a launch (the grid's y): past them the rows, weights, ids (int32 or int64) and shared rows of the
    next launch start where the last one's ended (16-byte vectors and rows without them)."""
    torch = _torch()
    from jitkern.ops import moe_sum, moe_weighted_sum

    tokens, topk = 65535 + 700, 3
    x = torch.randn(tokens, topk, hidden, dtype=torch.bfloat16, device="cuda")
    w = torch.rand(tokens, topk, device="cuda")
    ids = torch.randint(0, 256, (tokens, topk), dtype=getattr(torch, ids_dtype), device="cuda")
    ids[1::7, 1] = -1
    s = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
    assert torch.equal(moe_sum(x), _sequential_fma(x))
    assert torch.equal(moe_weighted_sum(x, w, ids, s, routed_scaling_factor=0.5), _sequential_fma(x, w, ids, s, 0.5))


@pytest.mark.gpu
def test_eight_experts_past_a_grid_of_tokens():
    """The kernels built for k = 8 past 65535 tokens a launch: the next launch's rows and weights start where the last
    one's ended (a token's row one 16-byte vector: a lane of each warp in the row, the weighted sum's other 31 there for
    the shuffles)."""
    torch = _torch()
    from jitkern.ops import moe_sum, moe_weighted_sum

    tokens = 65535 + 700
    x = torch.randn(tokens, 8, 8, dtype=torch.bfloat16, device="cuda")
    w = torch.rand(tokens, 8, device="cuda")
    assert torch.equal(moe_sum(x), _sequential_fma(x))
    assert torch.equal(moe_weighted_sum(x, w, routed_scaling_factor=0.5), _sequential_fma(x, w, None, None, 0.5))


@pytest.mark.gpu
def test_moe_sum_writes_strided_rows_and_vllm_order():
    torch = _torch()
    from jitkern.ops import moe_sum

    big = torch.randn(9, 4, 2 * 1024, dtype=torch.bfloat16, device="cuda")
    x = big[:, :, 1024:]  # strided per token and per expert
    out_big = torch.full((9, 3000), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = out_big[:, 8:8 + 1024]
    assert moe_sum(x, out) is out
    _close(out, x.double().sum(1).to(torch.bfloat16), "bfloat16")
    assert torch.isnan(out_big[:, :8]).all() and torch.isnan(out_big[:, 8 + 1024:]).all(), "wrote outside the output's rows"
    odd = torch.randn(5, 3, 4099, dtype=torch.float16, device="cuda")[:, :, 3:]  # rows not 16-byte aligned
    _close(moe_sum(odd), odd.double().sum(1).to(torch.float16), "float16")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ids_dtype", ["int32", "int64", None])
@pytest.mark.parametrize("shared", [False, True])
def test_moe_weighted_sum_matches_float64(dtype, ids_dtype, shared):
    torch = _torch()
    from jitkern.ops import moe_weighted_sum

    tokens, topk, hidden = 33, 8, 7168
    t = getattr(torch, dtype)
    x = torch.randn(tokens, topk, hidden, dtype=t, device="cuda")
    w = torch.rand(tokens, topk, device="cuda")
    ids = None
    if ids_dtype is not None:
        ids = torch.randint(0, 256, (tokens, topk), dtype=getattr(torch, ids_dtype), device="cuda")
        ids[::3, 1] = -1  # experts of another rank
        x[::3, 1] = float("nan")  # never read: a skipped expert's row may hold anything
    s = torch.randn(tokens, hidden, dtype=t, device="cuda") if shared else None
    out = moe_weighted_sum(x, w, ids, s, routed_scaling_factor=2.5)
    expected = _weighted_reference(torch.nan_to_num(x), w, ids, s, 2.5)
    _close(out, expected, dtype)


@pytest.mark.gpu
def test_nan_and_inf_propagate():
    torch = _torch()
    from jitkern.ops import moe_sum, moe_weighted_sum

    x = torch.randn(4, 2, 256, dtype=torch.bfloat16, device="cuda")
    x[1, 0, 5] = float("nan")
    x[2, 1, 7] = float("inf")
    out = moe_sum(x)
    assert torch.isnan(out[1, 5]) and torch.isinf(out[2, 7])
    assert torch.isfinite(out[0]).all() and torch.isfinite(out[3]).all()
    y = moe_weighted_sum(x, torch.ones(4, 2, device="cuda"))
    assert torch.isnan(y[1, 5]) and torch.isinf(y[2, 7])


@pytest.mark.gpu
def test_bad_input_names_the_argument():
    torch = _torch()
    from jitkern.ops import moe_sum, moe_weighted_sum

    x = torch.randn(4, 2, 256, dtype=torch.bfloat16, device="cuda")
    w = torch.rand(4, 2, device="cuda")
    with pytest.raises(ValueError, match="input must be a \\[num_tokens, topk, hidden_size\\] tensor"):
        moe_sum(x[0])
    with pytest.raises(ValueError, match="output"):
        moe_sum(x, torch.empty(4, 128, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(TypeError, match="output: DType mismatch"):
        moe_sum(x, torch.empty(4, 256, dtype=torch.float16, device="cuda"))
    with pytest.raises(ValueError, match="output rows overlap: row stride 0 is smaller than the row width 256"):
        moe_sum(x, torch.empty(1, 256, dtype=torch.bfloat16, device="cuda").expand(4, 256))
    with pytest.raises(TypeError, match="topk_weights: DType mismatch"):
        moe_weighted_sum(x, w.to(torch.bfloat16))
    with pytest.raises(ValueError, match="topk_weights"):
        moe_weighted_sum(x, torch.rand(4, 3, device="cuda"))
    with pytest.raises(TypeError, match="topk_ids: DType mismatch"):
        moe_weighted_sum(x, w, torch.zeros(4, 2, dtype=torch.float32, device="cuda"))
    with pytest.raises(ValueError, match="shared_output"):
        moe_weighted_sum(x, w, None, torch.randn(4, 255, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match="routed_scaling_factor must be finite"):
        moe_weighted_sum(x, w, routed_scaling_factor=float("inf"))
    with pytest.raises(ValueError, match="topk .* must be 1-64"):
        moe_sum(torch.randn(2, 65, 8, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        moe_sum(x.to(torch.int32))
    with pytest.raises(ValueError, match="input"):
        moe_sum(x.cpu())


@pytest.mark.gpu
def test_torch_custom_ops_opcheck_compile_and_graphs():
    torch = _torch()
    import jitkern.ops  # noqa: F401  (registers torch.ops.jitkern)
    from jitkern.ops import moe_sum, moe_weighted_sum

    x = torch.randn(5, 4, 512, dtype=torch.bfloat16, device="cuda")
    w = torch.rand(5, 4, device="cuda")
    ids = torch.randint(-1, 8, (5, 4), dtype=torch.int32, device="cuda")
    shared = torch.randn(5, 512, dtype=torch.bfloat16, device="cuda")
    torch.library.opcheck(torch.ops.jitkern.moe_sum, (x,))
    torch.library.opcheck(torch.ops.jitkern.moe_sum_out, (x, torch.empty(5, 512, dtype=torch.bfloat16, device="cuda")))
    torch.library.opcheck(torch.ops.jitkern.moe_weighted_sum, (x, w, ids, shared, 1.5))
    torch.library.opcheck(torch.ops.jitkern.moe_weighted_sum, (x, w, None, None, 1.0))

    def combine(x, w, ids, shared):
        return moe_sum(x), moe_weighted_sum(x, w, ids, shared, routed_scaling_factor=2.0)

    compiled = torch.compile(combine, fullgraph=True, dynamic=True)
    for tokens in (3, 17):
        args = (torch.randn(tokens, 4, 512, dtype=torch.bfloat16, device="cuda"), torch.rand(tokens, 4, device="cuda"),
                torch.randint(-1, 8, (tokens, 4), dtype=torch.int64, device="cuda"),
                torch.randn(tokens, 512, dtype=torch.bfloat16, device="cuda"))
        got, ref = compiled(*args), combine(*args)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])

    state = {}
    out = torch.empty(64, 7168, dtype=torch.bfloat16, device="cuda")

    def prepare(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        state["x"] = state.get("x", torch.empty(64, 8, 7168, dtype=torch.bfloat16, device="cuda"))
        state["w"] = state.get("w", torch.empty(64, 8, device="cuda"))
        state["x"].copy_(torch.randn(64, 8, 7168, generator=g, device="cuda"))
        state["w"].copy_(torch.rand(64, 8, generator=g, device="cuda"))
        out.fill_(float("nan"))

    def step():
        moe_weighted_sum(state["x"], state["w"], output=out)

    def check(what):
        _close(out, _weighted_reference(state["x"], state["w"]), "bfloat16")

    prepare(0)
    step()  # loads the module outside the capture
    eagerly_then_from_a_graph(prepare, step, check)
