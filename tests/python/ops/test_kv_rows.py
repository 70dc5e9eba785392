"""The KV row copies (store_cache, the MLA concatenations) on the GPU against torch indexing, compared
byte for byte."""

import pytest
from kv_cache_cases import cache_bytes, expected_cache, locations, reference_kernel


def _torch():
    import torch

    return torch


def _ops():
    import jitkern.ops

    return jitkern.ops


# Rows of at most 256 vectors take one vector a lane; the wider last two take several, in turn (16-byte and 4-byte vectors).
STORE_CASES = [("bfloat16", (8, 128), "flat"), ("bfloat16", (8, 128), "paged"), ("float32", (3,), "flat"), ("float16", (6,), "paged"),
               ("bfloat16", (1, 576), "flat"), ("float8_e4m3fn", (8, 128), "paged"), ("int32", (5,), "flat"), ("float32", (8, 256), "paged"),
               ("int32", (1030,), "flat")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name,row,layout", STORE_CASES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("tokens", [1, 61, 1000])
def test_store_cache(dtype_name, row, layout, index_dtype, tokens):
    """k_cache[indices[i]] = k[i], v likewise, any dtype and row of a multiple of 4 bytes (16-byte and
    4-byte paths), strided k rows, flat or paged; out-of-range indices skipped."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    slots = 16 * (tokens // 16 + 4)
    width = 1
    for r in row:
        width *= r
    g = torch.Generator(device="cuda").manual_seed(tokens)
    big = torch.randint(-100, 100, (tokens, 2 * width + 4), device="cuda", generator=g).to(torch.float32)
    big = big.to(dtype) if dtype != torch.float8_e4m3fn else (big / 8).to(dtype)
    k = big[:, :width].view(tokens, *row)  # strided rows
    v = big[:, width + 4 : 2 * width + 4].reshape(tokens, *row).clone()
    shape = (slots, *row) if layout == "flat" else (slots // 16, 16, *row)
    kc = torch.zeros(shape, dtype=torch.float32, device="cuda").to(dtype)
    vc = torch.zeros(shape, dtype=torch.float32, device="cuda").to(dtype)
    loc = locations(tokens, slots, getattr(torch, index_dtype), seed=tokens)
    ek = expected_cache(cache_bytes(kc, slots), cache_bytes(k, tokens), loc)
    ev = expected_cache(cache_bytes(vc, slots), cache_bytes(v, tokens), loc)
    ops.store_cache(k, v, kc, vc, loc)
    assert torch.equal(cache_bytes(kc, slots), ek) and torch.equal(cache_bytes(vc, slots), ev)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 5, 1000])
@pytest.mark.parametrize("rope_heads", [1, 128])
def test_concat_mla_k(tokens, rope_heads):
    torch = _torch()
    ops = _ops()
    big = torch.randn(tokens, 128, 256, dtype=torch.bfloat16, device="cuda")
    k_nope = big[:, :, :128]  # strided
    k_rope = torch.randn(tokens, rope_heads, 64, dtype=torch.bfloat16, device="cuda")
    k = torch.full((tokens, 128, 192), float("nan"), dtype=torch.bfloat16, device="cuda")
    ops.concat_mla_k(k, k_nope, k_rope)
    assert torch.equal(k, torch.cat([k_nope, k_rope.expand(tokens, 128, 64)], dim=-1))
    k2 = torch.full((tokens, 128, 192), float("nan"), dtype=torch.bfloat16, device="cuda")
    ops.concat_mla_k(k2, k_nope, k_rope[:, 0])  # [T, Dr] broadcasts too
    assert torch.equal(k2[:, :, 128:], k_rope[:, :1].expand(tokens, 128, 64))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,da,db,dtype_name", [((1, 128), 512, 64, "bfloat16"), ((77, 16), 512, 64, "bfloat16"),
                                                    ((301, 128), 512, 64, "bfloat16"),
                                                    ((3, 5), 7, 3, "float16"), ((4, 2), 5, 3, "float8_e4m3fn")])
def test_concat_mla_absorb_q(shape, da, db, dtype_name):
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    a = torch.randn(*shape, da + 2, device="cuda").to(dtype)[..., 1 : da + 1]  # strided, and misaligned by one element
    b = torch.randn(*shape, db, device="cuda").to(dtype)
    out = ops.concat_mla_absorb_q(a, b)
    assert out.shape == (*shape, da + db) and out.dtype == dtype
    rows = out.numel() // (da + db)
    assert torch.equal(cache_bytes(out, rows), torch.cat([cache_bytes(a, rows), cache_bytes(b, rows)], dim=-1))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,da", [((1, 128), 512), ((64, 128), 512), ((7, 3), 384), ((300, 128), 512), ((2, 16), 256)])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_concat_mla_absorb_q_aligned(shape, da, dtype_name):
    """16-byte aligned rows of 2 * da + 128 bytes: MLA's (da 512) a warp a row up to 4 waves of rows, more
    rows ([300, 128] on GPUs of up to 144 SMs) and other widths (da 384, 256) the output's vectors in order."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    a = torch.randn(*shape, da, device="cuda").to(dtype)
    b = torch.randn(*shape, 64, device="cuda").to(dtype)
    assert torch.equal(ops.concat_mla_absorb_q(a, b), torch.cat([a, b], dim=-1))
    wide = torch.randn(*shape, da + 64 + 8, device="cuda").to(dtype)  # rows strided by 8 more elements (16 bytes)
    assert torch.equal(ops.concat_mla_absorb_q(wide[..., :da], wide[..., da + 8 :]), torch.cat([wide[..., :da], wide[..., da + 8 :]], dim=-1))


# MLA's absorbed q ([T, 128, 512 + 64]) in the layouts a warp-a-row kernel meets: rows evenly spaced in every
# tensor (one stride a row) or not (the row's token and head divided out).
ABSORB_LAYOUTS = ["contiguous", "a transposed", "b broadcast over heads", "every other head of a", "one head", "out strided"]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ABSORB_LAYOUTS)
@pytest.mark.parametrize("tokens", [1, 64])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_concat_mla_absorb_q_warp_row_layouts(layout, tokens, dtype_name):
    """a [T, H, 512] as the absorbed q's bmm leaves it ([H, T, 512] transposed), b expanded over the heads,
    heads strided, one head, or out a slice of wider rows: the bytes of torch.cat."""
    torch = _torch()
    ops = _ops()
    dtype = getattr(torch, dtype_name)
    heads = 1 if layout == "one head" else 128

    def rand(*shape):
        return torch.randn(*shape, device="cuda").to(dtype)

    a = rand(heads, tokens, 512).transpose(0, 1) if layout == "a transposed" else (
        rand(tokens, 2 * heads, 512)[:, ::2] if layout == "every other head of a" else rand(tokens, heads, 512))
    b = rand(tokens, 1, 64).expand(tokens, heads, 64) if layout == "b broadcast over heads" else rand(tokens, heads, 64)
    expected = torch.cat([a, b], dim=-1)
    if layout == "out strided":
        wide = torch.full((tokens, heads, 576 + 8), float("nan"), device="cuda", dtype=dtype)
        out = wide[..., :576]  # rows 1168 bytes apart
        from jitkern.ops import kv_rows

        kv_rows._FUNCTIONS["concat_mla"]("concat_mla_absorb_q")(a, b, out)
        assert torch.equal(out, expected) and wide[..., 576:].isnan().all()
    else:
        assert torch.equal(ops.concat_mla_absorb_q(a, b), expected)


