"""The fused QK-norm + RoPE family (with its KV-cache write) on the GPU against a float64 torch reference
(RMSNorm rounded to the inputs' dtype, as the kernel and the unfused rmsnorm round it, then the rotation),
the fp8 cache against the quantization family's rounding."""

import re

import pytest
from conftest import eagerly_then_from_a_graph
from kv_cache_cases import cache_bytes, expected_cache, locations
from test_rope import _assert_close, _cos_sin, _fp8
from test_rope import _caches as _rope_caches
from test_rope import _reference as _rotated

DTYPES = ["float16", "bfloat16", "float32"]
MAX_POS = 4096
EPS = 1e-6
HQ, HK = 16, 4


def _torch():
    import torch

    return torch


def _ops():
    import jitkern.ops

    return jitkern.ops


def _reference(x, w, positions, cos_sin, neox, eps=EPS):
    """x [T, H, D]: RMSNorm over D with weight w in float64, rounded to x's dtype, then rotated over the
    first R columns in float64 (test_rope's reference)."""
    torch = _torch()
    xd = x.double()
    return _rotated((xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()).to(x.dtype), positions, cos_sin, neox)


def _qkv(tokens, d, dtype, seed=0, offset=0):
    """One fused qkv buffer [T, offset + (HQ + 2 HK) * D] and its q, k, v column slices ([T, H * D], strided;
    an odd offset leaves them unaligned for 16-byte vectors)."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = torch.randn(tokens, offset + (HQ + 2 * HK) * d, dtype=dtype, device="cuda", generator=g) * 3
    o = offset
    return qkv, qkv[:, o : o + HQ * d], qkv[:, o + HQ * d : o + (HQ + HK) * d], qkv[:, o + (HQ + HK) * d :]


def _weights(d, dtype, seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed + 100)
    return tuple((torch.rand(d, device="cuda", generator=g) + 0.5).to(dtype) for _ in range(2))


def _positions(tokens, index_dtype, max_pos=MAX_POS, seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, max_pos, (tokens,), device="cuda", generator=g).to(index_dtype)


CASES = [(dt, d, rot, neox, t) for dt in DTYPES for d, rot in ((64, 64), (128, 128), (128, 64), (256, 256), (80, 40), (128, 32))
         for neox in (True, False) for t in (1, 7, 300)]
CASES += [("bfloat16", 128, 128, neox, 8192) for neox in (True, False)] + [("float16", 512, 256, True, 33), ("bfloat16", 512, 512, False, 5)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,head_dim,rot,neox,tokens", CASES)
def test_norm_then_rotation_in_place(dtype_name, head_dim, rot, neox, tokens):
    """q, k column slices of one qkv buffer: each head normalised with its weight, then rotated over the
    cache's R columns (partial rotary: the rest normalised only), both styles; v is left alone."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    qkv, q, k, v = _qkv(tokens, head_dim, dtype, seed=tokens)
    v0 = v.clone()
    qw, kw = _weights(head_dim, dtype)
    pos = _positions(tokens, torch.int64 if tokens % 2 else torch.int32, seed=head_dim)
    cs = _cos_sin(rot)
    eq = _reference(q.view(tokens, HQ, head_dim), qw, pos, cs, neox)
    ek = _reference(k.view(tokens, HK, head_dim), kw, pos, cs, neox)
    if tokens % 2:
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, is_neox=neox)
    else:  # the [T, H, D] form
        ops.fused_qknorm_rope(pos, q.view(tokens, HQ, head_dim), k.view(tokens, HK, head_dim), qw, kw, cs, EPS, is_neox=neox)
    _assert_close(q.view(tokens, HQ, head_dim), eq, dtype_name)
    _assert_close(k.view(tokens, HK, head_dim), ek, dtype_name)
    assert torch.equal(v, v0), "v changed"


@pytest.mark.gpu
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("cache_dtype", [False, True])
def test_unaligned_operands_and_cache_in_the_inputs_dtype(neox, cache_dtype):
    """Operands one element off 16 bytes take the one-element path; a cos/sin cache in the inputs' dtype
    is read as such. Batched [B, S, H * D] inputs with positions [B, S] are flattened."""
    torch = _torch()
    ops = _ops()
    d, tokens = 128, 12
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=4, offset=1)
    qw, kw = _weights(d, torch.bfloat16, seed=1)
    pos = _positions(tokens, torch.int64, seed=2)
    cs = _cos_sin(96)
    if cache_dtype:
        cs = cs.bfloat16()
    eq = _reference(q.view(tokens, HQ, d), qw, pos, cs.float(), neox)
    ek = _reference(k.view(tokens, HK, d), kw, pos, cs.float(), neox)
    ops.fused_qknorm_rope(pos.view(3, 4), q.view(3, 4, HQ * d), k.view(3, 4, HK * d), qw, kw, cs, EPS, neox)
    _assert_close(q.view(tokens, HQ, d), eq, "bfloat16")
    _assert_close(k.view(tokens, HK, d), ek, "bfloat16")


