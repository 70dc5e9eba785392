"""The MoE routing family on the GPU: top-k against torch.topk (ties, NaN), the grouped sigmoid router
against a torch implementation, moe_align_block_size against a torch implementation for every expert count
and block size, bad input, and the torch custom ops."""

import pytest

pytestmark = pytest.mark.gpu


def _torch():
    import torch

    return torch


def _stable_topk(keys, k):
    """torch.topk's ranking with ties to the lowest index (stable descending sorts), NaN after every number."""
    torch = _torch()
    keys = keys.double()
    nan = keys.isnan()
    order = torch.sort(keys.masked_fill(nan, float("-inf")), dim=-1, descending=True, stable=True)[1]
    numbers_first = torch.sort(nan.gather(1, order).int(), dim=-1, stable=True)[1]
    return order.gather(1, numbers_first)[:, :k]


def _outputs(tokens, k, ids_dtype=None):
    torch = _torch()
    return (torch.full((tokens, k), float("nan"), device="cuda"),
            torch.full((tokens, k), -7, dtype=ids_dtype or torch.int32, device="cuda"))


# 4096 tokens only for fp32 / bf16 and k 1 / 8: keeps the GPU run short; the kernel path does not depend on it.
_TOPK_SOFTMAX_CASES = [
    (dtype_name, experts, k, tokens)
    for dtype_name in ("float32", "bfloat16", "float16")
    for experts in (8, 16, 60, 64, 128, 160, 256, 512)
    for k in (1, 2, 6, 8, 10, 32)
    for tokens in (1, 7, 4096)
    if k <= experts and (tokens != 4096 or (dtype_name != "float16" and k in (1, 8))) and (k <= 8 or experts in (64, 512))
]


@pytest.mark.parametrize("dtype_name,experts,k,tokens", _TOPK_SOFTMAX_CASES)
@pytest.mark.parametrize("renormalize", [False, True])
def test_topk_softmax_against_torch_topk(dtype_name, experts, k, tokens, renormalize):
    torch = _torch()
    from jitkern.ops import topk_softmax

    logits = torch.randn(tokens, experts, device="cuda").to(getattr(torch, dtype_name))
    w, ids = _outputs(tokens, k)
    topk_softmax(w, ids, logits, renormalize)
    probs = torch.softmax(logits.float(), dim=-1)
    ref_ids = _stable_topk(probs, k)  # bf16/fp16 logits tie often; torch.topk orders ties arbitrarily
    ref_w = probs.gather(1, ref_ids)
    assert torch.equal(ids.long(), ref_ids), "ids differ from torch.topk's ranking"
    if renormalize:
        ref_w = ref_w / ref_w.sum(-1, keepdim=True)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-6)


@pytest.mark.parametrize("experts", [64, 160])
def test_topk_softmax_ties_nan_int64_and_strided_rows(experts):
    torch = _torch()
    from jitkern.ops import topk_softmax

    tokens, k = 1000, 8
    logits = torch.randint(-3, 3, (tokens, experts), device="cuda").float()  # many ties
    logits[::3, ::5] = float("nan")
    logits[5, 4:] = float("nan")  # 4 numbers left: 4 NaN experts must fill the rest, lowest index first
    logits[7] = float("nan")  # nothing but NaN: the lowest indices, weight 0
    logits[8] = float("-inf")  # every logit -inf: the lowest indices, equal weights
    buf = torch.randn(tokens, experts + 8, device="cuda")
    buf[:, 8:] = logits
    w, ids = _outputs(tokens, k, torch.int64)
    topk_softmax(w, ids, buf[:, 8:], False)
    assert torch.equal(ids, _stable_topk(logits, k)), "ties must go to the lowest index and NaN last"
    probs = torch.softmax(logits.nan_to_num(nan=float("-inf")), dim=-1)
    probs[7] = 0.0  # no number to weigh
    probs[8] = 1.0 / experts
    torch.testing.assert_close(w, probs.gather(1, ids), rtol=0, atol=1e-6)
    assert not torch.isnan(logits[0:1].gather(1, ids[0:1])).any(), "a NaN logit was chosen over a number"
    w2, ids2 = _outputs(tokens, k, torch.int64)
    topk_softmax(w2, ids2, buf[:, 8:], True)
    assert torch.equal(ids2, ids)
    chosen = probs.gather(1, ids)
    total = chosen.sum(-1, keepdim=True)
    torch.testing.assert_close(w2, torch.where(total > 0, chosen / total, chosen), rtol=0, atol=1e-6)


def test_topk_softmax_broadcast_gating_is_only_read():
    """gating_output whose rows overlap (one row expanded: row stride 0) is accepted: it is only read."""
    torch = _torch()
    from jitkern.ops import topk_softmax

    gating = torch.randn(1, 128, device="cuda").expand(33, 128)
    w, ids = _outputs(33, 8, torch.int32)
    w_ref, ids_ref = _outputs(33, 8, torch.int32)
    topk_softmax(w, ids, gating, True)
    topk_softmax(w_ref, ids_ref, gating.contiguous(), True)
    assert torch.equal(ids, ids_ref) and torch.equal(w, w_ref)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("experts", [24, 128, 512])
