"""jitkern.integrations.transformers on a small Llama of transformers (random weights, bf16): the patched
model gives the unpatched logits, eager, compiled and captured in a CUDA graph; the patch is idempotent
and reversible; a model without a supported norm is left alone with a warning."""

import warnings

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


def small_llama(torch):
    transformers = pytest.importorskip("transformers", reason="NOT RUN: transformers is not installed")
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=1000, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    for module in model.modules():  # norm weights other than ones, so that a misapplied weight shows
        if type(module).__name__ == "LlamaRMSNorm":
            module.weight.data.normal_(1.0, 0.3)
    return model


def logits(model, ids, torch):
    with torch.no_grad():
        return model(ids).logits.float()


def test_patched_llama_gives_the_unpatched_logits_and_runs_the_kernel(torch):
    from jitkern.integrations.transformers import apply, revert
    from jitkern.ops import rmsnorm

    model = small_llama(torch)
    ids = torch.randint(0, 1000, (2, 17), device="cuda")
    expected = logits(model, ids, torch)
    assert apply(model) == 2 * 2 + 1  # two per decoder layer and the final norm
    torch.testing.assert_close(logits(model, ids, torch), expected, rtol=0.05, atol=0.05)
    norm = model.model.norm
    x = torch.randn(2, 17, 256, dtype=torch.bfloat16, device="cuda")
    assert torch.equal(norm(x), rmsnorm(x, norm.weight, eps=norm.variance_epsilon)), "the patched norm is jitkern's kernel"

    assert apply(model) == 5 and torch.equal(norm(x), rmsnorm(x, norm.weight, eps=norm.variance_epsilon)), "applying twice changes nothing"
    assert revert(model) == 5 and "forward" not in norm.__dict__
    torch.testing.assert_close(logits(model, ids, torch), expected, rtol=0, atol=0)
    assert revert(model) == 0


def test_exact_rounding_keeps_transformers_rounding_order(torch):
    from jitkern.integrations.transformers import apply

    model = small_llama(torch)
    norm = model.model.norm
    x = torch.randn(64, 256, dtype=torch.bfloat16, device="cuda") * 3
    with torch.no_grad():
        original = norm(x)
        apply(model, exact_rounding=True)
        exact = norm(x)
        apply(model)
        once = norm(x)
    assert (exact == original).float().mean() > 0.99, "rounded to bf16 before the weight, as transformers does"
    torch.testing.assert_close(exact, original, rtol=2**-7, atol=1e-6)
    torch.testing.assert_close(once, original, rtol=2**-6, atol=1e-3)


def test_compiled_and_captured(torch):
    from jitkern.integrations.transformers import apply

    model = small_llama(torch)
    ids = torch.randint(0, 1000, (1, 8), device="cuda")
    compiled = torch.compile(model, fullgraph=False)
    expected = logits(compiled, ids, torch)
    apply(model)
    torch.testing.assert_close(logits(compiled, ids, torch), expected, rtol=1e-3, atol=1e-3)  # recompiled on the patch

    norm = model.model.norm
    x = torch.randn(4, 256, dtype=torch.bfloat16, device="cuda")
    norm(x)  # loads the module before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = norm(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    from jitkern.ops import rmsnorm

    assert torch.equal(y, rmsnorm(x, norm.weight, eps=norm.variance_epsilon))


def test_a_model_without_a_supported_norm_is_left_alone(torch):
    from jitkern.integrations.transformers import apply

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert apply(model) == 0
    assert any("left unpatched" in str(w.message) for w in caught)
    with pytest.raises(TypeError, match="must be a torch.nn.Module"):
        apply("not a model")