def _caches(layout, slots, d, dtype, page_size=16):
    return _rope_caches(layout, slots, HK, d, dtype, page_size=page_size)


KV_CASES = [(dt, layout, cache, neox, t, d, rot) for dt in DTYPES for layout in ("flat", "flat2d", "paged") for cache in ("same", "fp8")
            for neox in (True, False) for t, d, rot in ((1, 128, 128), (37, 128, 64), (300, 80, 80))]
KV_CASES += [("bfloat16", "paged", "same", True, 4096, 128, 128), ("bfloat16", "paged", "fp8", False, 2048, 256, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,layout,cache_kind,neox,tokens,head_dim,rot", KV_CASES)
def test_fused_kv_write(dtype_name, layout, cache_kind, neox, tokens, head_dim, rot):
    """q, k as without the cache; k_cache[loc] = the resulting k and v_cache[loc] = v (fp8: bit for bit the
    quantization family's static per-tensor rounding of them); other rows, and rows of out-of-range
    locations, untouched."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    slots = 16 * ((tokens + 40) // 16 + 1)
    cdtype = torch.float8_e4m3fn if cache_kind == "fp8" else dtype
    kc, vc = _caches(layout, slots, head_dim, cdtype)
    loc = locations(tokens, slots, torch.int64 if tokens % 2 else torch.int32, seed=tokens)
    qkv, q, k, v = _qkv(tokens, head_dim, dtype, seed=7)
    qw, kw = _weights(head_dim, dtype, seed=3)
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(rot)
    eq = _reference(q.view(tokens, HQ, head_dim), qw, pos, cs, neox)
    ek = _reference(k.view(tokens, HK, head_dim), kw, pos, cs, neox)
    kc0, vc0 = cache_bytes(kc, slots).clone(), cache_bytes(vc, slots).clone()
    scales = (0.05, 0.02) if cache_kind == "fp8" else (None, None)
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=scales[0], v_scale=scales[1], cache_loc=loc)
    ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, neox, fused_set_kv_buffer_arg=arg)
    _assert_close(q.view(tokens, HQ, head_dim), eq, dtype_name)
    _assert_close(k.view(tokens, HK, head_dim), ek, dtype_name)
    for cache, before, rows, scale in ((kc, kc0, k, scales[0]), (vc, vc0, v, scales[1])):
        rows = rows if scale is None else _fp8(rows, scale)
        assert torch.equal(cache_bytes(cache, slots), expected_cache(before, cache_bytes(rows, tokens), loc))


# Launches of many tokens (16-byte vectors: the staged kernel) against those of few (one head a lane
# group): NeoX and GPT-J, partial rotary, mRoPE (both section forms), caches in the inputs' dtype and fp8,
# int32 and int64 positions, each dtype.
MANY_CASES = [("bfloat16", 128, 128, True, None, "same", "int64"), ("bfloat16", 128, 64, False, None, "fp8", "int32"),
              ("float16", 256, 128, True, None, "none", "int32"), ("float32", 64, 64, False, None, "same", "int64"),
              ("bfloat16", 128, 128, False, "contiguous", "same", "int32"), ("bfloat16", 128, 128, True, "interleaved", "fp8", "int64"),
              ("bfloat16", 80, 80, True, None, "none", "int64"), ("float16", 128, 32, False, None, "fp8", "int64"),
              ("float32", 256, 256, True, None, "same", "int32")]
MANY_CASES = [case + (4096 + 37,) for case in MANY_CASES]
# The staged kernel's two grids (host::runtime::balanced_grid): fewer tokens than three a CTA the SMs hold at once
# (the CTAs take the tokens in turn: on an H200, 1320 CTAs of this kernel, 2085 tokens are one or two a CTA and
# 3109 two or three, a buffer staged again), and many more (a CTA takes one or two, the SMs take new CTAs).
MANY_CASES += [(*case, tokens) for tokens in (2048 + 37, 3072 + 37, 12288 + 37)
               for case in (("bfloat16", 128, 128, True, None, "same", "int64"), ("bfloat16", 128, 128, False, None, "none", "int32"))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,head_dim,rot,neox,mrope,cache_kind,index_name,tokens", MANY_CASES)
def test_many_tokens_equal_the_few_token_launch_bit_for_bit(dtype_name, head_dim, rot, neox, mrope, cache_kind, index_name, tokens):
    """Many tokens (the staged kernel from QkNormRopeOps' kStagedMinTokens: each CTA several tokens in turn, their
    heads staged in shared memory; 4133 tokens are more than the CTAs the SMs fit):
    q, k and the cache rows equal bit for bit those of the same tokens done 64 at a time (one head a lane
    group), and the float64 reference."""
    torch = _torch()
    ops = _ops()
    dtype, index = getattr(torch, dtype_name), getattr(torch, index_name)
    qkv, q, k, v = _qkv(tokens, head_dim, dtype, seed=41)
    qkv2 = qkv.clone()
    q2, k2, v2 = qkv2[:, : HQ * head_dim], qkv2[:, HQ * head_dim : (HQ + HK) * head_dim], qkv2[:, (HQ + HK) * head_dim :]
    qw, kw = _weights(head_dim, dtype, seed=8)
    cs = _cos_sin(rot)
    section = (rot // 2 - 2 * (rot // 6), rot // 6, rot // 6) if mrope else None
    if mrope:
        pos = torch.stack([_positions(tokens, torch.int64, seed=s) for s in range(3)]).to(index)
        table, ids = _mrope_table(cs, pos, section, mrope == "interleaved"), torch.arange(tokens, device="cuda")
    else:
        pos = _positions(tokens, index, seed=5)
        table, ids = cs, pos
    eq = _reference(q.view(tokens, HQ, head_dim), qw, ids, table, neox)
    ek = _reference(k.view(tokens, HK, head_dim), kw, ids, table, neox)
    slots = 16 * (tokens // 16 + 2)
    caches = []
    for _ in range(2):
        kc, vc = _caches("paged", slots, head_dim, torch.float8_e4m3fn if cache_kind == "fp8" else dtype)
        caches.append((kc, vc))
    loc = locations(tokens, slots, index, seed=6)
    scales = (0.05, 0.02) if cache_kind == "fp8" else (None, None)

    def call(rows, q, k, v, kc, vc):
        arg = None if cache_kind == "none" else ops.FusedSetKVBufferArg(value=v[rows], k_buffer=kc, v_buffer=vc, k_scale=scales[0],
                                                                          v_scale=scales[1], cache_loc=loc[rows])
        ops.fused_qknorm_rope(pos[..., rows], q[rows], k[rows], qw, kw, cs, EPS, neox, arg, mrope_section=section,
                              mrope_interleaved=mrope == "interleaved")

    call(slice(None), q, k, v, *caches[0])
    for start in range(0, tokens, 64):
        call(slice(start, start + 64), q2, k2, v2, *caches[1])
    assert torch.equal(qkv, qkv2)
    if cache_kind != "none":
        assert torch.equal(cache_bytes(caches[0][0], slots), cache_bytes(caches[1][0], slots))
        assert torch.equal(cache_bytes(caches[0][1], slots), cache_bytes(caches[1][1], slots))
        rows = v if scales[1] is None else _fp8(v, scales[1])
        ok = (loc >= 0) & (loc < slots)  # locations() puts some outside the cache
        assert torch.equal(cache_bytes(caches[0][1], slots)[loc[ok].long()], cache_bytes(rows, tokens)[ok])
    _assert_close(q.view(tokens, HQ, head_dim), eq, dtype_name)
    _assert_close(k.view(tokens, HK, head_dim), ek, dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("store", [True, False])
def test_many_tokens_of_strided_heads_equal_the_few_token_launch_bit_for_bit(store):
    """Heads apart in memory (q, k and v [T, H, D] views of [T, H, D + 8] rows: the staged kernel copies them a
    head at a time, where one token's contiguous heads go in one copy): q, k and the cache rows as those of the
    same tokens done 64 at a time, bit for bit."""
    torch = _torch()
    ops = _ops()
    d, tokens, slots = 128, 4096 + 37, 16 * (4096 // 16 + 8)
    g = torch.Generator(device="cuda").manual_seed(12)
    rows = [torch.randn(tokens, h, d + 8, dtype=torch.bfloat16, device="cuda", generator=g) * 3 for h in (HQ, HK, HK)]
    copies = [r.clone() for r in rows]
    qw, kw = _weights(d, torch.bfloat16, seed=3)
    cs = _cos_sin(d)
    pos = _positions(tokens, torch.int64, seed=13)
    loc = locations(tokens, slots, torch.int64, seed=14)
    caches = [_caches("paged", slots, d, torch.bfloat16) for _ in range(2)]

    def call(at, q, k, v, kc, vc):
        arg = ops.FusedSetKVBufferArg(value=v[at], k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc[at]) if store else None
        ops.fused_qknorm_rope(pos[at], q[at], k[at], qw, kw, cs, EPS, True, arg)

    before = rows[0].clone()
    call(slice(None), *(r[..., :d] for r in rows), *caches[0])
    assert not torch.equal(rows[0], before)
    for start in range(0, tokens, 64):
        call(slice(start, start + 64), *(r[..., :d] for r in copies), *caches[1])
    for a, b in zip(rows, copies):
        assert torch.equal(a, b)
    if store:
        for a, b in zip(caches[0], caches[1]):
            assert torch.equal(cache_bytes(a, slots), cache_bytes(b, slots))
        ok = (loc >= 0) & (loc < slots)
        assert torch.equal(cache_bytes(caches[0][1], slots)[loc[ok]], cache_bytes(rows[2][..., :d].contiguous(), tokens)[ok])


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [4, 300, 4200])
def test_positions_outside_the_cache_skip_the_token(tokens):
    """A token at position -1 or max_position is left alone (q, k and its cache rows), the others are done."""
    torch = _torch()
    ops = _ops()
    d = 128
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=9)
    before = qkv.clone()
    qw, kw = _weights(d, torch.bfloat16)
    pos = _positions(tokens, torch.int64, max_pos=256)
    pos[1], pos[-1] = -1, 256
    cs = _cos_sin(d, max_pos=256)
    kc, vc = _caches("flat", tokens, d, torch.bfloat16)
    loc = torch.arange(tokens, device="cuda")
    ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True,
                          ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc))
    skipped = torch.zeros(tokens, dtype=torch.bool, device="cuda")
    skipped[1] = skipped[-1] = True
    assert torch.equal(qkv[skipped], before[skipped])
    assert torch.isnan(kc[skipped]).all() and torch.isnan(vc[skipped]).all()
    ok = ~skipped
    _assert_close(q[ok].view(-1, HQ, d), _reference(before[ok, : HQ * d].view(-1, HQ, d), qw, pos[ok], cs, True), "bfloat16")
    assert torch.equal(kc[ok].view(-1, HK * d), k[ok]) and torch.equal(vc[ok].view(-1, HK * d), v[ok])


@pytest.mark.gpu
def test_nan_and_inf_stay_in_their_head():
    """A NaN in a head makes the head NaN (its norm is NaN); an inf makes its norm's scale 0: the head is 0
    but for the inf's element and its rotation partner (inf * 0), as torch computes it. No other head changes."""
    torch = _torch()
    ops = _ops()
    d, tokens = 128, 3
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=11)
    q[0, 5 * d + 7] = float("nan")
    k[2, 1 * d + 100] = float("inf")
    before = qkv.clone()
    qw, kw = _weights(d, torch.bfloat16)
    pos = _positions(tokens, torch.int32)
    cs = _cos_sin(d)
    ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS)
    q3, k3 = q.view(tokens, HQ, d), k.view(tokens, HK, d)
    eq = _reference(before[:, : HQ * d].view(tokens, HQ, d), qw, pos, cs, True)
    ek = _reference(before[:, HQ * d : (HQ + HK) * d].view(tokens, HK, d), kw, pos, cs, True)
    assert torch.isnan(q3[0, 5]).all() and torch.isnan(eq[0, 5]).all()
    assert torch.isnan(k3[2, 1]).sum() == 2 and (k3[2, 1].nan_to_num() == 0).all()
    torch.testing.assert_close(k3[2, 1].double(), ek[2, 1], equal_nan=True, rtol=0, atol=0)
    q_ok = torch.ones(tokens, HQ, dtype=torch.bool, device="cuda")
    q_ok[0, 5] = False
    k_ok = torch.ones(tokens, HK, dtype=torch.bool, device="cuda")
    k_ok[2, 1] = False
    _assert_close(q3[q_ok], eq[q_ok], "bfloat16")
    _assert_close(k3[k_ok], ek[k_ok], "bfloat16")


@pytest.mark.gpu
def test_empty_input_is_a_no_op():
    torch = _torch()
    ops = _ops()
    q = torch.empty(0, HQ * 128, dtype=torch.bfloat16, device="cuda")
    k = torch.empty(0, HK * 128, dtype=torch.bfloat16, device="cuda")
    qw, kw = _weights(128, torch.bfloat16)
    kc, vc = _caches("flat", 8, 128, torch.bfloat16)
    pos = torch.empty(0, dtype=torch.int64, device="cuda")
    ops.fused_qknorm_rope(pos, q, k, qw, kw, _cos_sin(128), EPS, True,
                          ops.FusedSetKVBufferArg(value=k, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=pos))
    torch.cuda.synchronize()
    assert torch.isnan(kc).all() and torch.isnan(vc).all()


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [8, 4200])
def test_replays_in_a_cuda_graph(tokens):
    """Captured once, the fused op (cache write included) follows new inputs at every replay; with few
    tokens and with many (the staged kernel)."""
    torch = _torch()
    ops = _ops()
    d, slots = 128, 8192
    qkv = torch.empty(tokens, (HQ + 2 * HK) * d, dtype=torch.bfloat16, device="cuda")
    q, k, v = qkv[:, : HQ * d], qkv[:, HQ * d : (HQ + HK) * d], qkv[:, (HQ + HK) * d :]
    qw, kw = _weights(d, torch.bfloat16)
    cs = _cos_sin(d)
    pos = torch.zeros(tokens, dtype=torch.int64, device="cuda")
    loc = torch.zeros(tokens, dtype=torch.int64, device="cuda")
    kc, vc = _caches("paged", slots, d, torch.bfloat16)
    state = {}
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc)
    ops.warmup(ops=["fused_qknorm_rope"], dtypes=[torch.bfloat16])

    def prepare(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        qkv.copy_(torch.randn(qkv.shape, generator=g, device="cuda"))
        pos.copy_(torch.randint(0, MAX_POS, (tokens,), generator=g, device="cuda"))
        loc.copy_(torch.randperm(slots, generator=g, device="cuda")[:tokens])
        state["before"] = qkv.clone()

    def step():
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, False, fused_set_kv_buffer_arg=arg)

    def check(what):
        b = state["before"]
        eq = _reference(b[:, : HQ * d].view(tokens, HQ, d), qw, pos, cs, False)
        ek = _reference(b[:, HQ * d : (HQ + HK) * d].view(tokens, HK, d), kw, pos, cs, False)
        _assert_close(q.view(tokens, HQ, d), eq, "bfloat16")
        _assert_close(k.view(tokens, HK, d), ek, "bfloat16")
        assert torch.equal(kc.view(slots, HK * d)[loc], k), what
        assert torch.equal(vc.view(slots, HK * d)[loc], v), what

    eagerly_then_from_a_graph(prepare, step, check)