def test_topk_softmax_unaligned_rows_and_signed_zeros(dtype_name, experts):
    """Rows one element off the vector alignment (the kernel then loads element by element), and -0.0
    against +0.0: equal logits, so the lower expert goes first whatever the sign bit (the kernel ranks
    integer keys of the logits' bits)."""
    torch = _torch()
    from jitkern.ops import topk_softmax

    dtype = getattr(torch, dtype_name)
    tokens, k = 300, 8
    logits = -torch.rand(tokens, experts, device="cuda") - 1  # every logit below the zeros
    logits[:, 3::5] = 0.0
    logits[::2, 3::10] = -0.0
    logits[7, 1] = 5.0
    buf = torch.zeros(tokens, experts + 1, device="cuda", dtype=dtype)
    buf[:, 1:] = logits.to(dtype)
    gating = buf[:, 1:]
    assert gating.data_ptr() % 16 != 0
    for renormalize in (False, True):
        w, ids = _outputs(tokens, k)
        topk_softmax(w, ids, gating, renormalize)
        ref_ids = _stable_topk(gating.float(), k)
        assert torch.equal(ids.long(), ref_ids), "-0.0 and +0.0 tie: the lower expert first"
        ref_w = torch.softmax(gating.float(), dim=-1).gather(1, ref_ids)
        if renormalize:
            ref_w = ref_w / ref_w.sum(-1, keepdim=True)
        torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-6)


