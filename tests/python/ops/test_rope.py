"""The RoPE family (with its fused KV-cache write) on the GPU against a float64 torch reference, the fp8
cache against the quantization family's rounding."""

import pytest
from conftest import eagerly_then_from_a_graph
from kv_cache_cases import cache_bytes, expected_cache, locations, reference_kernel

TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-5)}
DTYPES = ["float16", "bfloat16", "float32"]
HEAD_DIMS = [64, 80, 96, 128, 256]
MAX_POS = 4096
HQ, HK = 32, 8


def _torch():
    import torch

    return torch


def _ops():
    import jitkern.ops

    return jitkern.ops


def _cos_sin(rot, max_pos=MAX_POS, device="cuda"):
    torch = _torch()
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().to(device)


def _reference(x, positions, cos_sin, neox):
    """x [T, H, D] rotated over its first R columns, in float64."""
    torch = _torch()
    rot = cos_sin.shape[1]
    half = rot // 2
    cs = cos_sin.double()[positions.long()]
    cos, sin = cs[:, None, :half], cs[:, None, half:]
    out = x.double().clone()
    r = out[..., :rot]
    if neox:
        x1, x2 = r[..., :half], r[..., half:]
        out[..., :rot] = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        out[..., :rot] = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return out


def _reference_in_dtype(x, positions, cos_sin, neox):
    """x [T, H, D] rotated over its first R columns the way the reference framework's torch reference for
    rotary_embedding computes it: in x's dtype, every product rounded, then the sum (cos_sin in x's dtype)."""
    torch = _torch()
    half = cos_sin.shape[1] // 2
    cs = cos_sin.index_select(0, positions.flatten().long())
    cos, sin = cs[:, None, :half], cs[:, None, half:]
    r, rest = x[..., : 2 * half], x[..., 2 * half :]
    if neox:
        x1, x2 = r[..., :half], r[..., half:]
        rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        rotated = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([rotated, rest], dim=-1)


def _assert_close(actual, expected, dtype_name):
    torch = _torch()
    rtol, atol = TOL[dtype_name]
    assert not torch.isnan(actual).any(), "NaN (an unwritten or poisoned element)"
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol)


def _qkv(tokens, d, dtype, seed=0):
    """One fused qkv buffer [T, (HQ + 2 HK) * D] and its q, k, v column slices ([T, H * D], strided)."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = torch.randn(tokens, (HQ + 2 * HK) * d, dtype=dtype, device="cuda", generator=g)
    return qkv, qkv[:, : HQ * d], qkv[:, HQ * d : (HQ + HK) * d], qkv[:, (HQ + HK) * d :]


def _positions(tokens, index_dtype, max_pos=MAX_POS, seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, max_pos, (tokens,), device="cuda", generator=g).to(index_dtype)


ROPE_CASES = [(dt, d, full, neox, t) for dt in DTYPES for d in HEAD_DIMS for full in (True, False) for neox in (True, False)
              for t in (1, 7, 300)]
ROPE_CASES += [("bfloat16", 128, True, neox, 8192) for neox in (True, False)] + [("float16", 64, False, True, 4097)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,head_dim,full,neox,tokens", ROPE_CASES)
def test_rope_in_place_on_fused_qkv(dtype_name, head_dim, full, neox, tokens):
    """q, k column slices of one qkv buffer (GQA 32/8), rotary dim = head dim or half of it, both styles;
    v and the unrotated columns are left alone."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    rot = head_dim if full else head_dim // 2
    qkv, q, k, v = _qkv(tokens, head_dim, dtype, seed=tokens)
    before = qkv.clone()
    pos = _positions(tokens, torch.int64 if tokens % 2 else torch.int32, seed=head_dim)
    cs = _cos_sin(rot)
    eq = _reference(q.view(tokens, HQ, head_dim), pos, cs, neox)
    ek = _reference(k.view(tokens, HK, head_dim), pos, cs, neox)
    if tokens % 2:
        ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, head_size=head_dim, cos_sin_cache=cs, is_neox=neox)
    else:  # the [T, H, D] form
        q3, k3 = q.view(tokens, HQ, head_dim), k.view(tokens, HK, head_dim)
        assert ops.rotary_embedding(pos, q3, k3, head_dim, cs, neox) == (q3, k3)
    _assert_close(q.view(tokens, HQ, head_dim), eq, dtype_name)
    _assert_close(k.view(tokens, HK, head_dim), ek, dtype_name)
    assert torch.equal(v, before[:, (HQ + HK) * head_dim :]), "v changed"
    if not full:
        assert torch.equal(q.view(tokens, HQ, head_dim)[..., rot:], before[:, : HQ * head_dim].view(tokens, HQ, head_dim)[..., rot:])


@pytest.mark.gpu
def test_rope_query_only_and_batched_shapes():
    """key None rotates q alone; [B, S, H * D] with positions [B, S] is flattened as the reference allows."""
    torch = _torch()
    ops = _ops()
    q = torch.randn(2, 5, 4 * 64, dtype=torch.bfloat16, device="cuda")
    pos = _positions(10, torch.int64).view(2, 5)
    cs = _cos_sin(64)
    expected = _reference(q.view(10, 4, 64), pos.view(-1), cs, True)
    out_q, out_k = ops.rotary_embedding(pos, q, None, 64, cs)
    assert out_q is q and out_k is None
    _assert_close(q.view(10, 4, 64), expected, "bfloat16")
    k4 = torch.randn(2, 5, 2, 64, dtype=torch.bfloat16, device="cuda")
    q4 = torch.randn(2, 5, 4, 64, dtype=torch.bfloat16, device="cuda")
    eq, ek = _reference(q4.view(10, 4, 64), pos.view(-1), cs, False), _reference(k4.view(10, 2, 64), pos.view(-1), cs, False)
    ops.rotary_embedding(pos, q4, k4, 64, cs, False)
    _assert_close(q4.view(10, 4, 64), eq, "bfloat16")
    _assert_close(k4.view(10, 2, 64), ek, "bfloat16")
    cs16 = cs.bfloat16()  # a cache in the inputs' dtype, as the reference's rotary_embedding takes it
    for tokens in (10, 300):  # 300: more tokens than SMs, the staged kernel
        q = torch.randn(tokens, 4 * 64, dtype=torch.bfloat16, device="cuda")
        positions = _positions(tokens, torch.int64)
        expected = _reference_in_dtype(q.view(tokens, 4, 64), positions, cs16, True)
        ops.rotary_embedding(positions, q, None, 64, cs16)
        assert torch.equal(q.view(tokens, 4, 64), expected)