@pytest.mark.gpu
def test_torch_compile_fullgraph_and_opcheck():
    torch = _torch()
    ops = _ops()
    d, tokens = 128, 5
    qw, kw = _weights(d, torch.bfloat16)
    cs = _cos_sin(d)
    pos = _positions(tokens, torch.int64)
    kc, vc = _caches("flat", 16, d, torch.bfloat16)
    loc = torch.arange(tokens, device="cuda")

    def layer(qkv):
        q, k, v = qkv.split([HQ * d, HK * d, HK * d], dim=-1)
        arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc)
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True, fused_set_kv_buffer_arg=arg)
        return q * 2, k + 1

    qkv, _, _, _ = _qkv(tokens, d, torch.bfloat16, seed=1)
    expected = layer(qkv.clone())
    compiled = torch.compile(layer, fullgraph=True)
    actual = compiled(qkv.clone())
    for a, e in zip(actual, expected):
        assert torch.equal(a, e)
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=2)
    torch.library.opcheck(torch.ops.jitkern.qknorm_rope, (pos, q, k, qw, kw, cs, EPS, True, [], False, 0.0))
    torch.library.opcheck(torch.ops.jitkern.qknorm_rope_store_kv, (pos, q, k, qw, kw, cs, EPS, True, [], False, 1.0, v, kc, vc, loc, 1.0, 1.0))
    mrope_pos = torch.stack([pos, pos.flip(0), pos // 2])
    torch.library.opcheck(torch.ops.jitkern.qknorm_rope, (mrope_pos, q, k, qw, kw, cs, EPS, False, [24, 20, 20], True, 0.0))


@pytest.mark.gpu
def test_bad_arguments_are_named():
    torch = _torch()
    ops = _ops()
    d, tokens = 128, 4
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16)
    qw, kw = _weights(d, torch.bfloat16)
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(d)
    with pytest.raises(TypeError, match="k_weight"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw.float(), cs, EPS)
    with pytest.raises(ValueError, match="k_weight"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw[:64], cs, EPS)
    with pytest.raises(ValueError, match="rotary dim"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw, _cos_sin(2 * d), EPS)
    with pytest.raises(ValueError, match=r"q: Size mismatch for shape#0\('num_tokens'\)"):
        ops.fused_qknorm_rope(pos[:3], q, k, qw, kw, cs, EPS)
    with pytest.raises(ValueError, match="eps"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, float("nan"))
    with pytest.raises(ValueError, match="q of shape"):
        ops.fused_qknorm_rope(pos, q[:, : 3 * d + 1], k, qw, kw, cs, EPS)
    big = torch.randn(tokens, 3 * 1024, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="head_size 1024 with rotary dim 1024 is too large"):
        ops.fused_qknorm_rope(pos, big[:, :2048], big[:, 2048:], *_weights(1024, torch.bfloat16), _cos_sin(1024), EPS)
    kc, vc = _caches("flat", 8, d, torch.bfloat16)
    with pytest.raises(ValueError, match="k_scale"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True,
                              ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=0.5, v_scale=None, cache_loc=pos))
    with pytest.raises(TypeError, match="v_buffer must have k_buffer's dtype"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True,
                              ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc.half(), k_scale=None, v_scale=None, cache_loc=pos))
    before = qkv.clone()
    fn = ops.qknorm_rope._qknorm_rope_module(torch.bfloat16).apply  # the export itself checks too
    with pytest.raises(ValueError, match="q_weight"):
        fn(pos, q.view(tokens, HQ, d), k.view(tokens, HK, d), qw[:64], kw, cs, EPS, 0.0, True, 0, 0, 0, False)
    with pytest.raises(ValueError, match="weight_offset must be finite"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, weight_offset=float("inf"))
    with pytest.raises(ValueError, match=r"mrope_section must be three non-negative frequency counts summing to half the rotary dim 64"):
        ops.fused_qknorm_rope(torch.stack([pos] * 3), q, k, qw, kw, cs, EPS, mrope_section=[20, 20, 20])
    with pytest.raises(ValueError, match="mrope_section must be three ints"):
        ops.fused_qknorm_rope(torch.stack([pos] * 3), q, k, qw, kw, cs, EPS, mrope_section=[64])
    with pytest.raises(TypeError, match="mrope_section must be a list or tuple of three ints"):
        ops.fused_qknorm_rope(torch.stack([pos] * 3), q, k, qw, kw, cs, EPS, mrope_section=[16.0, 8, 8])
    with pytest.raises(ValueError, match=r"positions of shape \(3, 4\) are mRoPE's \[3, T\] for q's 4 tokens: pass mrope_section"):
        ops.fused_qknorm_rope(torch.stack([pos] * 3), q, k, qw, kw, cs, EPS)
    with pytest.raises(ValueError, match=r"positions of shape \(3, 4\) are mRoPE's \[3, T\] for q's 4 tokens"):  # 3 heads: not a batch of 3
        ops.fused_qknorm_rope(torch.stack([pos] * 3), q[:, :3 * d].view(tokens, 3, d), k, qw, kw, cs, EPS)
    with pytest.raises(ValueError, match=r"q overlaps itself: its dimension 1 \(\d+ elements, stride 64\)"):
        ops.fused_qknorm_rope(pos, qkv.as_strided((tokens, HQ, d), (qkv.stride(0), d // 2, 1)), k, qw, kw, cs, EPS)
    with pytest.raises(ValueError, match="q and k must not overlap"):
        ops.fused_qknorm_rope(pos, q, q, qw, kw, cs, EPS)
    with pytest.raises(ValueError, match="q and k must not overlap: they share memory"):  # k reaching half a head back into q
        ops.fused_qknorm_rope(pos, q, qkv[:, HQ * d - d // 2 : (HQ + HK) * d - d // 2], qw, kw, cs, EPS)
    with pytest.raises(ValueError, match="k_buffer overlaps itself"):
        ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True,
                              ops.FusedSetKVBufferArg(value=v, k_buffer=kc[:1].expand_as(kc), v_buffer=vc, k_scale=None, v_scale=None,
                                                      cache_loc=pos))
    assert torch.equal(qkv, before), "a refused call wrote"


@pytest.mark.gpu
def test_cpu_tensors_are_refused_before_anything_is_built():
    torch = _torch()
    ops = _ops()
    q = torch.zeros(2, 4 * 64, dtype=torch.bfloat16)
    with pytest.raises((TypeError, ValueError), match="q"):
        ops.fused_qknorm_rope(torch.zeros(2, dtype=torch.int64), q, q, torch.ones(64), torch.ones(64), torch.zeros(8, 64), EPS)


def _mrope_table(cos_sin, positions, section, interleaved):
    """Per token, the cos/sin row mRoPE uses: each frequency's column from the row of its section's position."""
    torch = _torch()
    half = cos_sin.shape[1] // 2
    t, h, w = section
    f = torch.arange(half, device="cuda")
    if interleaved:
        sec = torch.where((f % 3 == 1) & (f < 3 * h), 1, torch.where((f % 3 == 2) & (f < 3 * w), 2, 0))
    else:
        sec = (f >= t).long() + (f >= t + h).long()
    rows = cos_sin[positions.long()]  # [3, T, R]
    index = sec.repeat(2)[None, None, :].expand(1, rows.shape[1], rows.shape[2])
    return rows.gather(0, index)[0]


@pytest.mark.gpu
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("tokens,store", [(1, True), (7, False), (300, True)])
def test_mrope_sections(interleaved, neox, tokens, store):
    """positions [3, T] (t, h, w): each frequency rotates by its section's position (Qwen2-VL's contiguous
    sections, Qwen3-VL's interleaved ones); positions [T] with the sections rotate as plain RoPE."""
    torch = _torch()
    ops = _ops()
    d, section = 128, (24, 20, 20)
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=21)
    qw, kw = _weights(d, torch.bfloat16, seed=4)
    pos = torch.stack([_positions(tokens, torch.int64, seed=s) for s in range(3)]).to(torch.int32 if tokens % 2 else torch.int64)
    cs = _cos_sin(d)
    table = _mrope_table(cs, pos, section, interleaved)
    ids = torch.arange(tokens, device="cuda")
    eq = _reference(q.view(tokens, HQ, d), qw, ids, table, neox)
    ek = _reference(k.view(tokens, HK, d), kw, ids, table, neox)
    kc, vc = _caches("flat", tokens + 3, d, torch.bfloat16)
    loc = torch.arange(tokens, device="cuda") + 3
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None, cache_loc=loc) if store else None
    ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, neox, arg, mrope_section=section, mrope_interleaved=interleaved)
    _assert_close(q.view(tokens, HQ, d), eq, "bfloat16")
    _assert_close(k.view(tokens, HK, d), ek, "bfloat16")
    if store:
        assert torch.equal(kc[3:].view(tokens, -1), k) and torch.equal(vc[3:].view(tokens, -1), v)
    qkv2, q2, k2, _ = _qkv(tokens, d, torch.bfloat16, seed=22)
    eq2 = _reference(q2.view(tokens, HQ, d), qw, pos[0], cs, neox)
    ops.fused_qknorm_rope(pos[0], q2, k2, qw, kw, cs, EPS, neox, mrope_section=section, mrope_interleaved=interleaved)
    _assert_close(q2.view(tokens, HQ, d), eq2, "bfloat16")


@pytest.mark.gpu
def test_mrope_token_with_a_section_position_outside_is_skipped():
    torch = _torch()
    ops = _ops()
    d, tokens = 128, 4
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=23)
    before = qkv.clone()
    qw, kw = _weights(d, torch.bfloat16)
    pos = torch.stack([_positions(tokens, torch.int64, seed=s) for s in range(3)])
    pos[1, 2] = MAX_POS  # token 2's h position
    ops.fused_qknorm_rope(pos, q, k, qw, kw, _cos_sin(d), EPS, True, mrope_section=(16, 24, 24))
    assert torch.equal(qkv[2], before[2])
    assert not torch.equal(qkv[1], before[1])


