"""The MLA cache write family on the GPU: rows bit for bit [k_nope | k_rope] at their locations (fp8: the
quantization family's static rounding of them), the query concatenation likewise."""

import pytest
from conftest import eagerly_then_from_a_graph
from kv_cache_cases import cache_bytes, expected_cache, locations

DTYPES = ["float16", "bfloat16", "float32"]


def _torch():
    import torch

    return torch


def _ops():
    import jitkern.ops

    return jitkern.ops


def _fp8(x, scale):
    """The quantization family's rounding of x [rows, W] with a static scale."""
    torch = _torch()
    q, _ = _ops().per_tensor_quant_fp8(x.contiguous(), output_s=torch.tensor([scale], device="cuda"), is_static=True)
    return q


def _buffer(layout, slots, width, dtype, page_size=16):
    """A poisoned kv_buffer of `slots` rows: [slots, W], [slots, 1, W] or paged [P, page_size, 1, W]."""
    torch = _torch()
    shape = {"flat": (slots, width), "flat3d": (slots, 1, width), "paged": (slots // page_size, page_size, 1, width)}[layout]
    if dtype == torch.float8_e4m3fn:
        return torch.full(shape, 0x7F, dtype=torch.uint8, device="cuda").view(dtype)  # fp8 NaN
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def _halves(tokens, nope, rope, dtype, heads=0, seed=0, offset=0, pad=3):
    """k_nope [T, Dn], k_rope [T, Dr] as column slices of one buffer (rows of offset + Dn + Dr + pad: an odd
    offset or pad leaves them unaligned), and with heads, q_nope [T, H, Dn], q_rope [T, H, Dr] likewise."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    kv = torch.randn(tokens, offset + nope + rope + pad, dtype=dtype, device="cuda", generator=g)
    out = [kv[:, offset : offset + nope], kv[:, offset + nope : offset + nope + rope]]
    if heads:
        q = torch.randn(tokens, heads, offset + nope + rope, dtype=dtype, device="cuda", generator=g)
        out += [q[..., offset : offset + nope], q[..., offset + nope :]]
    return out


# (tokens, nope, rope, offset, pad): 512 + 64 with 16-byte aligned rows (pad 8) takes the fixed-row kernel.
CASES = [(dt, layout, fp8, *case) for dt in DTYPES for layout in ("flat", "flat3d", "paged") for fp8 in (False, True)
         for case in ((1, 512, 64, 0, 3), (37, 512, 64, 0, 3), (129, 512, 64, 0, 8), (300, 128, 64, 1, 3), (5, 64, 8, 0, 3))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,layout,fp8,tokens,nope,rope,offset,pad", CASES)
def test_kv_rows_and_query(dtype_name, layout, fp8, tokens, nope, rope, offset, pad):
    """kv_buffer[loc] = [k_nope | k_rope] (out-of-range locations and the reserved slot skipped, other rows
    untouched); the query [q_nope | q_rope] returned, in the cache's kind (fp8 with its own scale)."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    slots = 16 * ((tokens + 40) // 16 + 1)
    buf = _buffer(layout, slots, nope + rope, torch.float8_e4m3fn if fp8 else dtype)
    loc = locations(tokens, slots, torch.int64 if tokens % 2 else torch.int32, seed=tokens)
    k_nope, k_rope, q_nope, q_rope = _halves(tokens, nope, rope, dtype, heads=4, seed=tokens, offset=offset, pad=pad)
    before = cache_bytes(buf, slots).clone()
    k_scale, q_scale = (0.05, 0.1) if fp8 else (None, None)
    skip = int(loc[0]) if tokens > 1 else -5  # a location of the batch as the reserved one
    ops.set_mla_kv_buffer(buf, loc, k_nope, k_rope, reserved_skip_index=skip, k_scale=k_scale)
    rows = torch.cat([k_nope, k_rope], dim=-1)
    if fp8:
        rows = _fp8(rows, k_scale)
    kept = loc != skip
    assert torch.equal(cache_bytes(buf, slots), expected_cache(before, cache_bytes(rows, tokens)[kept], loc[kept]))
    buf2 = _buffer(layout, slots, nope + rope, torch.float8_e4m3fn if fp8 else dtype)
    q = ops.set_mla_kv_concat_q(buf2, loc, k_nope[:, None], k_rope[:, None], q_nope, q_rope, k_scale=k_scale, q_scale=q_scale)
    assert torch.equal(cache_bytes(buf2, slots), expected_cache(before, cache_bytes(rows, tokens), loc))
    expected_q = torch.cat([q_nope, q_rope], dim=-1)
    if fp8:
        expected_q = _fp8(expected_q.reshape(tokens * 4, -1), q_scale).view(tokens, 4, -1)
    assert q.dtype == expected_q.dtype and q.shape == (tokens, 4, nope + rope) and torch.equal(q.view(torch.uint8), expected_q.view(torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("tokens", [1, 16, 256, 1200, 4096])
def test_deepseek_rows_at_decode_and_prefill_sizes(tokens, fp8):
    """DeepSeek-V3's 512 + 64 bf16 rows and 16 query heads from one CTA to many waves: the rows of kept
    locations bit for bit (fp8: the quantization family's rounding), the reserved and out-of-range ones
    skipped, the rest of the cache untouched."""
    torch = _torch()
    ops = _ops()
    slots = 8192
    buf = _buffer("flat3d", slots, 576, torch.float8_e4m3fn if fp8 else torch.bfloat16)
    loc = locations(tokens, slots, torch.int32 if tokens % 3 else torch.int64, seed=tokens)
    k_nope, k_rope, q_nope, q_rope = _halves(tokens, 512, 64, torch.bfloat16, heads=16, seed=tokens, pad=0)  # slices of [T, 576]
    before = cache_bytes(buf, slots).clone()
    k_scale, q_scale = (0.25, 0.5) if fp8 else (None, None)
    skip = int(loc[-2]) if tokens > 1 else -5
    q = ops.set_mla_kv_concat_q(buf, loc, k_nope, k_rope, q_nope, q_rope, reserved_skip_index=skip, k_scale=k_scale, q_scale=q_scale)
    rows = torch.cat([k_nope, k_rope], dim=-1)
    expected_q = torch.cat([q_nope, q_rope], dim=-1)
    if fp8:
        rows = _fp8(rows, k_scale)
        expected_q = _fp8(expected_q.reshape(tokens * 16, -1), q_scale).view(tokens, 16, -1)
    kept = loc != skip
    assert torch.equal(cache_bytes(buf, slots), expected_cache(before, cache_bytes(rows, tokens)[kept], loc[kept]))
    assert torch.equal(q.view(torch.uint8), expected_q.view(torch.uint8))
    buf2 = _buffer("flat3d", slots, 576, torch.float8_e4m3fn if fp8 else torch.bfloat16)
    ops.set_mla_kv_buffer(buf2, loc, k_nope, k_rope, reserved_skip_index=skip, k_scale=k_scale)
    assert torch.equal(cache_bytes(buf2, slots), expected_cache(before, cache_bytes(rows, tokens)[kept], loc[kept]))


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("layout", ["flat", "paged", "paged with gaps"])
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_fixed_rows_at_any_location(dtype_name, layout, index_dtype):
    """set_mla_kv_buffer's 512 + 64 rows (the rows kernel where cache rows lie one stride apart, the general
    one across page gaps): locations from a strided tensor, out of range ones skipped (int64 ones 2^32 past a
    kept slot too, not wrapped onto it), a reserved index 2^32 past a kept slot skipping nothing, the rows
    between pages untouched."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    tokens, slots, page = 45, 96, 16
    if layout == "paged with gaps":
        whole = torch.full((slots // page, page + 1, 1, 576), float("nan"), dtype=dtype, device="cuda")
        buf = whole[:, :page]
    else:
        buf = whole = _buffer("flat" if layout == "flat" else "paged", slots, 576, dtype)
    loc = locations(tokens, slots, getattr(torch, index_dtype), seed=7)
    if index_dtype == "int64":
        loc[5], loc[6] = 2**32 + int(loc[7]), int(loc[8]) - 2**32
    strided = torch.zeros(2 * tokens, dtype=loc.dtype, device="cuda")
    strided[::2] = loc
    k_nope, k_rope = _halves(tokens, 512, 64, dtype, seed=3, pad=0)
    before = cache_bytes(buf, slots).clone()
    ops.set_mla_kv_buffer(buf, strided[::2], k_nope, k_rope, reserved_skip_index=2**32 + int(loc[3]))
    rows = cache_bytes(torch.cat([k_nope, k_rope], dim=-1), tokens)
    assert torch.equal(cache_bytes(buf, slots), expected_cache(before, rows, loc))
    ops.set_mla_kv_buffer(buf, strided[::2], k_nope * 2, k_rope * 2, reserved_skip_index=int(loc[3]))
    kept = loc != loc[3]
    twice = cache_bytes(torch.cat([k_nope * 2, k_rope * 2], dim=-1), tokens)
    assert torch.equal(cache_bytes(buf, slots), expected_cache(expected_cache(before, rows, loc), twice[kept], loc[kept]))
    if layout == "paged with gaps":
        assert torch.isnan(whole[:, page]).all(), "a row between pages was written"


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_negative_locations_are_skipped_in_a_cache_of_over_2_31_slots(index_dtype):
    """A cache of 2^32 - 2 slots (fp8 rows of two values: 8 GiB; a stride-0 cache is refused): negative locations
    are skipped, an int32 one not read as 2^32 - k (the rows kernel compares locations as unsigned; int32 ones only
    below 2^31 slots)."""
    torch = _torch()
    ops = _ops()
    cache = torch.zeros(2**32 - 2, 2, dtype=torch.uint8, device="cuda")  # float8_e4m3fn bytes
    loc = torch.tensor([-3, -1000, -(2**31)], dtype=getattr(torch, index_dtype), device="cuda")
    k_nope, k_rope = _halves(3, 1, 1, torch.bfloat16, seed=5, pad=0)
    ops.set_mla_kv_buffer(cache, loc, k_nope, k_rope, reserved_skip_index=-1)
    torch.cuda.synchronize()
    assert not cache.any(), "a negative location was written"
    with pytest.raises(ValueError, match=r"kv_buffer overlaps itself: its dimension 0 \(4294967294 elements, stride 0\)"):
        ops.set_mla_kv_buffer(cache[:1].expand(2**32 - 2, 2), loc, k_nope, k_rope, reserved_skip_index=-1)


@pytest.mark.gpu
def test_empty_and_cuda_graph_replay():
    torch = _torch()
    ops = _ops()
    buf = _buffer("paged", 64, 576, torch.bfloat16)
    empty = torch.empty(0, 512, dtype=torch.bfloat16, device="cuda")
    ops.set_mla_kv_buffer(buf, torch.empty(0, dtype=torch.int64, device="cuda"), empty, empty[:, :64])
    torch.cuda.synchronize()
    assert torch.isnan(buf).all()
    tokens = 6
    k_nope, k_rope, q_nope, q_rope = (torch.zeros_like(x) for x in _halves(tokens, 512, 64, torch.bfloat16, heads=16))
    loc = torch.zeros(tokens, dtype=torch.int64, device="cuda")
    state = {}
    ops.warmup(ops=["set_mla_kv_concat_q"], dtypes=[torch.bfloat16])

    def prepare(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        for x in (k_nope, k_rope, q_nope, q_rope):
            x.copy_(torch.randn(x.shape, generator=g, device="cuda"))
        loc.copy_(torch.randperm(64, generator=g, device="cuda")[:tokens])

    def step():
        state["q"] = ops.set_mla_kv_concat_q(buf, loc, k_nope, k_rope, q_nope, q_rope)

    def check(what):
        assert torch.equal(buf.view(64, -1)[loc], torch.cat([k_nope, k_rope], -1)), what
        assert torch.equal(state["q"], torch.cat([q_nope, q_rope], -1)), what

    eagerly_then_from_a_graph(prepare, step, check)


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    torch = _torch()
    ops = _ops()
    buf = _buffer("flat", 32, 576, torch.bfloat16)
    k_nope, k_rope, q_nope, q_rope = _halves(4, 512, 64, torch.bfloat16, heads=8)
    loc = torch.arange(4, device="cuda") + 1

    def step(q_nope):
        ops.set_mla_kv_buffer(buf, loc, k_nope, k_rope)
        return ops.set_mla_kv_concat_q(buf, loc, k_nope, k_rope, q_nope * 2, q_rope) + 1

    out = torch.compile(step, fullgraph=True)(q_nope)
    assert torch.equal(out, torch.cat([q_nope * 2, q_rope], -1) + 1)
    assert torch.equal(buf[loc], torch.cat([k_nope, k_rope], -1))
    torch.library.opcheck(torch.ops.jitkern.set_mla_kv_concat_q, (buf, loc, k_nope, k_rope, q_nope, q_rope, -1, 1.0, 1.0))


@pytest.mark.gpu
def test_bad_arguments_are_named():
    torch = _torch()
    ops = _ops()
    buf = _buffer("flat", 8, 576, torch.bfloat16)
    k_nope, k_rope, q_nope, q_rope = _halves(4, 512, 64, torch.bfloat16, heads=2)
    loc = torch.arange(4, device="cuda")
    with pytest.raises(TypeError, match="k_rope"):
        ops.set_mla_kv_buffer(buf, loc, k_nope, k_rope.half())
    with pytest.raises(ValueError, match="kv_buffer must be"):
        ops.set_mla_kv_buffer(buf[:, :500], loc, k_nope, k_rope)
    with pytest.raises(ValueError, match=r"loc: Size mismatch"):
        ops.set_mla_kv_buffer(buf, loc[:3], k_nope, k_rope)
    with pytest.raises(TypeError, match="kv_buffer must have the inputs' dtype"):
        ops.set_mla_kv_buffer(buf.half(), loc, k_nope, k_rope)
    with pytest.raises(ValueError, match="k_scale and q_scale apply to float8_e4m3fn outputs only"):
        ops.set_mla_kv_buffer(buf, loc, k_nope, k_rope, k_scale=2.0)
    with pytest.raises(ValueError, match="q_rope"):
        ops.set_mla_kv_concat_q(buf, loc, k_nope, k_rope, q_nope, q_rope[:, :1])
    with pytest.raises(TypeError, match=r"set_mla_kv_concat_q\(\): q_nope must be a tensor, got NoneType"):
        ops.set_mla_kv_concat_q(buf, loc, k_nope, k_rope, None, q_rope)
    with pytest.raises(ValueError, match="kv_buffer overlaps itself"):
        ops.set_mla_kv_buffer(buf[:1].expand_as(buf), loc, k_nope, k_rope)
    with pytest.raises(TypeError, match="cache_k_rope: DType mismatch"):
        ops.set_mla_kv_buffer(buf, loc, k_nope, k_rope.half())
    assert torch.isnan(buf).all(), "a refused call wrote"


@pytest.mark.toolchain
def test_rows_kernel_loads_before_its_trigger_and_checks_after(tmp_path):
    """mla_kv_rows_kernel (SASS for sm_90a): between the PDL wait and the trigger after it (the kernel's only
    one, or a second one, without effect, where it triggers at its start), the location's and the whole row's
    loads, no branch or exit and nothing reading what they load, the location's check after it (ptxas moves a
    row's loads past the check where nothing holds them, and an instruction reading the location ahead of
    the trigger delays the next launch by the load's latency)."""
    import re

    import jitkern
    from sm90a_cubin import sass_functions, sass_tool, sm90a_cubin

    tool = sass_tool()
    if tool is None:
        pytest.skip("NOT RUN: nvcc with cuobjdump or nvdisasm is not installed")
    cubin, _ = sm90a_cubin(tmp_path, "rows", f'#include "{jitkern.CSRC_DIR / "mla_cache.cuh"}"\nusing namespace jitkern_mla_cache;\n'
                             "void* k[] = {(void*)&mla_kv_rows_kernel<1024, 128, int64_t, false>, (void*)&mla_kv_rows_kernel<1024, 128, int32_t, false>,"
                             " (void*)&mla_kv_rows_kernel<2048, 256, int64_t, false>, (void*)&mla_kv_rows_kernel<1024, 128, int64_t, true>,"
                             " (void*)&mla_kv_rows_kernel<1024, 128, int32_t, true>, (void*)&mla_kv_rows_kernel<2048, 256, int64_t, true>};\n")
    bodies = sass_functions(tool, cubin, "mla_kv_rows_kernel")
    assert len(bodies) == 6, sorted(bodies)
    for name, body in bodies.items():
        # instructions as (opcode, operands), addresses, encodings and predicates left out
        lines = [re.sub(r"^@!?U?P\w+\s+", "", re.sub(r"/\*.*?\*/", "", line).split(";")[0].strip()) for line in body.splitlines()]
        code = [(op, [o.strip() for o in rest.split(",")]) for op, _, rest in (line.partition(" ") for line in lines) if re.match(r"[A-Z]{2,}", op)]
        wait = next(i for i, (op, _) in enumerate(code) if op == "ACQBULK")
        trigger = next(i for i, (op, _) in enumerate(code) if op == "PREEXIT" and i > wait)
        assert [op for op, _ in code[:wait]].count("PREEXIT") == ("Lb1E" in name), name  # the trigger at the start
        between = code[wait:trigger]
        loads = 6 if "2048" in name else 4  # the location, k_nope's 16-byte vectors, k_rope's word
        assert sum(op.startswith("LDG") for op, _ in between) == loads, (name, between)
        assert not any(op in ("EXIT", "BRA") for op, _ in between), (name, between)
        loaded = set()
        for op, operands in between:
            registers = [{int(r) for r in re.findall(r"\bR(\d+)", o)} for o in operands]
            if op.startswith("LDG"):
                first = min(registers[0])
                loaded |= set(range(first, first + {"64": 2, "128": 4}.get(op.split(".")[-1], 1)))
            else:
                assert not set().union(*registers[1:]) & loaded, (name, op, operands)
        after = [op for op, _ in code[trigger:]]
        assert "EXIT" in after[:next(i for i, op in enumerate(after) if op.startswith("STG"))], (name, after)  # the check
