"""jitkern.integrations.transformers on small models of transformers (random weights, bf16): the patched
model gives the unpatched logits, eager, compiled and captured in a CUDA graph, and runs the fused
residual-add norms and the fused MLP; it never writes a tensor its caller holds; the patch is idempotent
and reversible; a model without a supported norm is left alone with a warning. The first tests need
neither torch nor a GPU."""

import warnings

import pytest

from jitkern.integrations import transformers as integration

# --- without torch: how modules are recognised and how a layer's positional arguments are named ------


class LlamaRMSNorm:
    def __init__(self):
        self.weight, self.variance_epsilon = None, 1e-6


class LlamaDecoderLayer:
    input_layernorm = self_attn = post_attention_layernorm = mlp = None


class Qwen3MLP:
    gate_proj = up_proj = down_proj = act_fn = None


class GemmaRMSNorm(LlamaRMSNorm):
    pass


def test_modules_are_recognised_by_class_name_and_attributes():
    assert integration.module_kind(LlamaRMSNorm()) == "norm"
    assert integration.module_kind(LlamaDecoderLayer()) == "layer"
    assert integration.module_kind(Qwen3MLP()) == "mlp"
    assert integration.module_kind(GemmaRMSNorm()) is None, "another family's norm (out = (1 + weight) * x) is not patched"
    norm = LlamaRMSNorm()
    del norm.variance_epsilon
    assert integration.module_kind(norm) is None, "a norm without variance_epsilon is not the one patched"


def test_a_layers_positional_arguments_are_named_from_its_forward():
    def forward(hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False, position_embeddings=None,
                **kwargs) -> "torch.Tensor":
        pass

    assert integration.positional_names(forward) == ("attention_mask", "position_ids", "cache", "use_cache", "position_embeddings")

    def returns_a_tuple(hidden_states, attention_mask=None, **kwargs) -> "tuple[torch.Tensor]":
        pass

    assert integration.positional_names(returns_a_tuple) is None, "a transformers 4.x layer (returning a tuple) is not patched"

    def undeclared(hidden_states, attention_mask=None):
        pass

    assert integration.positional_names(undeclared) is None


def test_each_fallback_reason_is_counted_and_logged_once(caplog):
    integration.stats(reset=True)
    norm = LlamaRMSNorm()
    with caplog.at_level("INFO", logger="jitkern"):
        for _ in range(3):
            integration._fell_back("not_cuda", norm)
        integration._fell_back("grad", norm)
        integration._ran_kernels()
    assert integration.stats(reset=True) == {"not_cuda": 3, "grad": 1, "kernel": 1}
    assert integration.stats() == {}, "reset starts counting anew"
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("jitkern")]
    assert lines == ["transformers integration: LlamaRMSNorm runs its original forward: its input is not on a CUDA device "
                     "(stats() counts these calls)",
                     "transformers integration: LlamaRMSNorm runs its original forward: grad is enabled and its input or "
                     "parameters require grad (run under torch.no_grad() or torch.inference_mode()) (stats() counts these calls)"], lines
    integration.stats(reset=True)


# --- on a GPU, with transformers ---------------------------------------------------------------------

FAMILIES = ("Llama", "Qwen2", "Mistral")


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


def small_model(torch, family="Llama"):
    transformers = pytest.importorskip("transformers", reason="NOT RUN: transformers is not installed")
    config = getattr(transformers, f"{family}Config")(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2, vocab_size=1000, max_position_embeddings=128)
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}ForCausalLM")(config).to(device="cuda", dtype=torch.bfloat16).eval()
    for module in model.modules():  # norm weights other than ones, so that a misapplied weight shows
        if integration.module_kind(module) == "norm":
            module.weight.data.normal_(1.0, 0.3)
    return model


def logits(model, ids, torch, **kwargs):
    with torch.no_grad():
        return model(ids, **kwargs).logits.float()


def kinds(model):
    """How many modules of each kind are patched."""
    count = {}
    for module in model.modules():
        if "forward" in module.__dict__:
            kind = integration.module_kind(module)
            count[kind] = count.get(kind, 0) + 1
    return count