@pytest.mark.gpu
@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("tokens", [9, 4096 + 37])
def test_gemma_weight_offset(store, tokens):
    """weight_offset=1: the heads are normalised by (1 + w), as Gemma's q and k norms (many tokens: the staged
    kernel, its weights converted once a CTA)."""
    torch = _torch()
    ops = _ops()
    d = 256
    qkv, q, k, v = _qkv(tokens, d, torch.bfloat16, seed=31)
    qw, kw = (w - 1 for w in _weights(d, torch.bfloat16, seed=6))
    pos = _positions(tokens, torch.int64)
    cs = _cos_sin(d)
    eq = _reference(q.view(tokens, HQ, d), qw.double() + 1, pos, cs, True)
    ek = _reference(k.view(tokens, HK, d), kw.double() + 1, pos, cs, True)
    kc, vc = _caches("flat", tokens, d, torch.bfloat16)
    arg = ops.FusedSetKVBufferArg(value=v, k_buffer=kc, v_buffer=vc, k_scale=None, v_scale=None,
                                  cache_loc=torch.arange(tokens, device="cuda")) if store else None
    ops.fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True, arg, weight_offset=1.0)
    _assert_close(q.view(tokens, HQ, d), eq, "bfloat16")
    _assert_close(k.view(tokens, HK, d), ek, "bfloat16")
    if store:
        assert torch.equal(kc.view(tokens, -1), k)


