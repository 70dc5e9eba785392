"""Each --schedules kernel of bench_qknorm_rope against the product, bit for bit, on shapes the bench does not time:
heads strided (not one block a token), GPT-J pairing, locations outside the cache, positions outside the table."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_qknorm_rope as b  # noqa: E402

HQ, HK, D = b.HQ, b.HK, b.D


def case(module, i, t, neox, store, gap, seed=3):
    g = torch.Generator(device="cuda").manual_seed(seed)
    qs = torch.randn(t, HQ, D + gap, dtype=torch.bfloat16, device="cuda", generator=g)
    ks = torch.randn(t, HK, D + gap, dtype=torch.bfloat16, device="cuda", generator=g)
    vs = torch.randn(t, HK, D, dtype=torch.bfloat16, device="cuda", generator=g)
    q, k = qs[..., :D], ks[..., :D]
    pos = torch.randint(0, b.MAX_POS, (t,), device="cuda", generator=g)
    pos[::97] = b.MAX_POS + 5
    slots = 16 * (t // 16 + 4)
    loc = torch.randperm(slots, device="cuda", generator=g)[:t]
    loc[::89] = slots + 3
    cs = b.cos_sin_cache()
    qw = (torch.rand(D, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    kw = (torch.rand(D, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    kc = torch.zeros(slots // 16, 16, HK, D, dtype=torch.bfloat16, device="cuda")
    vc = torch.zeros_like(kc)
    if store:
        module[f"apply_store_{i}"](pos, q, k, qw, kw, cs, 1e-6, 0.0, neox, 0, 0, 0, False, vs, kc, vc, loc, 1.0, 1.0)
    else:
        module[f"apply_{i}"](pos, q, k, qw, kw, cs, 1e-6, 0.0, neox, 0, 0, 0, False)
    torch.cuda.synchronize()
    return qs, ks, kc, vc


def main(quick):
    """quick: one size, NeoX, the bulk-copy schedules only (for compute-sanitizer)."""
    module = b.schedule_module()
    for t in (4096 + 37,) if quick else (4096 + 37, 20000):
        for neox in (True,) if quick else (True, False):
            for store in (True, False):
                for gap in (0, 8):
                    want = case(module, 0, t, neox, store, gap)
                    for i, (name, _) in enumerate(b.SCHEDULES[1:], 1):
                        if "floor" in name or (quick and "bulk" not in name):
                            continue
                        got = case(module, i, t, neox, store, gap)
                        ok = all(torch.equal(x, y) for x, y in zip(want, got))
                        print(f"T={t} neox={neox} store={store} head gap={gap}: {name}: {'equal' if ok else 'DIFFERS'}", flush=True)


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