# The reference framework's rotary_embedding test shapes (head size, rotary dim, max position, base, NeoX,
# batch, sequence length, q heads, kv heads), in bf16 and fp16.
REFERENCE_ROPE_SHAPES = [(64, 64, 32, 8000, 32, 32, 1, 1), (256, 128, 4096, 10000, 2, 512, 4, 2), (512, 128, 311, 10000, 3, 39, 4, 2),
                         (128, 128, 2048, 10000, 2, 512, 32, 8), (128, 128, 2048, 10000, 2, 512, 16, 4), (128, 64, 8192, 1000000, 1, 1, 32, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", REFERENCE_ROPE_SHAPES)
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_cache_in_the_inputs_dtype_rounds_like_the_reference(shape, neox, dtype_name):
    """With the cos/sin cache in the inputs' dtype, rotary_embedding (and the fused cache write) passes the
    reference's own test, its torch reference at atol = rtol = 1e-2, and more: bit for bit, because each
    product is rounded to the inputs' dtype before the sum, as there (a single rounding of the fp32
    result differs by a unit in a few elements, or leaves a non-zero where the reference gives 0)."""
    torch = _torch()
    ops = _ops()
    head, rot, max_pos, base, batch, seq, hq, hk = shape
    dtype = getattr(torch, dtype_name)
    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float, device="cuda") / rot))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float, device="cuda"), inv_freq)
    cs = torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)
    g = torch.Generator(device="cuda").manual_seed(7)
    pos = torch.randint(0, max_pos, (batch, seq), device="cuda", generator=g)
    q = torch.randn(batch, seq, hq * head, dtype=dtype, device="cuda", generator=g)
    k = torch.randn(batch, seq, hk * head, dtype=dtype, device="cuda", generator=g)
    t = batch * seq
    eq, ek = _reference_in_dtype(q.view(t, hq, head), pos, cs, neox), _reference_in_dtype(k.view(t, hk, head), pos, cs, neox)
    v = torch.randn(t, hk, head, dtype=dtype, device="cuda", generator=g)
    q2, k2 = q.view(t, hq, head).clone(), k.view(t, hk, head).clone()
    ops.rotary_embedding(pos, q, k, head, cs, neox)
    torch.testing.assert_close(q.view(t, hq, head), eq, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(k.view(t, hk, head), ek, atol=1e-2, rtol=1e-2)
    assert torch.equal(q.view(t, hq, head), eq) and torch.equal(k.view(t, hk, head), ek)
    kb, vb = _caches("flat", t + 1, hk, head, dtype)
    loc = torch.arange(1, t + 1, device="cuda")
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kb, v_buffer=vb, k_scale=None, v_scale=None, cache_loc=loc)
    ops.apply_rope_with_cos_sin_cache_inplace(pos.view(-1), q2, k2, head, cs, neox, arg)
    assert torch.equal(q2, eq) and torch.equal(k2, ek) and torch.equal(kb[loc], ek) and torch.equal(vb[loc], v)