OCCUPANCY_PROBE = r"""
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>

__global__ void occupancy_probe_kernel(int* out) {
  extern __shared__ int staged[];
  if (out != nullptr) out[threadIdx.x] = staged[threadIdx.x];
}
// The same type, 32 KiB more shared memory a CTA: fewer CTAs an SM at the same (threads, bytes).
__global__ void occupancy_probe_kernel_big(int* out) {
  extern __shared__ int staged[];
  __shared__ int fixed[8192];
  fixed[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out != nullptr) out[threadIdx.x] = staged[threadIdx.x] + fixed[8191 - threadIdx.x];
}

// For each row (kernel, threads, bytes) of asks: resident_ctas_per_sm's answer, then the occupancy API's.
void resident_ctas(jitkern::TensorView asks, jitkern::TensorView out, int64_t device) {
  const auto* a = static_cast<const int64_t*>(asks.data_ptr());
  auto* o = static_cast<int64_t*>(out.data_ptr());
  for (int64_t i = 0; i < asks.size(0); ++i) {
    const auto kernel = a[3 * i] == 0 ? occupancy_probe_kernel : occupancy_probe_kernel_big;
    const int threads = static_cast<int>(a[3 * i + 1]);
    o[2 * i] = host::runtime::resident_ctas_per_sm(kernel, threads, a[3 * i + 2], static_cast<int>(device));
    const host::DeviceGuard guard(static_cast<int>(device));
    o[2 * i + 1] = host::runtime::get_blocks_per_sm(kernel, threads, a[3 * i + 2]);
  }
}
"""