@pytest.fixture
def fused_calls(monkeypatch):
    """Counts the calls of jitkern.ops.fused_add_rmsnorm (which still runs)."""
    from jitkern.ops import norm

    calls = []
    real = norm.fused_add_rmsnorm

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(norm, "fused_add_rmsnorm", counting)
    return calls


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES)
def test_patched_model_gives_the_unpatched_logits_and_runs_the_kernels(torch, family, fused_calls):
    from jitkern.ops import rmsnorm, silu_and_mul

    model = small_model(torch, family)
    ids = torch.randint(0, 1000, (2, 17), device="cuda")
    expected = logits(model, ids, torch)
    assert integration.apply(model) == 5 + 2 + 2
    assert kinds(model) == {"norm": 5, "layer": 2, "mlp": 2}  # two norms per layer and the final one; layers; MLPs
    patched = logits(model, ids, torch)
    torch.testing.assert_close(patched, expected, rtol=0.05, atol=0.05)
    # layer 0 adds into attention's output (its input is the embeddings), then fuses its last add with layer 1's
    # input norm; layer 1 fuses its post-attention add and its last add with the final norm
    assert len(fused_calls) == 3 and all(shape == (2, 17, 256) for shape in fused_calls)

    norm = model.model.norm
    x = torch.randn(2, 17, 256, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        assert torch.equal(norm(x), rmsnorm(x, norm.weight, eps=norm.variance_epsilon)), "the patched norm is jitkern's kernel"
        mlp = model.model.layers[0].mlp
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        assert torch.equal(mlp(x), mlp.down_proj(silu_and_mul(torch.nn.functional.linear(x, gate_up)))), "one GEMM, then silu_and_mul"

    assert integration.apply(model) == 9 and kinds(model) == {"norm": 5, "layer": 2, "mlp": 2}, "applying twice changes nothing"
    assert torch.equal(logits(model, ids, torch), patched)
    assert integration.revert(model) == 9
    leftovers = [(type(m).__name__, a) for m in model.modules() for a in m.__dict__ if a.startswith("_jitkern") or a == "forward"]
    assert leftovers == []
    torch.testing.assert_close(logits(model, ids, torch), expected, rtol=0, atol=0)
    assert integration.revert(model) == 0


@pytest.mark.gpu
def test_the_mlp_weights_become_one_buffer_without_a_copy(torch):
    model = small_model(torch)
    integration.apply(model)
    mlp = model.model.layers[0].mlp
    gate, up = mlp.gate_proj.weight, mlp.up_proj.weight
    original = (gate.detach().clone(), up.detach().clone())
    x = torch.randn(5, 256, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        before = mlp(x)
        allocated = torch.cuda.memory_allocated()
        mlp(x)
        assert torch.cuda.memory_allocated() == allocated, "the fused weight is the parameters' own storage"
    assert mlp.gate_proj.weight is gate and mlp.up_proj.weight is up, "the Parameter objects stay"
    assert gate.untyped_storage().data_ptr() == up.untyped_storage().data_ptr()
    assert up.storage_offset() == gate.storage_offset() + gate.numel()
    assert torch.equal(gate, original[0]) and torch.equal(up, original[1])
    with torch.no_grad():
        up.mul_(2)  # in place: the next call sees it
        after = mlp(x)
        expected = type(mlp).forward(mlp, x)
        assert not torch.equal(after, before)
        torch.testing.assert_close(after, expected, rtol=0.02, atol=0.02)
        mlp.gate_proj.weight = torch.nn.Parameter(original[0] * 3)  # replaced: moved into one buffer again
        torch.testing.assert_close(mlp(x), type(mlp).forward(mlp, x), rtol=0.02, atol=0.02)
    gate = mlp.gate_proj.weight
    assert gate.untyped_storage().data_ptr() == up.untyped_storage().data_ptr()
    integration.revert(model)
    assert gate.untyped_storage().data_ptr() != up.untyped_storage().data_ptr(), "revert gives each weight its own storage"
    assert torch.equal(gate, original[0] * 3) and torch.equal(up, original[1] * 2)


@pytest.mark.gpu
def test_a_tensor_the_caller_holds_is_never_written(torch, fused_calls):
    model = small_model(torch)
    ids = torch.randint(0, 1000, (1, 9), device="cuda")
    with torch.no_grad():
        embeds = model.model.embed_tokens(ids)
        held = embeds.clone()
        expected = model(inputs_embeds=embeds).logits.float()
        integration.apply(model)
        got = model(inputs_embeds=embeds).logits.float()
        assert len(fused_calls) == 3
        assert torch.equal(embeds, held), "the first layer adds into attention's output, not into its input"
        torch.testing.assert_close(got, expected, rtol=0.05, atol=0.05)

        # output_hidden_states hooks the layers (for good): they run their original forward, as a hook may keep a
        # tensor that the fused path writes
        fused_calls.clear()
        hidden = model(inputs_embeds=embeds, output_hidden_states=True).hidden_states
        assert fused_calls == []
        integration.revert(model)
        unpatched = model(inputs_embeds=embeds, output_hidden_states=True).hidden_states
    assert torch.equal(hidden[0], held) and len(hidden) == len(unpatched) == 3
    for mine, theirs in zip(hidden, unpatched):
        torch.testing.assert_close(mine, theirs, rtol=0.05, atol=0.05)


@pytest.mark.gpu
def test_with_grad_the_original_forward_runs(torch, fused_calls):
    model = small_model(torch)
    ids = torch.randint(0, 1000, (1, 9), device="cuda")
    expected = model(ids).logits.float()
    expected.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    integration.apply(model)
    out = model(ids).logits.float()
    assert out.requires_grad and fused_calls == []
    assert torch.equal(out, expected), "every module ran its original forward"
    out.sum().backward()
    for p, want in zip(model.parameters(), grads):  # the backward kernels' atomics may sum in another order
        torch.testing.assert_close(p.grad, want, rtol=0.05, atol=0.05 * float(want.abs().max()))


@pytest.mark.gpu
def test_exact_rounding_keeps_transformers_rounding_order(torch):
    model = small_model(torch)
    norm = model.model.norm
    x = torch.randn(64, 256, dtype=torch.bfloat16, device="cuda") * 3
    ids = torch.randint(0, 1000, (2, 17), device="cuda")
    with torch.no_grad():
        original = norm(x)
        expected = logits(model, ids, torch)
        assert integration.apply(model, exact_rounding=True) == 5 + 2, "the MLPs keep their own rounding"
        assert kinds(model) == {"norm": 5, "layer": 2}
        exact = norm(x)
        torch.testing.assert_close(logits(model, ids, torch), expected, rtol=0.05, atol=0.05)
        # a layer's last add and the next norm, fused: the normalised sum is rounded before the weight multiplies it
        layer, following = model.model.layers
        out = layer(torch.randn(2, 17, 256, dtype=torch.bfloat16, device="cuda"),
                    position_embeddings=model.model.rotary_emb(x, torch.arange(17, device="cuda")[None]))
        fused = following.input_layernorm.__dict__["_jitkern_prenormed"][1]
        reference = type(following.input_layernorm).forward(following.input_layernorm, out)
        integration.apply(model)
        once = norm(x)
    assert (exact == original).float().mean() > 0.99, "rounded to bf16 before the weight, as transformers does"
    torch.testing.assert_close(exact, original, rtol=2**-7, atol=1e-6)
    torch.testing.assert_close(once, original, rtol=2**-6, atol=1e-3)
    assert (fused == reference).float().mean() > 0.99
    torch.testing.assert_close(fused, reference, rtol=2**-7, atol=1e-6)


@pytest.mark.gpu
def test_compiled_and_captured(torch, fused_calls):
    model = small_model(torch)
    ids = torch.randint(0, 1000, (1, 8), device="cuda")
    compiled = torch.compile(model, fullgraph=False)
    expected = logits(compiled, ids, torch)
    integration.apply(model)
    fused_calls.clear()
    torch.testing.assert_close(logits(compiled, ids, torch), expected, rtol=1e-3, atol=1e-3)  # recompiled on the patch
    assert fused_calls == [], "compiled, the patched modules run their original forward"

    static = ids.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # loads the modules and makes the fused MLP weights before the capture
        logits(model, static, torch, use_cache=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    fused_calls.clear()
    with torch.no_grad(), torch.cuda.graph(graph):
        captured = model(static, use_cache=False).logits
    assert len(fused_calls) == 3, "the capture holds the fused kernels"
    static.copy_(torch.randint(0, 1000, (1, 8), device="cuda"))
    graph.replay()
    integration.revert(model)
    torch.testing.assert_close(captured.float(), logits(model, static, torch, use_cache=False), rtol=0.05, atol=0.05)


@pytest.mark.torch
def test_a_model_without_a_supported_norm_is_left_alone(torch):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert integration.apply(model) == 0
    assert any("left unpatched" in str(w.message) for w in caught)
    with pytest.raises(TypeError, match="must be a torch.nn.Module"):
        integration.apply("not a model")


@pytest.mark.gpu
def test_the_fallbacks_are_counted_by_reason(torch, caplog):
    """A CPU model, grad with parameters that require it (the default after loading) and a transformers 4.x
    layer each run the original code, counted by reason and logged once per reason; a CUDA model under
    no_grad runs the kernels."""
    model = small_model(torch)
    integration.apply(model)
    ids = torch.randint(0, 1000, (1, 8), device="cuda")
    integration.stats(reset=True)
    logits(model, ids, torch)
    counted = integration.stats(reset=True)
    assert counted.get("kernel", 0) > 0 and set(counted) == {"kernel"}, counted
    with caplog.at_level("INFO", logger="jitkern"):
        model(ids)  # grad enabled, parameters require grad
        counted = integration.stats(reset=True)
        assert counted.get("grad", 0) > 0 and "kernel" not in counted, counted
        model.to("cpu")
        logits(model, ids.cpu(), torch)
        counted = integration.stats(reset=True)
        assert counted.get("not_cuda", 0) > 0 and "kernel" not in counted, counted
        lines = [r.getMessage() for r in caplog.records if "runs its original forward" in r.getMessage()]
        assert len(lines) == 2 and "require grad" in lines[0] and "not on a CUDA device" in lines[1], lines
    integration.revert(model)

    class LlamaDecoderLayer(torch.nn.Module):  # transformers 4.x: a layer returns a tuple
        def __init__(self):
            super().__init__()
            self.input_layernorm = self.self_attn = self.post_attention_layernorm = self.mlp = torch.nn.Identity()

        def forward(self, hidden_states, attention_mask=None) -> "tuple[torch.Tensor]":
            return (hidden_states,)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no RMSNorm in this model
        integration.apply(torch.nn.Sequential(LlamaDecoderLayer()))
    assert integration.stats(reset=True) == {"layer_returns_tuple": 1}
