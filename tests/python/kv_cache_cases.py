"""Cache rows for the tests of the families that write KV caches (test_rope's fused write, test_kv_rows)."""

import importlib
import random

import pytest


def cache_bytes(x, rows):
    """x as `rows` rows of bytes (comparable whatever the dtype, NaN included)."""
    import torch

    return x.contiguous().view(-1).view(torch.uint8).view(rows, -1)


def locations(tokens, slots, index_dtype, seed=0, out_of_range=True):
    """Distinct slots for the tokens, with some out of range (-1, slots, a large value) when asked."""
    import torch

    rng = random.Random(seed)
    loc = rng.sample(range(slots), tokens)
    if out_of_range and tokens >= 4:
        loc[1], loc[2], loc[-1] = -1, slots, 2**31 - 1
    return torch.tensor(loc, dtype=index_dtype, device="cuda")


def expected_cache(cache_rows, values, loc):
    """cache rows with values[i] at loc[i] for in-range locations."""
    out = cache_rows.clone()
    ok = (loc >= 0) & (loc < cache_rows.shape[0])
    out[loc[ok].long()] = values[ok]
    return out


def reference_kernel(module: str, name: str):
    """The reference framework's (SGLang's) JIT kernel sglang.jit_kernel.<module>.<name>, or a skip where its wheel does not import."""
    try:
        return getattr(importlib.import_module(f"sglang.jit_kernel.{module}"), name)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"NOT RUN: the reference's kernels do not import here: {type(e).__name__}: {e}")