@pytest.mark.gpu
def test_resident_ctas_per_sm_is_cached_per_kernel_block_size_and_shared_memory(tmp_path):
    """host::runtime::resident_ctas_per_sm (the staged launch's grid; moe_act's) answers as the occupancy API for
    each (kernel, threads, bytes), asked again in any order: its cache tells them apart, also two kernels of one
    type."""
    torch = _torch()
    import jitkern

    src = tmp_path / "occupancy_probe.cuh"
    src.write_text(OCCUPANCY_PROBE)
    module = jitkern.load_jit("qknorm_rope_occupancy_probe", cuda_files=[str(src)], cuda_wrappers=[("resident_ctas", "resident_ctas")])
    asks = torch.tensor([[0, 64, 0], [0, 64, 12 * 1024], [1, 64, 12 * 1024], [0, 64, 0], [0, 256, 8 * 1024], [1, 64, 0], [0, 64, 12 * 1024],
                         [0, 1024, 0], [1, 256, 8 * 1024], [0, 256, 8 * 1024], [1, 64, 12 * 1024]])
    out = torch.zeros(len(asks), 2, dtype=torch.int64)
    module.resident_ctas(asks, out, torch.cuda.current_device())
    assert torch.equal(out[:, 0], out[:, 1])
    assert len(set(out[:, 1].tolist())) >= 3  # the asks differ in what fits
    assert out[2, 1] < out[1, 1] and out[8, 1] < out[4, 1]  # the kernels differ at the same (threads, bytes)


@pytest.mark.toolchain
@pytest.mark.parametrize("export", ["apply", "apply_store"])
def test_a_module_compiles_five_kernels_without_spills(tmp_path, export):
    """Without a GPU: each of the op's modules (its first call builds one) compiles five kernels for sm_90a, none
    of them spilling: one head a lane group at 16-byte and one-element vectors (either pairing, read at run time),
    the staged kernel with branching lanes (either pairing) and of full lanes (NeoX, GPT-J). Eight kernels took the
    first call from 1.7 to 3.1 s on an H200."""
    import shutil

    import jitkern
    from sm90a_cubin import sm90a_cubin

    if shutil.which("nvcc") is None:
        pytest.skip("NOT RUN: nvcc is not installed")
    _, log = sm90a_cubin(tmp_path, "module", f'#include "{jitkern.CSRC_DIR / "qknorm_rope.cuh"}"\n'
                         f"void* entry = (void*)&jitkern_qknorm_rope::QkNormRopeOps<bf16_t>::{export};\n")
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len(kernels) == 5, kernels
    assert sum("staged" in k for k in kernels) == 3, kernels
    assert re.findall(r"(\d+) bytes spill stores", log) == ["0"] * 5, log
