"""Forward latency of a transformers Llama with Llama-3-8B's layer shape (4 decoder layers, random bf16
weights), unpatched and patched by jitkern.integrations.transformers.apply (norms, residual adds fused
with the norms after them, fused gate/up GEMM and silu_and_mul), at 1, 16 and 2048 tokens (batch 1):
eager, torch.compile, and torch.compile(mode="reduce-overhead") (CUDA graphs). Wall time per forward
(host included), median of the timed calls; the patched logits are checked against the unpatched ones
first. Compiled with static shapes; both forms are compiled and warmed at every size before timing
(dynamo keeps one entry per form, told apart by its guards), then they take turns of CALLS forwards,
so a slow phase of the shared host falls on both. Prints a markdown table. Needs transformers.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import environment, is_in_ci  # noqa: E402

TOKENS = [1, 16] if is_in_ci() else [1, 16, 2048]
CALLS = 10  # timed forwards per turn
ROUNDS = 2 if is_in_ci() else 15  # turns per side at each size, the two forms alternating
WARMUP = 20  # forwards of each form at each size after compiling, before any timing
MODES = {"eager": None, "torch.compile": "default", "torch.compile, reduce-overhead": "reduce-overhead"}


def build_model():
    import torch
    import transformers

    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=4, num_attention_heads=32,
                                      num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()


def wall_ms(fn, ids, calls: int) -> list[float]:
    """`calls` timed forwards (ms), after three untimed ones."""
    import torch

    with torch.no_grad():
        for _ in range(3):
            fn(ids)
        torch.cuda.synchronize()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn(ids)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def check_logits(model) -> None:
    """Stops the benchmark if the patched model's logits are not the unpatched ones (bf16 tolerance)."""
    import torch

    from jitkern.integrations.transformers import apply, revert

    ids = torch.randint(0, 128256, (1, 64), device="cuda")
    with torch.no_grad():
        expected = model(ids).logits.float()
        patched = apply(model)
        got = model(ids).logits.float()
        revert(model)
    print(f"{patched} modules patched; max |patched - unpatched| logit: {(got - expected).abs().max().item():.4f}", file=sys.stderr)
    torch.testing.assert_close(got, expected, rtol=0.05, atol=0.1)


def main() -> None:
    import torch

    from jitkern.integrations.transformers import apply, revert

    model = build_model()
    check_logits(model)
    ids = {t: torch.randint(0, 128256, (1, t), device="cuda") for t in TOKENS}
    switch = {False: revert, True: apply}
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(TOKENS))
    rows = []
    for name, mode in MODES.items():
        torch._dynamo.reset()
        run = model if mode is None else torch.compile(model, mode=mode, dynamic=False)
        for side in (False, True):  # compile (and record) both forms at every size before timing
            switch[side](model)
            for t in TOKENS:
                wall_ms(run, ids[t], WARMUP)
        for t in TOKENS:
            samples = {False: [], True: []}
            for _ in range(ROUNDS):
                for side in (False, True):
                    switch[side](model)
                    samples[side] += wall_ms(run, ids[t], CALLS)
            plain, patched = statistics.median(samples[False]), statistics.median(samples[True])
            rows.append((name, t, plain, patched))
            print(f"{name} T={t}: {plain:.3f} / {patched:.3f} ms", file=sys.stderr, flush=True)
    revert(model)
    print(f"\n### Llama (4 layers of Llama-3-8B's shape, bf16), forward wall time ({environment()}, median of "
          f"{ROUNDS} x {CALLS} calls per side)\n")
    print("| mode | tokens | unpatched | patched by jitkern | unpatched / patched |")
    print("|---|---|---|---|---|")
    for name, tokens, plain, patched in rows:
        print(f"| {name} | {tokens} | {plain:.3f} ms | {patched:.3f} ms | {plain / patched:.2f}x |")


if __name__ == "__main__":
    main()