def _caches(layout, slots, heads, d, dtype, page_size=16, seed=1):
    """Poisoned caches of `slots` rows of [heads, d]: flat [slots, H, D] / [slots, H * D] or paged [P, page_size, H, D]."""
    torch = _torch()
    shape = {"flat": (slots, heads, d), "flat2d": (slots, heads * d), "paged": (slots // page_size, page_size, heads, d)}[layout]
    if dtype == torch.float8_e4m3fn:
        return tuple(torch.full(shape, 0x7F, dtype=torch.uint8, device="cuda").view(dtype) for _ in range(2))  # 0x7f: fp8 NaN
    return tuple(torch.full(shape, float("nan"), dtype=dtype, device="cuda") for _ in range(2))


def _fp8(x, scale):
    """The quantization family's rounding of x [rows, W] with a static scale."""
    torch = _torch()
    q, _ = _ops().per_tensor_quant_fp8(x.contiguous(), output_s=torch.tensor([scale], device="cuda"), is_static=True)
    return q


KV_CASES = [(dt, layout, cache, neox, t, d) for dt in DTYPES for layout in ("flat", "flat2d", "paged") for cache in ("same", "fp8")
            for neox in (True, False) for t, d in ((1, 128), (37, 128), (300, 80))]
KV_CASES += [("bfloat16", "paged", "same", True, 8192, 128), ("bfloat16", "paged", "fp8", True, 2048, 128),
             ("float16", "flat", "same", False, 64, 256), ("bfloat16", "paged", "same", False, 33, 64),
             # more tokens than SMs with 16-byte vectors (the staged kernel): GPT-J, fp8 and partial; fp16 full
             ("bfloat16", "paged", "fp8", False, 2048, 128), ("float16", "flat", "same", False, 1001, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,layout,cache_kind,neox,tokens,head_dim", KV_CASES)
def test_fused_kv_write(dtype_name, layout, cache_kind, neox, tokens, head_dim):
    """q, k rotated in place as without the cache; k_cache[loc] = rotated k and v_cache[loc] = v (fp8:
    bit for bit the quantization family's static per-tensor rounding); other rows, and rows of
    out-of-range locations, untouched."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    rot = head_dim if tokens % 2 else head_dim // 2  # partial rotary: the unrotated columns reach the cache too
    slots = 16 * ((tokens + 40) // 16 + 1)
    cdtype = torch.float8_e4m3fn if cache_kind == "fp8" else dtype
    kc, vc = _caches(layout, slots, HK, head_dim, cdtype)
    loc = locations(tokens, slots, torch.int64 if tokens % 2 else torch.int32, seed=tokens)
    qkv, q, k, v = _qkv(tokens, head_dim, dtype, seed=7)
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(rot)
    eq = _reference(q.view(tokens, HQ, head_dim), pos, cs, neox)
    ek = _reference(k.view(tokens, HK, head_dim), pos, cs, neox)
    kc0, vc0 = cache_bytes(kc, slots).clone(), cache_bytes(vc, slots).clone()
    scales = (0.05, 0.02) if cache_kind == "fp8" else (None, None)
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=scales[0], v_scale=scales[1], cache_loc=loc)
    ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, head_dim, cs, is_neox=neox, fused_set_kv_buffer_arg=arg)
    _assert_close(q.view(tokens, HQ, head_dim), eq, dtype_name)
    _assert_close(k.view(tokens, HK, head_dim), ek, dtype_name)
    k_rows, v_rows = k, v
    if cache_kind == "fp8":
        k_rows, v_rows = _fp8(k, scales[0]), _fp8(v, scales[1])
    assert torch.equal(cache_bytes(kc, slots), expected_cache(kc0, cache_bytes(k_rows, tokens), loc))
    assert torch.equal(cache_bytes(vc, slots), expected_cache(vc0, cache_bytes(v_rows, tokens), loc))


def _padded_pages(slots, page_size, d):
    """Poisoned paged caches whose pages are not contiguous: [pages, page_size] of [pages, page_size + 1]."""
    torch = _torch()
    return tuple(torch.full((slots // page_size, page_size + 1, HK, d), float("nan"), dtype=torch.bfloat16, device="cuda")[:, :page_size]
                 for _ in range(2))


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [1, 3, 16, 24, 64, 100])
@pytest.mark.parametrize("tokens", [37, 300])  # 300: more tokens than SMs, the staged kernel
@pytest.mark.parametrize("padded", [False, True])
def test_cache_pages_of_any_size(page_size, tokens, padded):
    """Paged caches of any page size, their pages contiguous or apart (the page is found by one multiply
    and a correction, whatever the size; a wrong page is only visible where pages are apart): the fused
    write and store_cache reach exactly the rows of their locations."""
    torch = _torch()
    ops = _ops()
    d = 128
    slots = page_size * max(4, (tokens + 40) // page_size + 1)
    slot_list = locations(tokens, slots, torch.int64, seed=page_size).tolist()
    for i, wanted in ((3, page_size), (4, slots - page_size)):  # offset 0 of a page: there the multiply alone gives the page before
        if wanted in slot_list:
            j = slot_list.index(wanted)
            slot_list[i], slot_list[j] = slot_list[j], slot_list[i]
        else:
            slot_list[i] = wanted
    loc = torch.tensor(slot_list, dtype=torch.int64, device="cuda")
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=3)
    pos = _positions(tokens, torch.int32)
    cs = _cos_sin(d)
    ek = _reference(k.view(tokens, HK, d), pos, cs, True)
    caches = (lambda: _padded_pages(slots, page_size, d)) if padded else (lambda: _caches("paged", slots, HK, d, torch.bfloat16, page_size=page_size))
    kc, vc = caches()
    assert kc.shape[1] == page_size
    kc0, vc0 = cache_bytes(kc, slots).clone(), cache_bytes(vc, slots).clone()
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc)
    ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, is_neox=True, fused_set_kv_buffer_arg=arg)
    _assert_close(k.view(tokens, HK, d), ek, "bfloat16")
    assert torch.equal(cache_bytes(kc, slots), expected_cache(kc0, cache_bytes(k, tokens), loc))
    assert torch.equal(cache_bytes(vc, slots), expected_cache(vc0, cache_bytes(v, tokens), loc))
    kc2, vc2 = caches()
    ops.store_cache(k, v, kc2, vc2, loc)
    assert torch.equal(cache_bytes(kc2, slots), expected_cache(kc0, cache_bytes(k, tokens), loc))
    assert torch.equal(cache_bytes(vc2, slots), expected_cache(vc0, cache_bytes(v, tokens), loc))


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [5, 300])
def test_a_cache_of_empty_pages_has_no_slots(tokens):
    """A paged cache [pages, 0, H, D] holds no rows: every location is outside it, so q and k are rotated
    and nothing is written (no division by its page size anywhere)."""
    torch = _torch()
    ops = _ops()
    d = 128
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=5)
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(d)
    eq, ek = _reference(q.view(tokens, HQ, d), pos, cs, True), _reference(k.view(tokens, HK, d), pos, cs, True)
    kc, vc = (torch.empty(4, 0, HK, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    loc = torch.arange(tokens, device="cuda")
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc)
    ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, is_neox=True, fused_set_kv_buffer_arg=arg)
    ops.store_cache(k, v, kc, vc, loc)
    torch.cuda.synchronize()
    _assert_close(q.view(tokens, HQ, d), eq, "bfloat16")
    _assert_close(k.view(tokens, HK, d), ek, "bfloat16")


@pytest.mark.gpu
@pytest.mark.parametrize("q_heads", [64, 65])
def test_tokens_at_and_beyond_the_staged_kernels_shared_memory(q_heads):
    """q 64 / kv 16 heads of 256 bf16 columns with the cache write fill exactly the staged kernel's 48 KiB
    of shared memory; one more q head takes the register kernel. Both rotate and write the same rows."""
    torch = _torch()
    ops = _ops()
    tokens, hk, d = 300, 16, 256
    q = torch.randn(tokens, q_heads, d, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(tokens, hk, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(tokens, hk, d, dtype=torch.bfloat16, device="cuda")
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(d)
    eq, ek = _reference(q, pos, cs, True), _reference(k, pos, cs, True)
    slots = 2 * tokens
    kc, vc = _caches("flat", slots, hk, d, torch.bfloat16)
    loc = locations(tokens, slots, torch.int64, seed=q_heads)
    kc0, vc0 = cache_bytes(kc, slots).clone(), cache_bytes(vc, slots).clone()
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc)
    ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, is_neox=True, fused_set_kv_buffer_arg=arg)
    _assert_close(q, eq, "bfloat16")
    _assert_close(k, ek, "bfloat16")
    assert torch.equal(cache_bytes(kc, slots), expected_cache(kc0, cache_bytes(k, tokens), loc))
    assert torch.equal(cache_bytes(vc, slots), expected_cache(vc0, cache_bytes(v, tokens), loc))


@pytest.mark.gpu
def test_fp8_cache_saturates_and_rounds_like_quant():
    """Values beyond 448 * scale saturate, ties round to even, NaN stays NaN: the same bytes as
    per_tensor_quant_fp8 with the same static scale."""
    torch = _torch()
    ops = _ops()
    tokens, d = 4, 64
    q = torch.randn(tokens, 2 * d, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(tokens, d, dtype=torch.bfloat16, device="cuda") * 1000
    v = torch.tensor([1e6, -1e6, 17.0, float("nan")], dtype=torch.bfloat16, device="cuda").repeat(tokens, d // 4)
    kc, vc = (torch.zeros(8, 1, d, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn) for _ in range(2))
    pos = torch.arange(tokens, device="cuda")
    loc = torch.tensor([3, 0, 7, 5], device="cuda")
    cs = _cos_sin(d)
    ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, fused_set_kv_buffer_arg=ops.FusedSetKVBufferArg(v, kc, vc, 0.5, 2.0, loc))
    assert torch.equal(cache_bytes(kc, 8)[loc], cache_bytes(_fp8(k, 0.5), tokens))
    assert torch.equal(cache_bytes(vc, 8)[loc], cache_bytes(_fp8(v, 2.0), tokens))
    assert cache_bytes(vc, 8)[loc][0, :2].view(torch.float8_e4m3fn).float().tolist() == [448.0, -448.0]


@pytest.mark.gpu
@pytest.mark.parametrize("with_cache", [False, True])
@pytest.mark.parametrize("repeats", [1, 100])  # 6 tokens: several CTAs a token; 600: one CTA a token
@pytest.mark.parametrize("aligned", [True, False])  # False: 2 bytes off, narrow vectors (at 600 tokens the register kernel and its v CTA)
def test_positions_outside_the_cos_sin_cache_skip_the_token(with_cache, repeats, aligned):
    """A token whose position is negative or at least max_position is left as it was and not cached."""
    torch = _torch()
    ops = _ops()
    tokens, d = 6 * repeats, 64
    skip = 0 if aligned else 1
    q, k, v = (torch.randn(tokens, w + skip, dtype=torch.float16, device="cuda")[:, skip:] for w in (4 * d, 2 * d, 2 * d))
    pos = torch.tensor([0, -1, 5, 64, 63, 1 << 40], device="cuda").repeat(repeats)
    cs = _cos_sin(d, max_pos=64)
    good = torch.tensor([True, False, True, False, True, False], device="cuda").repeat(repeats)
    eq = _reference(q.view(tokens, 4, d), pos.clamp(0, 63), cs, True)
    ek = _reference(k.view(tokens, 2, d), pos.clamp(0, 63), cs, True)
    q0, k0 = q.clone(), k.clone()
    slots = tokens + 10
    kc, vc = (torch.zeros(slots, 2, d, dtype=torch.float16, device="cuda") for _ in range(2))
    loc = torch.arange(tokens, device="cuda") + 3
    if with_cache:
        ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, fused_set_kv_buffer_arg=ops.FusedSetKVBufferArg(v, kc, vc, None, None, loc))
    else:
        ops.rotary_embedding(pos, q, k, d, cs)
    _assert_close(q.view(tokens, 4, d)[good], eq[good], "float16")
    _assert_close(k.view(tokens, 2, d)[good], ek[good], "float16")
    assert torch.equal(q[~good], q0[~good]) and torch.equal(k[~good], k0[~good])
    if with_cache:
        assert torch.equal(kc.view(slots, -1)[loc[good]], k[good]) and torch.equal(vc.view(slots, -1)[loc[good]], v[good])
        assert not kc.view(slots, -1)[loc[~good]].any() and not vc.view(slots, -1)[loc[~good]].any()


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("tokens", [6, 300])  # decode's register kernel, prefill's staged kernel
@pytest.mark.parametrize("aligned", [True, False])  # False: 2 bytes off, narrow vectors (the register kernel at 300 too)
def test_strided_positions_and_locations(index_dtype, tokens, aligned):
    """positions and cache_loc taken every second and every third element of larger tensors: each token
    reads its own entries (the kernels address them by token * stride in bytes of the index type)."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, index_dtype)
    d, skip = 64, 0 if aligned else 1
    q, k, v = (torch.randn(tokens, w + skip, dtype=torch.bfloat16, device="cuda")[:, skip:] for w in (4 * d, 2 * d, 2 * d))
    pos = _positions(2 * tokens, dtype, seed=tokens)[::2]
    slots = 3 * tokens + 8
    loc = locations(3 * tokens, slots, dtype, seed=tokens, out_of_range=False)[::3]
    assert pos.stride(0) == 2 and loc.stride(0) == 3
    cs = _cos_sin(d)
    eq, ek = _reference(q.view(tokens, 4, d), pos, cs, True), _reference(k.view(tokens, 2, d), pos, cs, True)
    kc, vc = (torch.zeros(slots, 2, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    arg = ops.FusedSetKVBufferArg(v, kc, vc, None, None, loc)
    ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, fused_set_kv_buffer_arg=arg)
    _assert_close(q.view(tokens, 4, d), eq, "bfloat16")
    _assert_close(k.view(tokens, 2, d), ek, "bfloat16")
    rows = loc.long()
    assert torch.equal(kc.view(slots, -1)[rows], k) and torch.equal(vc.view(slots, -1)[rows], v)
    written = torch.zeros(slots, dtype=torch.bool, device="cuda")
    written[rows] = True
    assert not kc.view(slots, -1)[~written].any() and not vc.view(slots, -1)[~written].any()


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 8, 64])
def test_rope_reads_what_the_previous_kernel_wrote(tokens):
    """The fused write works out its first addresses and prefetches them before its PDL wait: here q, k and
    v are written by the kernel just before it (jitkern's rmsnorm over the fused qkv rows, itself launched
    with PDL), eagerly and from a CUDA graph; the result is that of the two run apart."""
    torch = _torch()
    ops = _ops()
    d, width = 128, (HQ + 2 * HK) * 128
    w = torch.randn(width, dtype=torch.bfloat16, device="cuda")
    x = torch.empty(tokens, width, dtype=torch.bfloat16, device="cuda")
    qkv = torch.empty_like(x)
    q, k, v = qkv[:, : HQ * d], qkv[:, HQ * d : (HQ + HK) * d], qkv[:, (HQ + HK) * d :]
    pos = _positions(tokens, torch.int64, seed=tokens)
    cs = _cos_sin(d)
    slots = 2 * tokens + 16
    loc = locations(tokens, slots, torch.int64, seed=tokens, out_of_range=False)
    kc, vc = (torch.zeros(slots, HK, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    arg = ops.FusedSetKVBufferArg(v, kc, vc, None, None, loc)

    def step():
        ops.rmsnorm(x, w, qkv, 1e-6)
        ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, fused_set_kv_buffer_arg=arg)

    def check(what):
        normed = ops.rmsnorm(x, w, None, 1e-6)  # the same kernel's bits, apart from the rope
        torch.cuda.synchronize()
        eq = _reference(normed[:, : HQ * d].view(tokens, HQ, d), pos, cs, True)
        ek = _reference(normed[:, HQ * d : (HQ + HK) * d].view(tokens, HK, d), pos, cs, True)
        _assert_close(q.view(tokens, HQ, d), eq, "bfloat16")
        _assert_close(k.view(tokens, HK, d), ek, "bfloat16")
        assert torch.equal(kc.view(slots, -1)[loc], k), what
        assert torch.equal(vc.view(slots, -1)[loc], normed[:, (HQ + HK) * d :]), what

    eagerly_then_from_a_graph(lambda seed: x.copy_(torch.randn(tokens, width, dtype=torch.bfloat16, device="cuda") * (seed + 1)), step, check)


@pytest.mark.gpu
@pytest.mark.parametrize("with_cache", [False, True])
@pytest.mark.parametrize("tokens", [6, 600])  # decode's register kernel, prefill's staged kernel
def test_an_empty_cos_sin_cache_skips_every_token(with_cache, tokens):
    """No position lies inside a cos/sin cache of no rows: q and k stay as they were, nothing is cached,
    and no kernel reads the empty cache (a read there faults, and the synchronize raises it)."""
    torch = _torch()
    ops = _ops()
    d = 64
    q, k, v = (torch.randn(tokens, w, dtype=torch.bfloat16, device="cuda") for w in (4 * d, 2 * d, 2 * d))
    pos = torch.arange(tokens, device="cuda")
    cs = torch.empty(0, d, dtype=torch.float32, device="cuda")
    q0, k0 = q.clone(), k.clone()
    kc, vc = (torch.zeros(tokens, 2, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    if with_cache:
        arg = ops.FusedSetKVBufferArg(v, kc, vc, None, None, torch.arange(tokens, device="cuda"))
        ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, fused_set_kv_buffer_arg=arg)
    else:
        ops.rotary_embedding(pos, q, k, d, cs)
    torch.cuda.synchronize()
    assert torch.equal(q, q0) and torch.equal(k, k0)
    assert not kc.any() and not vc.any()


@pytest.mark.gpu
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("tokens", [19, 300])  # 300: more tokens than SMs, the staged kernel
def test_reference_forms_out_of_place(full, interleave, tokens):
    """apply_rope_pos_ids_cos_sin_cache_{without,with}_kv_cache: q, k rotated into q_rope, k_rope (the
    unrotated columns copied), q and k untouched; with the cache, k_rope and v reach it."""
    torch = _torch()
    ops = _ops()
    d = 128
    rot = d if full else d // 2
    q = torch.randn(tokens, HQ, d, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(tokens, HK, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(tokens, HK, d, dtype=torch.bfloat16, device="cuda")
    q0, k0 = q.clone(), k.clone()
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(rot)
    q_rope, k_rope = torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))
    ops.apply_rope_pos_ids_cos_sin_cache_without_kv_cache(q, k, q_rope, k_rope, cs, pos, interleave=interleave)
    _assert_close(q_rope, _reference(q, pos, cs, not interleave), "bfloat16")
    _assert_close(k_rope, _reference(k, pos, cs, not interleave), "bfloat16")
    assert torch.equal(q, q0) and torch.equal(k, k0)
    slots = 64 if tokens < 64 else 2 * tokens
    kb, vb = (torch.zeros(slots, HK, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    loc = locations(tokens, slots, torch.int64, out_of_range=False)
    k_rope2 = torch.full_like(k, float("nan"))
    ops.apply_rope_pos_ids_cos_sin_cache_with_kv_cache(q, k, q_rope, k_rope2, cs, pos, v, kb, vb, loc, interleave=interleave)
    assert torch.equal(k_rope2, k_rope)
    assert torch.equal(kb[loc], k_rope) and torch.equal(vb[loc], v)
    # Their head size is q's last dimension: a 2-D q would be one head of all its columns.
    with pytest.raises(ValueError, match=r"apply_rope_pos_ids_cos_sin_cache_without_kv_cache\(\): q must be \[T, H, D\], got shape"):
        ops.apply_rope_pos_ids_cos_sin_cache_without_kv_cache(q.flatten(1), k, q_rope, k_rope, cs, pos)


@pytest.mark.gpu
@pytest.mark.parametrize("groups,splits", [(1, 1), (3, 7), (40, 1), (8, 5), (5, 100), (0, 3)])
@pytest.mark.parametrize("tokens", [70, 300])  # 300: more tokens than SMs (prefill), each token's v by a CTA of its own
def test_every_launch_shape_gives_the_same_result(groups, splits, tokens):
    """The launch shapes the exported functions take for tuning (thread groups per CTA, CTAs per token)
    all rotate every head and write every cache row."""
    torch = _torch()
    from jitkern.ops import rope

    m = rope._rope_module(torch.bfloat16)
    d = 128
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=11)
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(d)
    slots = 16 * (2 * tokens // 16 + 1)
    kc, vc = _caches("paged", slots, HK, d, torch.bfloat16)
    loc = locations(tokens, slots, torch.int32)
    eq, ek = _reference(q.view(tokens, HQ, d), pos, cs, True), _reference(k.view(tokens, HK, d), pos, cs, True)
    kc0, vc0 = cache_bytes(kc, slots).clone(), cache_bytes(vc, slots).clone()
    m.apply_store(pos, q, k, q, k, cs, d, True, v, kc, vc, loc, 1.0, 1.0, groups, splits)
    _assert_close(q.view(tokens, HQ, d), eq, "bfloat16")
    _assert_close(k.view(tokens, HK, d), ek, "bfloat16")
    assert torch.equal(cache_bytes(kc, slots), expected_cache(kc0, cache_bytes(k, tokens), loc))
    assert torch.equal(cache_bytes(vc, slots), expected_cache(vc0, cache_bytes(v, tokens), loc))


@pytest.mark.gpu
def test_bad_inputs_rejected_before_launch():
    torch = _torch()
    ops = _ops()
    from jitkern.ops import rope

    d = 64
    q = torch.randn(4, 2 * d, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(4, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(4, d, dtype=torch.bfloat16, device="cuda")
    pos = torch.arange(4, device="cuda")
    cs = _cos_sin(d)
    kc, vc = (torch.zeros(8, 1, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    loc = torch.arange(4, device="cuda")
    q0, k0 = q.clone(), k.clone()

    def rejects(error, match, fn, *args, **kwargs):
        with pytest.raises(error, match=match) as info:
            fn(*args, **kwargs)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"

    def fused(**changes):
        parts = dict(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc)
        parts.update(changes)
        return ops.FusedSetKVBufferArg(**parts)

    apply = ops.apply_rope_with_cos_sin_cache_inplace
    rejects(TypeError, "query must be float16, bfloat16 or float32, got torch.float64", apply, pos, q.double(), k.double(), d, cs)
    rejects(TypeError, "cos_sin_cache: DType mismatch", apply, pos, q, k, d, cs.half())  # fp32 or the inputs' dtype
    rejects(TypeError, "positions: DType mismatch", apply, pos.float(), q, k, d, cs)
    rejects(TypeError, "k: DType mismatch", apply, pos, q, k.half(), d, cs)
    rejects(ValueError, "q width 128 is not a multiple of head_size 48", apply, pos, q, k, 48, _cos_sin(48))
    rejects(ValueError, r"the rotary dim\) must be even and within \[2, head_size 64\], got 128", apply, pos, q, k, d, _cos_sin(128))
    rejects(ValueError, r"k: Size mismatch for shape#0\('num_tokens'\)", apply, pos, q, k[:3], d, cs)
    rejects(ValueError, "positions: Device mismatch", apply, pos.cpu(), q, k, d, cs)
    rejects(ValueError, "head_size must be positive", apply, pos, q, k, -64, cs)
    rejects(ValueError, "q: Stride mismatch", apply, pos, q.view(4, d, 2).transpose(1, 2), k.view(4, 1, d), d, cs)
    rejects(TypeError, "k_buffer must have the inputs' dtype", apply, pos, q, k, d, cs,
            fused_set_kv_buffer_arg=fused(k_buffer=kc.half(), v_buffer=vc.half()))
    rejects(TypeError, "v_buffer must have k_buffer's dtype", apply, pos, q, k, d, cs, fused_set_kv_buffer_arg=fused(v_buffer=vc.half()))
    rejects(ValueError, "k_scale and v_scale apply to a float8_e4m3fn cache only", apply, pos, q, k, d, cs,
            fused_set_kv_buffer_arg=fused(k_scale=0.5))
    rejects(ValueError, "k_scale and v_scale must be finite and positive", apply, pos, q, k, d, cs,
            fused_set_kv_buffer_arg=fused(k_buffer=kc.view(torch.uint8)[..., :d].view(torch.float8_e4m3fn),
                                          v_buffer=vc.view(torch.uint8)[..., :d].view(torch.float8_e4m3fn), k_scale=0.0))
    rejects(TypeError, "k_scale must be a float or None, got Tensor", apply, pos, q, k, d, cs,
            fused_set_kv_buffer_arg=fused(k_scale=torch.ones(1)))
    rejects(ValueError, "k_buffer must be .* with rows of 64 elements", apply, pos, q, k, d, cs,
            fused_set_kv_buffer_arg=fused(k_buffer=torch.zeros(8, 2 * d, dtype=torch.bfloat16, device="cuda"),
                                          v_buffer=torch.zeros(8, 2 * d, dtype=torch.bfloat16, device="cuda")))
    rejects(ValueError, "v_buffer must have k_buffer's shape", apply, pos, q, k, d, cs, fused_set_kv_buffer_arg=fused(v_buffer=vc[:4]))
    rejects(ValueError, "k_buffer: each row .* must be contiguous", apply, pos, q, k, d, cs,
            fused_set_kv_buffer_arg=fused(k_buffer=torch.zeros(8, 2 * d, dtype=torch.bfloat16, device="cuda")[:, ::2],
                                          v_buffer=torch.zeros(8, d, dtype=torch.bfloat16, device="cuda")))
    rejects(TypeError, "cache_loc: DType mismatch", apply, pos, q, k, d, cs, fused_set_kv_buffer_arg=fused(cache_loc=loc.float()))
    rejects(ValueError, "value width 32 is not a multiple of head_size 64", apply, pos, q, k, d, cs, fused_set_kv_buffer_arg=fused(value=v[:, :32]))
    rejects(ValueError, r"q overlaps itself: its dimension 1 \(2 elements, stride 32\)", apply, pos,
            torch.empty(4 * 2 * d, dtype=torch.bfloat16, device="cuda").as_strided((4, 2, d), (2 * d, d // 2, 1)), k.view(4, 1, d), d, cs)
    rejects(ValueError, "k_buffer overlaps itself", apply, pos, q, k, d, cs, fused_set_kv_buffer_arg=fused(k_buffer=kc[:1].expand_as(kc)))
    rejects(ValueError, "k_buffer and v_buffer must not overlap", apply, pos, q, k, d, cs, fused_set_kv_buffer_arg=fused(v_buffer=kc))
    rejects(ValueError, "q and k must not overlap", ops.rotary_embedding, pos, q[:, :d], q[:, :d], d, cs)
    assert torch.equal(q, q0) and torch.equal(k, k0) and not kc.any(), "a rejected call wrote"
    m = rope._rope_module(torch.bfloat16)
    rejects(ValueError, "k and k_out must be given together", m.apply, pos, q, k, q, None, cs, d, True, 0, 0)
    rejects(ValueError, "head_groups and head_splits must be 0 \\(automatic\\) or positive", m.apply, pos, q, k, q, k, cs, d, True, -1, 0)
    rejects(ValueError, "head_splits at most 65534", m.apply, pos, q, k, q, k, cs, d, True, 0, 65535)
    rejects(TypeError, "apply_store", m.apply_store, pos, q, k, q, k, cs, d, True)
    kc8, vc8 = torch.zeros_like(kc, dtype=torch.uint8), torch.zeros_like(vc, dtype=torch.uint8)  # an fp8 cache's bytes
    rejects(TypeError, "its cache write is apply_store_fp8, not apply_store", m.apply_store, pos, q, k, q, k, cs, d, True, v, kc8, vc8, loc,
            1.0, 1.0, 0, 0)
    rejects(TypeError, "its cache write is apply_store, not apply_store_fp8", m.apply_store_fp8, pos, q, k, q, k, cs, d, True, v, kc, vc, loc,
            1.0, 1.0, 0, 0)


@pytest.mark.gpu
def test_opcheck():
    torch = _torch()
    import jitkern.ops  # noqa: F401  (registers torch.ops.jitkern)

    d, t = 64, 5
    pos = torch.arange(t, device="cuda")
    cs = _cos_sin(d)
    q, k, v = (torch.randn(t, h * d, dtype=torch.bfloat16, device="cuda") for h in (4, 2, 2))
    kc, vc = (torch.zeros(16, 2, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    loc = torch.arange(t, device="cuda") * 2
    torch.library.opcheck(torch.ops.jitkern.rope, (pos, q.clone(), k.clone(), d, cs, True))
    torch.library.opcheck(torch.ops.jitkern.rope_query, (pos, q.clone(), d, cs, False))
    torch.library.opcheck(torch.ops.jitkern.rope_store_kv, (pos, q.clone(), k.clone(), d, cs, True, v, kc, vc, loc, 1.0, 1.0))
    q3, k3 = q.view(t, 4, d), k.view(t, 2, d)
    torch.library.opcheck(torch.ops.jitkern.rope_out, (pos, q3, k3, torch.empty_like(q3), torch.empty_like(k3), cs, False))
    torch.library.opcheck(torch.ops.jitkern.rope_out_store_kv, (pos, q3, k3, torch.empty_like(q3), torch.empty_like(k3), cs, True,
                                                                v.view(t, 2, d), kc, vc, loc))


@pytest.mark.gpu
def test_traced_by_torch_compile_fullgraph():
    """A decode step (RoPE + fused fp8 KV write, store_cache, the absorb-q concat) traced without graph breaks."""
    torch = _torch()
    ops = _ops()
    d, t = 128, 9
    cs = _cos_sin(d)
    kc, vc = (torch.zeros(4, 16, HK, d, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn) for _ in range(2))
    kc2, vc2 = (torch.zeros(64, HK * d, dtype=torch.bfloat16, device="cuda") for _ in range(2))

    def step(qkv, pos, loc):
        q, k, v = qkv[:, : HQ * d], qkv[:, HQ * d : (HQ + HK) * d], qkv[:, (HQ + HK) * d :]
        ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, True, ops.FusedSetKVBufferArg(v, kc, vc, 0.1, 0.1, loc))
        ops.store_cache(k, v, kc2, vc2, loc)
        return ops.concat_mla_absorb_q(q.view(-1, HQ, d), k.view(-1, HK, d)[:, :1].expand(-1, HQ, d)) * 2

    qkv, pos, loc = torch.randn(t, (HQ + 2 * HK) * d, dtype=torch.bfloat16, device="cuda"), _positions(t, torch.int64), locations(t, 64, torch.int64)
    eager_qkv = qkv.clone()
    expected = step(eager_qkv, pos, loc)
    ek, ekc, ekc2 = eager_qkv.clone(), kc.view(torch.uint8).clone(), kc2.clone()
    kc.view(torch.uint8).zero_(), vc.view(torch.uint8).zero_(), kc2.zero_(), vc2.zero_()
    got = torch.compile(step, fullgraph=True)(qkv, pos, loc)
    torch.cuda.synchronize()
    assert torch.equal(got, expected) and torch.equal(qkv, ek)
    assert torch.equal(kc.view(torch.uint8), ekc) and torch.equal(kc2, ekc2)


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay():
    """A captured decode step follows new positions and locations written into its input buffers."""
    torch = _torch()
    ops = _ops()
    d, t = 128, 16
    cs = _cos_sin(d)
    kc, vc = (torch.zeros(8, 16, HK, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    qkv = torch.randn(t, (HQ + 2 * HK) * d, dtype=torch.bfloat16, device="cuda")
    pos, loc = _positions(t, torch.int64), locations(t, 128, torch.int64)
    q, k, v = qkv[:, : HQ * d], qkv[:, HQ * d : (HQ + HK) * d], qkv[:, (HQ + HK) * d :]
    arg = ops.FusedSetKVBufferArg(v, kc, vc, None, None, loc)
    ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, fused_set_kv_buffer_arg=arg)  # loads the module before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cs, fused_set_kv_buffer_arg=arg)
    fresh = torch.randn_like(qkv)
    qkv.copy_(fresh)
    pos.copy_(_positions(t, torch.int64, seed=3))
    loc.copy_(locations(t, 128, torch.int64, seed=3, out_of_range=False))
    kc.zero_(), vc.zero_()
    eq, ek = _reference(fresh[:, : HQ * d].view(t, HQ, d), pos, cs, True), _reference(fresh[:, HQ * d : (HQ + HK) * d].view(t, HK, d), pos, cs, True)
    graph.replay()
    torch.cuda.synchronize()
    _assert_close(q.view(t, HQ, d), eq, "bfloat16")
    _assert_close(k.view(t, HK, d), ek, "bfloat16")
    assert torch.equal(kc.view(128, -1)[loc], k) and torch.equal(vc.view(128, -1)[loc], v)


@pytest.mark.gpu
def test_matches_the_reference_framework_where_it_runs():
    """Against the reference's own JIT kernel (its rotary_embedding), where its wheel imports."""
    torch = _torch()
    ops = _ops()
    ref_rope = reference_kernel("pos_enc", "rotary_embedding")
    d, t = 128, 33
    cs = _cos_sin(d).bfloat16()  # the reference's rotary_embedding takes the cache in q's dtype
    for neox in (True, False):
        qkv, q, k, _ = _qkv(t, d, torch.bfloat16, seed=5)
        q2, k2 = q.clone(), k.clone()
        pos = _positions(t, torch.int64)
        ops.rotary_embedding(pos, q, k, d, cs, neox)
        ref_rope(pos, q2, k2, d, cs, neox)
        _assert_close(q, q2.double(), "bfloat16")
        _assert_close(k, k2.double(), "bfloat16")


def test_specs_name_each_ops_modules():
    """Without a GPU: each op lists only the modules it calls."""
    from jitkern import ops

    assert [(s.name, s.args[1:]) for s in ops.specs(ops=["rotary_embedding"], dtypes=["bfloat16"])] == [("rope_apply", ("bf16_t",))]
    assert [s.name for s in ops.specs(ops=["apply_rope_with_cos_sin_cache_inplace"], dtypes=["float16"])] == \
        ["rope_apply", "rope_apply_store", "rope_apply_store_fp8"]
    assert len(ops.specs(families=["rope"])) == 3 * 3, "apply, apply_store, apply_store_fp8 per dtype"


@pytest.mark.toolchain
def test_decode_launch_shapes(cache_dir, tmp_path, monkeypatch):
    """Without a GPU: rope_kernel's automatic launch shape (thread groups per CTA, rotating CTAs per token).
    A launch that does not trigger the next one early spreads out, but never below 16 threads a CTA or two
    v rounds, and never where halving the groups adds no CTAs (a head_splits hint, one CTA a token)."""
    import shutil

    import jitkern
    from jitkern import JitSpec

    if shutil.which("nvcc") is None:
        pytest.skip("NOT RUN: nvcc is not installed")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")  # host code only: any architecture serves
    src = tmp_path / "rope_launch_shapes.cuh"
    src.write_text(f'#include "{jitkern.PACKAGE_DIR / "csrc" / "rope.cuh"}"\n'
                   "namespace shapes {\n"
                   "inline int64_t launch(int64_t units, int64_t heads, int64_t v_vecs, int64_t tokens, int64_t few, int64_t groups_hint,\n"
                   "                      int64_t splits_hint) {\n"
                   "  const auto s = jitkern_rope::rope_launch(units, heads, v_vecs > 0, v_vecs, tokens, few != 0, groups_hint, splits_hint);\n"
                   "  return s.groups * 100000 + s.splits;\n"
                   "}\n}  // namespace shapes\n")
    m = JitSpec("rope_launch_shapes", cuda_files=[str(src)], cuda_wrappers=[("launch", "shapes::launch")]).load()

    def shape(units, heads, v_vecs, tokens, few=True, groups=0, splits=0):
        code = m.launch(units, heads, v_vecs, tokens, int(few), groups, splits)
        return code // 100000, code % 100000

    # bf16, d 128, q 32 / kv 8 heads with the cache write (the decode benchmark): 8x5 at one token (6 CTAs,
    # an early trigger), spread to 2x20 at 2 and 4 tokens, 4x10 at 8, 8x5 from 16.
    assert [shape(8, 40, 128, t) for t in (1, 2, 4, 8, 16, 64)] == [(8, 5), (2, 20), (2, 20), (4, 10), (8, 5), (8, 5)]
    # Halving that cannot add CTAs keeps the groups: a head_splits hint, one CTA a token with more tokens than SMs.
    assert shape(8, 40, 128, 4, splits=2) == (8, 2)
    assert shape(8, 384, 128, 60, few=False) == (8, 1)
    assert shape(8, 40, 128, 2, groups=1) == (1, 40), "a groups hint is taken as given"
    for units, v_vecs in ((6, 96), (5, 80), (9, 144), (12, 192), (16, 256), (4, 64), (1, 8), (64, 1024)):
        for tokens in (1, 2, 3, 4, 8, 16, 64):
            for heads in (1, 3, 40, 64):
                groups, splits = shape(units, heads, v_vecs, tokens)
                default = max(1, min(heads, 64 // units, 512 // units))
                assert 1 <= groups <= default and 1 <= splits and splits * groups >= heads and splits + 1 <= 65535
                if groups < default:  # spread out: at least 16 threads a CTA, and the v row (v_vecs) in two rounds of 4
                    assert units * groups >= 16 and 2 * 4 * units * groups >= v_vecs, (units, heads, v_vecs, tokens, groups)