@pytest.mark.gpu
def test_bad_inputs_rejected_before_launch():
    torch = _torch()
    ops = _ops()
    d = 64
    k = torch.randn(4, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(4, d, dtype=torch.bfloat16, device="cuda")
    kc, vc = (torch.zeros(8, 1, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    loc = torch.arange(4, device="cuda")

    def rejects(error, match, fn, *args, **kwargs):
        with pytest.raises(error, match=match) as info:
            fn(*args, **kwargs)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"

    rejects(TypeError, "k_cache must have k's dtype", ops.store_cache, k, v, kc.half(), vc.half(), loc)
    rejects(ValueError, "rows must be a positive multiple of 4 bytes", ops.store_cache, k[:, :3], v[:, :3], kc[..., :3], vc[..., :3], loc)
    rejects(ValueError, r"indices: Size mismatch", ops.store_cache, k, v, kc, vc, loc[:2])
    rejects(ValueError, "k's head dim 192 must be k_nope's 128 \\+ k_rope's 32", ops.concat_mla_k,
            torch.empty(2, 4, 192, dtype=torch.bfloat16, device="cuda"), torch.empty(2, 4, 128, dtype=torch.bfloat16, device="cuda"),
            torch.empty(2, 1, 32, dtype=torch.bfloat16, device="cuda"))
    rejects(TypeError, "b: DType mismatch", ops.concat_mla_absorb_q, torch.empty(2, 4, 8, device="cuda"),
            torch.empty(2, 4, 8, dtype=torch.half, device="cuda"))
    rejects(ValueError, r"k overlaps itself: its dimension 1 \(4 elements, stride 0\)", ops.concat_mla_k,
            torch.empty(2, 1, 160, dtype=torch.bfloat16, device="cuda").expand(2, 4, 160), torch.empty(2, 4, 128, dtype=torch.bfloat16, device="cuda"),
            torch.empty(2, 1, 32, dtype=torch.bfloat16, device="cuda"))
    rejects(ValueError, "k_cache overlaps itself", ops.store_cache, k, v, kc[:1].expand_as(kc), vc, loc)
    rejects(ValueError, "k_cache and v_cache must not overlap", ops.store_cache, k, v, kc, kc, loc)
    assert not kc.any(), "a rejected store_cache wrote"


@pytest.mark.gpu
def test_opcheck():
    torch = _torch()
    import jitkern.ops  # noqa: F401  (registers torch.ops.jitkern)

    d, t = 64, 5
    k, v = (torch.randn(t, 2 * d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    kc, vc = (torch.zeros(16, 2, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    loc = torch.arange(t, device="cuda") * 2
    torch.library.opcheck(torch.ops.jitkern.store_cache, (k, v, kc, vc, loc))
    torch.library.opcheck(torch.ops.jitkern.concat_mla_k, (torch.empty(t, 4, 96, dtype=torch.bfloat16, device="cuda"),
                                                           torch.randn(t, 4, 64, dtype=torch.bfloat16, device="cuda"),
                                                           torch.randn(t, 1, 32, dtype=torch.bfloat16, device="cuda")))
    torch.library.opcheck(torch.ops.jitkern.concat_mla_absorb_q, (torch.randn(t, 4, 64, device="cuda"), torch.randn(t, 4, 32, device="cuda")))


@pytest.mark.gpu
def test_matches_the_reference_framework_where_it_runs():
    """Against the reference's own JIT kernel (its store_cache), where its wheel imports."""
    torch = _torch()
    ops = _ops()
    ref_store = reference_kernel("kvcache", "store_cache")
    d, t, heads = 128, 33, 8
    k, v = (torch.randn(t, heads * d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    caches = [torch.zeros(128, heads * d, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    loc = locations(t, 128, torch.int64, out_of_range=False)
    ops.store_cache(k, v, caches[0], caches[1], loc)
    ref_store(k, v, caches[2], caches[3], loc)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


def test_specs_name_each_ops_modules():
    """Without a GPU: store_cache and the two concatenations take one dtype-independent module each."""
    from jitkern import ops

    assert [s.name for s in ops.specs(ops=["store_cache"])] == ["kv_rows_store_cache"]
    assert [s.name for s in ops.specs(ops=["store_cache", "concat_mla_k", "concat_mla_absorb_q"])] == ["kv_rows_store_cache", "kv_rows_concat_mla"]
    assert [s.name for s in ops.specs(families=["kv_rows"], dtypes=["bfloat16"])] == ["kv_rows_store_cache", "kv_rows_concat_mla"]
    assert ops.OPS["concat_mla_k"] == "kv_rows"