def _softmax_grouped_reference64(logits, k, groups, topk_group, renormalize, scaling):
    """DeepSeek-V2's router in float64: softmax over every expert, groups ranked by their best score (NaN as -inf),
    the k best experts of the topk_group best groups (ties to the lowest index, NaN after every number)."""
    torch = _torch()
    t, e = logits.shape
    x = logits.double()
    # +-inf as +-DBL_MAX for the weights (an inf logit weighs as the largest number does), NaN as -inf
    scores = torch.softmax(x.nan_to_num(nan=float("-inf")), dim=-1).nan_to_num(nan=0.0)
    order = _stable_topk(x, e)  # every expert, numbers by value (ties: lowest index), NaN last
    if groups > 1:
        chosen = _stable_topk(x.masked_fill(x.isnan(), float("-inf")).view(t, groups, -1).max(dim=-1).values, topk_group)
        outside = torch.ones(t, groups, dtype=torch.int32, device=logits.device).scatter_(1, chosen, 0).repeat_interleave(e // groups, dim=1)
        order = order.gather(1, torch.sort(outside.gather(1, order), dim=-1, stable=True)[1])  # the chosen groups' experts first
    ids = order[:, :k]
    w = scores.gather(1, ids)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w * scaling, ids


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("experts,groups,topk_group,k", [(160, 8, 3, 6), (64, 8, 4, 6), (256, 8, 4, 8), (96, 3, 2, 4), (60, 6, 2, 4),
                                                         (512, 16, 4, 10), (64, 1, 1, 6), (32, 4, 2, 4), (120, 6, 2, 6), (512, 2, 1, 8),
                                                         (480, 6, 2, 8)])
@pytest.mark.parametrize("tokens", [1, 63, 1000])
@pytest.mark.parametrize("renormalize", [False, True])
def test_topk_softmax_grouped_against_float64(dtype_name, experts, groups, topk_group, k, tokens, renormalize):
    """DeepSeek-V2's grouped selection (groups of whole chunks in 2^n lanes: shuffles; of 10 or 20 experts, as
    DeepSeek-V2's 160 in 8: the shared-memory scan), and a routed_scaling_factor alone (groups 1)."""
    torch = _torch()
    from jitkern.ops import topk_softmax

    g = torch.Generator(device="cuda").manual_seed(experts * 1000 + tokens)
    logits = (torch.randn(tokens, experts, device="cuda", generator=g) * 2).to(getattr(torch, dtype_name))
    w, ids = _outputs(tokens, k)
    topk_softmax(w, ids, logits, renormalize, num_expert_group=groups, topk_group=topk_group, routed_scaling_factor=2.5)
    ref_w, ref_ids = _softmax_grouped_reference64(logits, k, groups, topk_group, renormalize, 2.5)
    assert torch.equal(ids.long(), ref_ids), "ids differ from the float64 grouped ranking"
    torch.testing.assert_close(w.double(), ref_w, rtol=1e-5, atol=1e-6)
    if groups == 1:  # the plain op's bits, times the factor
        w1, ids1 = _outputs(tokens, k)
        topk_softmax(w1, ids1, logits, renormalize)
        assert torch.equal(ids1, ids) and torch.equal(w1 * 2.5, w)


def test_topk_softmax_grouped_nan_ties_errors_and_compile():
    torch = _torch()
    from jitkern.ops import topk_softmax

    logits = torch.randint(-3, 3, (64, 64), device="cuda").float()  # ties within and across groups
    logits[::5, ::7] = float("nan")
    logits[3, :] = float("nan")  # nothing but NaN: groups tie at -inf, the lowest ones chosen
    logits[4, :] = float("-inf")  # -inf but one NaN and a 1: the 1, then the chosen groups' -inf experts (numbers), the NaN last
    logits[4, 2], logits[4, 5] = float("nan"), 1.0
    logits[6, :8] = float("nan")  # an all-NaN group ties with all--inf groups (both -inf): the lower wins
    logits[6, 8:] = float("-inf")
    logits[6, 20] = 1.0
    w, ids = _outputs(64, 6)
    topk_softmax(w, ids, logits, True, num_expert_group=8, topk_group=3)
    ref_w, ref_ids = _softmax_grouped_reference64(logits, 6, 8, 3, True, 1.0)
    assert torch.equal(ids.long(), ref_ids)
    torch.testing.assert_close(w.double(), ref_w.nan_to_num(nan=0.0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="num_expert_group must be 1-32 and divide"):
        topk_softmax(w, ids, logits, True, num_expert_group=7, topk_group=1)
    with pytest.raises(ValueError, match=r"k \(6\) exceeds the experts of topk_group groups \(4\)"):
        topk_softmax(w, ids, torch.randn(64, 32, device="cuda"), True, num_expert_group=16, topk_group=2)

    def route(x):
        return topk_softmax(*_outputs(x.shape[0], 6), x, True, num_expert_group=8, topk_group=3, routed_scaling_factor=16.0)

    x = torch.randn(9, 64, device="cuda")
    for a, b in zip(torch.compile(route, fullgraph=True)(x), route(x)):
        assert torch.equal(a, b)
    torch.library.opcheck(torch.ops.jitkern.topk_softmax_grouped, (*_outputs(9, 6), x, True, 8, 3, 16.0))


def _grouped_reference(logits, bias, k, groups, topk_group, renormalize, scaling):
    """DeepSeek-V3's biased grouped top-k in torch (ties to the lowest index)."""
    torch = _torch()
    scores = logits.float().sigmoid()
    choice = scores + bias if bias is not None else scores.clone()
    t, e = choice.shape
    if groups > 1:
        group_scores = choice.view(t, groups, -1).topk(2, dim=-1)[0].sum(-1)
        chosen = _stable_topk(group_scores, topk_group)
        mask = torch.zeros(t, groups, dtype=torch.bool, device=logits.device).scatter_(1, chosen, True)
        choice = choice.masked_fill(~mask.repeat_interleave(e // groups, dim=1), float("-inf"))
    ids = _stable_topk(choice, k)
    w = scores.gather(1, ids)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w * scaling, ids


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("experts,groups,topk_group,k", [(256, 8, 4, 8), (64, 1, 1, 6), (128, 4, 2, 4), (160, 32, 3, 1), (512, 16, 4, 8),
                                                         (8, 1, 1, 1), (512, 1, 1, 10), (256, 8, 4, 16), (64, 1, 1, 32)])
@pytest.mark.parametrize("tokens", [1, 63, 4096])
@pytest.mark.parametrize("with_bias", [True, False])
def test_topk_sigmoid_grouped_against_torch(dtype_name, experts, groups, topk_group, k, tokens, with_bias):
    torch = _torch()
    from jitkern.ops import topk_sigmoid

    logits = torch.randn(tokens, experts, device="cuda").to(getattr(torch, dtype_name))
    bias = torch.randn(experts, device="cuda") * 0.1 if with_bias else None
    w, ids = _outputs(tokens, k)
    topk_sigmoid(w, ids, logits, True, bias, num_expert_group=groups, topk_group=topk_group, routed_scaling_factor=2.5)
    ref_w, ref_ids = _grouped_reference(logits, bias, k, groups, topk_group, True, 2.5)
    assert torch.equal(ids.long(), ref_ids)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-5)  # 2.5 times a weight within 1e-6
    w2, ids2 = _outputs(tokens, k)
    topk_sigmoid(w2, ids2, logits, False, bias, num_expert_group=groups, topk_group=topk_group)
    ref_w, ref_ids = _grouped_reference(logits, bias, k, groups, topk_group, False, 1.0)
    assert torch.equal(ids2.long(), ref_ids)
    torch.testing.assert_close(w2, ref_w, rtol=0, atol=1e-6)


def test_topk_sigmoid_ties_and_nan():
    torch = _torch()
    from jitkern.ops import topk_sigmoid

    logits = torch.randint(-2, 2, (500, 256), device="cuda").float()
    logits[::2, ::7] = float("nan")
    w, ids = _outputs(500, 8)
    topk_sigmoid(w, ids, logits, False, torch.zeros(256, device="cuda"), num_expert_group=8, topk_group=4)
    ref_w, ref_ids = _grouped_reference(logits.nan_to_num(nan=float("-inf")), torch.zeros(256, device="cuda"), 8, 8, 4, False, 1.0)
    assert torch.equal(ids.long(), ref_ids)
    assert not torch.isnan(logits.gather(1, ids.long())).any()


def _sigmoid_reference64(logits, bias, k, groups, topk_group):
    """The sigmoid router in float64: NaN biased scores rank after every number (and count as -inf in the
    group scores), ties to the lowest index; the weights unnormalized, unscaled."""
    torch = _torch()
    scores = logits.double().sigmoid()
    choice = scores + bias.double() if bias is not None else scores.clone()
    t, e = choice.shape
    rank_keys = choice.nan_to_num(nan=-1e300)  # the finite biased scores here are far above it
    if groups > 1:
        group_scores = choice.nan_to_num(nan=float("-inf")).view(t, groups, -1).topk(2, dim=-1)[0].sum(-1)
        chosen = _stable_topk(group_scores, topk_group)
        mask = torch.zeros(t, groups, dtype=torch.bool, device=logits.device).scatter_(1, chosen, True)
        rank_keys = rank_keys.masked_fill(~mask.repeat_interleave(e // groups, dim=1), -2e300)  # below NaN: never chosen
    ids = _stable_topk(rank_keys, k)
    return scores.gather(1, ids), ids


# Shapes of both group forms: whole chunks of 2^n lanes (shuffles) and the rest (a lane per group scanning).
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("experts,groups,topk_group,k", [(256, 8, 4, 8), (512, 16, 4, 8), (160, 5, 2, 8), (96, 3, 2, 6), (64, 2, 1, 8),
                                                         (256, 32, 8, 8), (16, 8, 2, 3), (160, 32, 3, 1), (72, 4, 2, 8), (12, 4, 2, 4),
                                                         (48, 2, 1, 5), (1, 1, 1, 1), (200, 1, 1, 7)])
def test_topk_sigmoid_against_float64_with_ties_and_nan(dtype_name, experts, groups, topk_group, k):
    """Logits and biases on coarse grids: equal scores tie exactly, others differ far beyond rounding, so
    the float64 ranking is the kernel's; NaN logits in some rows, an unaligned bias, bf16 and fp16 biases (a
    checkpoint's buffer, exact on this grid), int64 ids."""
    torch = _torch()
    from jitkern.ops import topk_sigmoid

    gen = torch.Generator(device="cuda").manual_seed(experts * 100 + groups)
    tokens = 300
    logits = (torch.randint(-12, 13, (tokens, experts), device="cuda", generator=gen) / 4).to(getattr(torch, dtype_name))
    logits[::3, ::5] = float("nan")
    storage = torch.randint(-4, 5, (experts + 1,), device="cuda", generator=gen) / 8
    bias = storage[1:]  # 4 bytes past an aligned start: the scalar loads
    for b in (bias, storage[:-1].clone(), bias.bfloat16(), storage.half()[1:], None):
        w, ids = _outputs(tokens, k, torch.int64)
        topk_sigmoid(w, ids, logits, False, b, num_expert_group=groups, topk_group=topk_group)
        ref_w, ref_ids = _sigmoid_reference64(logits, b, k, groups, topk_group)
        assert torch.equal(ids, ref_ids)
        torch.testing.assert_close(w.double(), ref_w, rtol=0, atol=1e-6, equal_nan=True)


def test_topk_sigmoid_empty_strided_and_graph_replay():
    torch = _torch()
    from jitkern.ops import topk_sigmoid

    bias = torch.randn(256, device="cuda") * 0.1
    w, ids = _outputs(0, 8)
    topk_sigmoid(w, ids, torch.empty(0, 256, device="cuda"), True, bias, num_expert_group=8, topk_group=4)
    wide = torch.randn(40, 300, device="cuda")
    logits = wide[:, 4:260]  # rows 300 apart, not 16-byte aligned
    w, ids = _outputs(40, 8)
    topk_sigmoid(w, ids, logits, True, bias, num_expert_group=8, topk_group=4, routed_scaling_factor=2.5)
    ref_w, ref_ids = _grouped_reference(logits, bias, 8, 8, 4, True, 2.5)
    assert torch.equal(ids.long(), ref_ids)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-5)
    for groups, topk_group in ((1, 1), (8, 4)):
        x = torch.randn(16, 256, device="cuda")
        w, ids = _outputs(16, 8)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            topk_sigmoid(w, ids, x, True, bias, num_expert_group=groups, topk_group=topk_group)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        ref_w, ref_ids = _grouped_reference(x, bias, 8, groups, topk_group, True, 1.0)
        assert torch.equal(ids.long(), ref_ids)
        torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-6)


# 8 / 512 / 4096 tokens: grids of 2 / 128 / 1024 CTAs, which trigger the next launch at their start, after
# their wait and after their stores (on an H200's 132 SMs).
@pytest.mark.parametrize("tokens", [8, 512, 4096])
def test_topk_back_to_back_reads_what_the_launch_before_wrote(tokens):
    """Top-k kernels launched back to back in a CUDA graph (PDL), each reading the weights the one before
    wrote, the gating new each replay: a kernel that read before the one before finished shows stale weights."""
    torch = _torch()
    from jitkern.ops import topk_sigmoid, topk_softmax

    g = torch.randn(tokens, 256, device="cuda")
    bias = torch.randn(256, device="cuda") * 0.1
    (w1, ids1), (w2, ids2), (w3, ids3) = _outputs(tokens, 8), _outputs(tokens, 4), _outputs(tokens, 2)

    def chain():
        g.neg_()
        topk_sigmoid(w1, ids1, g, True, bias, num_expert_group=8, topk_group=4)
        topk_softmax(w2, ids2, w1, False)
        topk_sigmoid(w3, ids3, w2, True)

    chain()  # the modules loaded before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        ref_w, ref_ids = _grouped_reference(g, bias, 8, 8, 4, True, 1.0)
        assert torch.equal(ids1.long(), ref_ids)
        torch.testing.assert_close(w1, ref_w, rtol=0, atol=1e-6)
        assert torch.equal(ids2.long(), _stable_topk(w1, 4))
        torch.testing.assert_close(w2.double(), w1.double().softmax(-1).gather(1, ids2.long()), rtol=0, atol=1e-6)
        chosen = w2.gather(1, ids3.long())
        unchosen = w2.scatter(1, ids3.long(), float("-inf"))
        assert (chosen.min(-1).values >= unchosen.max(-1).values - 1e-6).all()
        scores = chosen.double().sigmoid()
        torch.testing.assert_close(w3.double(), scores / scores.sum(-1, keepdim=True), rtol=0, atol=1e-6)


def _align_reference(ids, experts, block_size):
    torch = _torch()
    flat = ids.reshape(-1).long()
    n = flat.numel()
    sorted_ids, expert_ids = [], []
    for e in range(experts):
        mine = torch.nonzero(flat == e).view(-1).tolist()
        if not mine:
            continue
        padded = -(-len(mine) // block_size) * block_size
        sorted_ids += mine + [n] * (padded - len(mine))
        expert_ids += [e] * (padded // block_size)
    return sorted_ids, expert_ids


def _check_align_into_larger_buffers(ids, experts, block_size, ref_sorted, ref_experts, offset=0, extra=(5, 2)):
    """moe_align_block_size into outputs `extra` entries longer than align_sizes asks (filled with -9;
    sorted_token_ids `offset` entries into its storage, expert_ids 3 - `offset`) against the reference's lists: the
    ids, the padding up to the end, each block's expert and -1 after the last."""
    torch = _torch()
    from jitkern.ops import moe_align_block_size
    from jitkern.ops.moe import align_sizes

    size, blocks = align_sizes(ids.numel(), experts, block_size)
    sorted_ids = torch.full((offset + size + extra[0],), -9, dtype=torch.int32, device="cuda")[offset:]
    expert_ids = torch.full((3 + blocks + extra[1],), -9, dtype=torch.int32, device="cuda")[3 - offset % 4:]
    total = torch.full((1,), -9, dtype=torch.int32, device="cuda")
    moe_align_block_size(ids, experts, block_size, sorted_ids, expert_ids, total)
    t = total.item()
    assert t == len(ref_sorted)
    assert sorted_ids[:t].tolist() == ref_sorted, "each expert's ids in order, padded with numel"
    assert (sorted_ids[t:] == ids.numel()).all(), "the tail is padding"
    assert expert_ids[: t // block_size].tolist() == ref_experts
    assert (expert_ids[t // block_size :] == -1).all()


# Every expert count and block size at 1-333 tokens; 4096 tokens (32768 ids, slow in the Python reference) at 64
# and 256 experts only.
_ALIGN_CASES = [(e, bs, t, k) for e in (8, 16, 64, 128, 256, 512) for bs in (16, 32, 64, 128, 256)
                for t, k in ((1, 1), (1, 8), (64, 8), (333, 2), (4096, 8)) if t != 4096 or e in (64, 256)]


@pytest.mark.parametrize("experts,block_size,tokens,k", _ALIGN_CASES)
def test_moe_align_block_size_against_torch(experts, block_size, tokens, k):
    torch = _torch()
    from jitkern.ops import moe_align_block_size

    gen = torch.Generator(device="cuda").manual_seed(experts * 1000 + block_size + tokens)
    # Skewed: half of the experts never chosen (empty experts), the rest unevenly.
    probs = torch.rand(experts, device="cuda", generator=gen) ** 4
    probs[1::2] = 0
    ids = torch.multinomial(probs.expand(tokens, -1), k, replacement=False, generator=gen).int() \
        if k <= (experts + 1) // 2 else torch.randint(0, experts, (tokens, k), device="cuda", dtype=torch.int32, generator=gen)
    # Odd token counts: sorted_token_ids 4 bytes past a 16-byte boundary (the padding is stored element by element).
    _check_align_into_larger_buffers(ids, experts, block_size, *_align_reference(ids, experts, block_size), offset=tokens % 2)
    # The allocating form, int64 ids and out-of-range ids (expert parallelism's -1) left out.
    ids64 = ids.long()
    ids64[0, 0] = -1
    s2, e2, t2 = moe_align_block_size(ids64, experts, block_size)
    ref_sorted, ref_experts = _align_reference(ids64, experts, block_size)  # the reference skips -1 as well
    assert t2.item() == len(ref_sorted) and s2[: t2.item()].tolist() == ref_sorted
    assert e2[: len(ref_experts)].tolist() == ref_experts


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
@pytest.mark.parametrize("experts,block_size,n,tokens_sized_for", [(256, 16, 1, 1), (256, 16, 8, 1), (256, 64, 32, 4), (512, 256, 7, 1),
                                                                    (8, 16, 32, 4), (256, 64, 8, 32768)])
def test_moe_align_block_size_into_buffers_sized_the_vllm_way(experts, block_size, n, tokens_sized_for, offset):
    """A few ids (the warp form) into outputs sized as vLLM / SGLang size them for a batch of `tokens_sized_for`
    top-8 tokens (numel + (E + 1)(block - 1) entries), far past align_reach: the entries past it are other CTAs'
    (up to kAlignTailCtas, looping beyond); sorted_token_ids 0-3 entries past a 16-byte boundary."""
    torch = _torch()
    from jitkern.ops.moe import align_sizes

    gen = torch.Generator(device="cuda").manual_seed(n * 7 + experts + offset)
    ids = torch.randint(0, experts, (n,), device="cuda", dtype=torch.int32, generator=gen)
    size, blocks = align_sizes(n, experts, block_size)
    big = tokens_sized_for * 8 + (experts + 1) * (block_size - 1)
    extra = (big - size, -(-big // block_size) - blocks)
    _check_align_into_larger_buffers(ids, experts, block_size, *_align_reference(ids, experts, block_size), offset=offset, extra=extra)


# Few ids (the warp form) where an expert fills several blocks: its count crosses block_size, 16 and 32 blocks.
_FEW_IDS = {
    "32 on the last expert": lambda e: [e - 1] * 32,
    "31 on one, 1 on a larger": lambda e: [3] * 31 + [7],
    "20 on one, 1 on a larger, 3 on none": lambda e: [5] * 20 + [9] + [-1] * 3,
    "17 on one, 1 on a smaller": lambda e: [200] * 17 + [0],
    "most on the first and last, some elsewhere": lambda e: [e - 1 if i % 2 == 0 else 0 if i % 3 == 1 else 37 * i % e for i in range(31)] + [-1],
}


@pytest.mark.parametrize("block_size", [1, 2, 3, 8, 16, 20, 31, 32])
@pytest.mark.parametrize("pattern", list(_FEW_IDS))
def test_moe_align_block_size_few_ids_with_many_blocks_an_expert(pattern, block_size):
    """The warp form (up to 32 ids) where an expert takes several blocks: up to 32 at block 1, counts of 17-31
    around block sizes 16-32, an expert after one of 31 blocks, ids on no expert (-1)."""
    torch = _torch()
    experts = 512
    ids = torch.tensor(_FEW_IDS[pattern](experts), dtype=torch.int32, device="cuda")
    _check_align_into_larger_buffers(ids, experts, block_size, *_align_reference(ids, experts, block_size))


@pytest.mark.parametrize("ids_dtype", ["int32", "int64"])
def test_moe_align_block_size_over_many_chunks(ids_dtype):
    """ids in runs of 128, then shuffled: each expert's ids cross many warps' and CTAs' slices and must keep
    their order."""
    torch = _torch()
    from jitkern.ops import moe_align_block_size

    experts, block_size = 64, 16
    runs = torch.arange(3 * 4096, device="cuda") // 128 % experts
    gen = torch.Generator(device="cuda").manual_seed(7)
    shuffled = torch.randint(0, experts, (2 * 4096 + 77,), device="cuda", generator=gen)
    ids = torch.cat([runs, shuffled]).to(getattr(torch, ids_dtype))
    sorted_ids, expert_ids, total = moe_align_block_size(ids, experts, block_size)
    ref_sorted, ref_experts = _align_reference(ids, experts, block_size)
    assert total.item() == len(ref_sorted)
    assert sorted_ids[: len(ref_sorted)].tolist() == ref_sorted
    assert expert_ids[: len(ref_experts)].tolist() == ref_experts


def _align_reference_torch(flat, experts, block_size):
    """_align_reference vectorized (for many ids): a stable sort by expert, ids outside [0, experts) left out."""
    torch = _torch()
    n = flat.numel()
    key = torch.where((flat >= 0) & (flat < experts), flat.long(), experts)
    order = torch.sort(key, stable=True)[1]
    counts = torch.bincount(key, minlength=experts + 1)[:experts]
    padded = (counts + block_size - 1) // block_size * block_size
    starts = padded.cumsum(0) - padded
    kept = int(counts.sum())
    by_expert = key[order[:kept]]
    rank = torch.arange(kept, device=flat.device) - (counts.cumsum(0) - counts)[by_expert]
    expected = torch.full((int(padded.sum()),), n, dtype=torch.int64, device=flat.device)
    expected[starts[by_expert] + rank] = order[:kept]
    return expected, torch.repeat_interleave(torch.arange(experts, device=flat.device), padded // block_size)


@pytest.mark.parametrize("ids_dtype", ["int32", "int64"])
@pytest.mark.parametrize("experts,block_size,n", [(256, 64, 32768 * 8), (128, 128, 4096), (128, 16, 4095), (512, 16, 4096 * 8 + 3),
                                                  (1, 16, 5000), (256, 64, 0), (256, 16, 2048), (512, 64, 4095), (256, 16, 4096),
                                                  (64, 256, 513), (512, 16, 512), (256, 16, 32767), (256, 16, 32),
                                                  (256, 16, 33)])
def test_moe_align_block_size_across_ctas(ids_dtype, experts, block_size, n):
    """One warp up to 32 ids, one CTA up to 512; beyond, the alignment splits topk_ids over CTAs (the grid form's
    chunks of 512 ids below kAlignClusterMinIds = 4096, a cluster of 8's slices from there, of 16 with ballots from
    32768): each expert's ids stay in order across the CTAs' and warps' slices (ids skewed to a few experts, so each
    expert spans many slices), ids outside [0, experts) (-1, experts, far beyond) are left out, and every entry past
    the ids is written."""
    torch = _torch()

    gen = torch.Generator(device="cuda").manual_seed(n + experts)
    flat = (torch.rand(n, device="cuda", generator=gen) ** 3 * experts).long()
    flat[::97] = -1
    flat[5::101] = experts
    if ids_dtype == "int64":
        flat[7::103] = 2**40
    flat = flat.to(getattr(torch, ids_dtype))
    ref_sorted, ref_experts = _align_reference_torch(flat, experts, block_size)
    _check_align_into_larger_buffers(flat, experts, block_size, ref_sorted.tolist(), ref_experts.tolist())


_PENDING_ERROR_CHILD = """
import ctypes, sys, torch, jitkern.ops, jitkern.ops.moe
sys.path.insert(0, sys.argv[1])
from conftest import loaded_cuda_runtimes
if torch.cuda.get_device_capability()[0] < 9:
    sys.exit("NOT RUN: clusters need sm_90+, where the alignment asks the device about them")
ids = torch.randint(0, 256, (4096, 8), device="cuda", dtype=torch.int32)
jitkern.ops.moe.align_spec().load()  # the module's runtime loaded, its cluster question not yet asked
if len(loaded_cuda_runtimes()) != 1:
    sys.exit(f"NOT RUN: one CUDA runtime shared by torch and the modules is needed, this process has {sorted(loaded_cuda_runtimes())}")
cudart = ctypes.CDLL(loaded_cuda_runtimes().pop())
torch.cuda.synchronize()
assert cudart.cudaSetDevice(1 << 20) == 101 and cudart.cudaPeekAtLastError() == 101  # cudaErrorInvalidDevice
jitkern.ops.moe_align_block_size(ids, 256, 64)  # 32768 ids: the 16-CTA cluster, asked of the device first
print("last error", cudart.cudaGetLastError())
"""


def test_the_first_cluster_alignment_keeps_the_callers_pending_cuda_error():
    """The first alignment of 32768 ids in a process asks whether the device runs its 16-CTA cluster (setting the
    kernel's non-portable cluster attribute): that leaves an error the caller has yet to check as its last error,
    where the runtime's cudaFuncSetAttribute reset it. In a fresh process, so that the question is asked."""
    import subprocess
    import sys

    from conftest import HERE

    child = subprocess.run([sys.executable, "-c", _PENDING_ERROR_CHILD, str(HERE)], capture_output=True, text=True, timeout=300)
    said = (child.stderr.strip().splitlines() or [""])[-1]
    if said.startswith("NOT RUN"):
        pytest.skip(said)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip().splitlines()[-1] == "last error 101", child.stdout + child.stderr[-2000:]


def test_bad_inputs_rejected():
    torch = _torch()
    from jitkern.ops import moe, moe_align_block_size, topk_sigmoid, topk_softmax

    g = torch.randn(4, 64, device="cuda")
    w, ids = _outputs(4, 2)

    def rejects(error, match, fn, *args, **kwargs):
        with pytest.raises(error, match=match) as info:
            fn(*args, **kwargs)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"

    rejects(TypeError, "gating_output must be float16, bfloat16 or float32", topk_softmax, w, ids, g.double())
    rejects(TypeError, "topk_weights: DType mismatch", topk_softmax, w.half(), ids, g)
    rejects(TypeError, "topk_ids: DType mismatch", topk_softmax, w, ids.short(), g)
    rejects(ValueError, r"topk_ids: Size mismatch for shape#1\('topk'\)", topk_softmax, w, ids[:, :1], g)
    rejects(ValueError, r"topk_weights: Size mismatch for shape#0\('num_tokens'\)", topk_softmax, w[:2], ids, g)
    rejects(ValueError, r"topk_weights, topk_ids: topk \(their last dimension\) must be 1-32", topk_softmax, *_outputs(4, 33),
            torch.randn(4, 64, device="cuda"))
    rejects(ValueError, r"gating_output: the number of experts \(its last dimension\) must be 1-512", topk_softmax, w, ids, torch.randn(4, 513, device="cuda"))
    rejects(ValueError, "gating_output: Device mismatch", topk_softmax, w, ids, g.cpu())
    assert torch.isnan(w).all() and (ids == -7).all(), "a rejected call wrote its outputs"
    rejects(ValueError, "num_expert_group must be 1-32 and divide", topk_sigmoid, w, ids, g, True, None, num_expert_group=3)
    rejects(ValueError, "topk_group must be 1-8", topk_sigmoid, w, ids, g, True, None, num_expert_group=8, topk_group=9)
    rejects(ValueError, r"k \(8\) exceeds the experts of topk_group groups \(4\)", topk_sigmoid, *_outputs(4, 8), torch.randn(4, 16, device="cuda"),
            True, None, num_expert_group=8, topk_group=2)
    rejects(ValueError, r"correction_bias: Size mismatch", topk_sigmoid, w, ids, g, True, torch.zeros(32, device="cuda"))
    rejects(TypeError, r"correction_bias: DType mismatch", topk_sigmoid, w, ids, g, True, torch.zeros(64, device="cuda").double())
    topk_ids = torch.randint(0, 8, (16, 2), dtype=torch.int32, device="cuda")
    sorted_ids, expert_ids, total = moe._align_outputs(topk_ids, 8, 16)
    rejects(ValueError, "sorted_token_ids must hold at least", moe_align_block_size, topk_ids, 8, 16, sorted_ids[:10], expert_ids, total)
    rejects(ValueError, "expert_ids must hold at least", moe_align_block_size, topk_ids, 8, 16, sorted_ids, expert_ids[:1], total)
    rejects(ValueError, "num_experts must be 1-512", moe_align_block_size, topk_ids, 600, 16, sorted_ids, expert_ids, total)
    rejects(TypeError, "topk_ids: DType mismatch", moe_align_block_size, topk_ids.float(), 8, 16, sorted_ids, expert_ids, total)
    wide = torch.randint(0, 8, (16, 5), dtype=torch.int32, device="cuda")  # ids only read: a strided topk_ids is taken as its values
    for ids in (wide[:, :2], wide[:, :1], wide[:, 0], wide.t()):
        strided, dense = moe_align_block_size(ids, 8, 16), moe_align_block_size(ids.contiguous(), 8, 16)
        assert all(torch.equal(a, b) for a, b in zip(strided, dense))
    rejects(ValueError, "block_size must be positive", moe_align_block_size, topk_ids, 8, 0)
    rejects(TypeError, "block_size must be an int", moe_align_block_size, topk_ids, 8, 16.0)
    rejects(ValueError, "num_experts must be 1-512, got -1", moe_align_block_size, topk_ids, -1, 16)  # named before any allocation fails
    workspace = torch.full((sorted_ids.numel() + 1,), -7, dtype=torch.int32, device="cuda")  # num_tokens_post_pad its last entry
    rejects(ValueError, "sorted_token_ids and num_tokens_post_pad must not overlap", moe_align_block_size, topk_ids, 8, 16, workspace,
            expert_ids, workspace[-1:])
    rejects(ValueError, "sorted_token_ids and expert_ids must not overlap", moe_align_block_size, topk_ids, 8, 16, sorted_ids,
            sorted_ids[: expert_ids.numel()], total)
    assert (workspace == -7).all(), "a rejected call wrote"


def test_torch_custom_ops():
    torch = _torch()
    from jitkern.ops import moe, moe_align_block_size, topk_sigmoid, topk_softmax

    g = torch.randn(9, 256, device="cuda")
    bias = torch.randn(256, device="cuda")
    torch.library.opcheck(torch.ops.jitkern.topk_softmax, (*_outputs(9, 8), g, True))
    torch.library.opcheck(torch.ops.jitkern.topk_sigmoid, (*_outputs(9, 8), g, bias, True, 8, 4, 2.5))
    ids = torch.randint(0, 256, (9, 8), dtype=torch.int32, device="cuda")
    torch.library.opcheck(torch.ops.jitkern.moe_align_block_size, (ids, 256, 64))

    def route(logits):
        w, i = topk_sigmoid(*_outputs(logits.shape[0], 8), logits, True, bias, num_expert_group=8, topk_group=4)
        ws, is_ = topk_softmax(*_outputs(logits.shape[0], 2), logits, False)
        return w, i, ws, is_, *moe_align_block_size(i, 256, 64)

    compiled = torch.compile(route, fullgraph=True, dynamic=True)
    for tokens in (5, 33):
        logits = torch.randn(tokens, 256, device="cuda")
        for a, b in zip(compiled(logits), route(logits)):
            assert torch.equal(a, b)

    def align_into(ids, sorted_ids):  # one output given: written, the others allocated
        return moe_align_block_size(ids, 256, 64, sorted_token_ids=sorted_ids)

    eager_out = moe._align_outputs(ids, 256, 64)[0].fill_(-7)
    compiled_out = eager_out.clone()
    got = torch.compile(align_into, fullgraph=True)(ids, compiled_out)
    expected = align_into(ids, eager_out)
    assert torch.equal(compiled_out, eager_out) and torch.equal(got[0], eager_out) and all(torch.equal(a, b) for a, b in zip(got[1:], expected[1:]))
    logits = torch.randn(64, 256, device="cuda")
    w, i = _outputs(64, 8)
    topk_sigmoid(w, i, logits, True, bias, num_expert_group=8, topk_group=4)
    outs = moe_align_block_size(i, 256, 64)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        topk_sigmoid(w, i, logits, True, bias, num_expert_group=8, topk_group=4)
        moe_align_block_size(i, 256, 64, *outs)
    logits.copy_(torch.randn_like(logits))
    graph.replay()
    torch.cuda.synchronize()
    ref_w, ref_ids = _grouped_reference(logits, bias, 8, 8, 4, True, 1.0)
    assert torch.equal(i.long(), ref_ids)
    ref_sorted, _ = _align_reference(ref_ids, 256, 64)
    assert outs[0][: outs[2].item()].tolist() == ref_sorted
