"""First call of each op in a fresh process and an empty cache (bf16, the current GPU): compile, load and
run, jitkern beside the reference framework where it has the op. Also `jitkern.ops.warmup` of every op
for bf16 and `jitkern prebuild` of every op for three dtypes, each into an empty cache.

The reference runs from its wheel (REFERENCE_WHEEL=/path/to/sglang-*.whl, or installed): only its
jit_kernel modules are imported (its package __init__ is bypassed). Without it, its column says so.
Prints markdown tables. Arguments, if any, name the ops to time (and skip the build table); `builds` alone
times only the builds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import empty_cache_env, environment, is_in_ci, reference_path  # noqa: E402

TRIALS = 1 if is_in_ci() else 2
JOBS = os.cpu_count() or 1

# Inputs the ops below use: x [16, 4096] bf16, its weight, fp8 outputs, a KV layer, q/k heads, top-k outputs, a cos/sin cache,
# a KV cache.
SETUP = """
import torch, time
torch.cuda.init()
x = torch.randn(16, 4096, dtype=torch.bfloat16, device="cuda"); w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
q8 = torch.empty(16, 4096, dtype=torch.float8_e4m3fn, device="cuda"); s1 = torch.ones(1, dtype=torch.float32, device="cuda")
qkv = torch.randn(16, 48, 128, dtype=torch.bfloat16, device="cuda"); hw = torch.randn(128, dtype=torch.bfloat16, device="cuda")
kv_src = torch.randn(64, 1024, dtype=torch.bfloat16, device="cuda"); kv_dst = torch.empty_like(kv_src)
idx = torch.arange(64, device="cuda")
tw = torch.empty(16, 8, device="cuda"); tid = torch.randint(0, 64, (16, 8), dtype=torch.int32, device="cuda")
cos_sin = torch.randn(4096, 128, device="cuda")
k_cache = torch.zeros(64, 8, 128, dtype=torch.bfloat16, device="cuda"); v_cache = torch.zeros_like(k_cache)
mla_cache = torch.zeros(64, 576, dtype=torch.bfloat16, device="cuda")
torch.cuda.synchronize()
"""

# op -> (jitkern call, reference call or None); both run after SETUP with `ops` (jitkern.ops) or `ref` (the
# reference's module of the op, REF_MODULES) imported.
OPS = {
    "rmsnorm": ("ops.rmsnorm(x, w)", "ref.rmsnorm(x, w, torch.empty_like(x))"),
    "fused_add_rmsnorm": ("ops.fused_add_rmsnorm(x, x.clone(), w)", "ref.fused_add_rmsnorm(x, x.clone(), w)"),
    "fused_inplace_qknorm": ("ops.fused_inplace_qknorm(qkv[:, :32], qkv[:, 32:40], hw, hw)",
                             "ref.fused_inplace_qknorm(qkv[:, :32], qkv[:, 32:40], hw, hw)"),
    # the reference's op registers itself with torch through its serving stack at its first call: its module is called directly
    "per_tensor_quant_fp8": ("ops.per_tensor_quant_fp8(x, q8, s1, is_static=True)",
                             "ref._jit_per_tensor_quant_fp8_module(True, x.dtype).per_tensor_quant_fp8(x.view(-1), q8.view(-1), s1)"),
    "per_token_quant_fp8": ("ops.per_token_quant_fp8(x)", None),
    "per_token_group_quant_8bit": ("ops.per_token_group_quant_8bit(x, 128)", None),
    "rmsnorm_quant_fp8": ("ops.rmsnorm_quant_fp8(x, w, scale=s1)", None),
    "fused_add_rmsnorm_quant_fp8": ("ops.fused_add_rmsnorm_quant_fp8(x, x.clone(), w, scale=s1)", None),
    "rmsnorm_group_quant_fp8": ("ops.rmsnorm_group_quant_fp8(x, w)", None),
    "fused_add_rmsnorm_group_quant_fp8": ("ops.fused_add_rmsnorm_group_quant_fp8(x, x.clone(), w)", None),
    "transfer_hicache_one_layer": ("ops.transfer_hicache_one_layer(kv_dst, kv_dst, idx, kv_src, kv_src, idx)",
                                   "ref.transfer_hicache_one_layer(kv_dst, kv_dst, idx, kv_src, kv_src, idx)"),
    "silu_and_mul": ("ops.silu_and_mul(x)", None),
    "silu_and_mul_per_token_group_quant_fp8": ("ops.silu_and_mul_per_token_group_quant_fp8(x)", None),
    "topk_softmax": ("ops.topk_softmax(tw, tid, x[:, :64], True)", None),
    "topk_softmax, grouped": ("ops.topk_softmax(tw, tid, x[:, :64], True, num_expert_group=8, topk_group=4)", None),
    "moe_align_block_size": ("ops.moe_align_block_size(tid, 64, 64)", None),
    "topk_sigmoid": ("ops.topk_sigmoid(tw, tid, x[:, :64].float(), True, torch.zeros(64, device='cuda'), num_expert_group=8, topk_group=4)",
                     None),
    "moe_sum": ("ops.moe_sum(x.view(16, 8, 512))", None),
    "moe_weighted_sum": ("ops.moe_weighted_sum(x.view(16, 8, 512), tw)", None),
    "silu_and_mul_sorted": ("ops.silu_and_mul_sorted(x, idx[:16].int(), idx[16:17].int(), 16)", None),
    "silu_and_mul_sorted_per_token_quant_fp8": ("ops.silu_and_mul_sorted_per_token_quant_fp8(x, idx[:16].int(), idx[16:17].int(), 16)", None),
    "silu_and_mul_masked_per_token_group_quant_fp8": (
        "ops.silu_and_mul_masked_per_token_group_quant_fp8(x.view(4, 4, 4096), idx[:4].int())",
        "ref.silu_and_mul_masked_post_quant(x.view(4, 4, 4096), q8.view(-1)[:16 * 2048].view(4, 4, 2048), torch.empty(4, 4, 16, device='cuda'), "
        "128, idx[:4].int())"),
    "apply_rope_with_cos_sin_cache_inplace": ("ops.apply_rope_with_cos_sin_cache_inplace(idx[:16], qkv[:, :32], qkv[:, 32:40], 128, cos_sin)",
                                              None),
    "apply_rope_with_cos_sin_cache_inplace, KV write": (
        "ops.apply_rope_with_cos_sin_cache_inplace(idx[:16], qkv[:, :32], qkv[:, 32:40], 128, cos_sin, "
        "fused_set_kv_buffer_arg=ops.FusedSetKVBufferArg(qkv[:, 40:], k_cache, v_cache, None, None, idx[:16]))", None),
    "fused_qknorm_rope": ("ops.fused_qknorm_rope(idx[:16], qkv[:, :32], qkv[:, 32:40], hw, hw, cos_sin)",
                          "ref.fused_qk_norm_rope(qkv.view(16, -1), 32, 8, 8, 128, 1e-6, hw, hw, 1e6, True, idx[:16].int(), 1.0, 0.0, 0.0, 1.0)"),
    "fused_qknorm_rope, KV write": (
        "ops.fused_qknorm_rope(idx[:16], qkv[:, :32], qkv[:, 32:40], hw, hw, cos_sin, 1e-6, True, "
        "ops.FusedSetKVBufferArg(qkv[:, 40:], k_cache, v_cache, None, None, idx[:16]))", None),
    "set_mla_kv_buffer": ("ops.set_mla_kv_buffer(mla_cache, idx[:16], x[:, :512], x[:, 512:576])",
                          "ref.set_mla_kv_buffer(mla_cache, idx[:16], x[:, :512], x[:, 512:576])"),
    "gemma_rmsnorm": ("ops.gemma_rmsnorm(x, w)", None),
    "rmsnorm_hf": ("ops.rmsnorm_hf(x, w)", "ref.rmsnorm_hf(x, w)"),
}
# Reference ops that exist but cannot run from its wheel alone, and why.
_NO_FLASHINFER = "not timed here: its rope module builds against an installed flashinfer's headers (bench_rope times its kernel where they import)"
REF_UNAVAILABLE = {"apply_rope_with_cos_sin_cache_inplace": _NO_FLASHINFER, "apply_rope_with_cos_sin_cache_inplace, KV write": _NO_FLASHINFER}

REF_MODULES = {"per_tensor_quant_fp8": "per_tensor_quant_fp8", "transfer_hicache_one_layer": "hicache",
               # ops of the reference's newer layout only: "ops:" and their sglang.kernels.ops module
               "fused_qknorm_rope": "ops:attention.fused_qknorm_rope", "set_mla_kv_buffer": "ops:kvcache.set_mla_kv_buffer",
               "rmsnorm_hf": "ops:layernorm.rmsnorm_hf", "silu_and_mul_masked_per_token_group_quant_fp8": "ops:moe.dsv4"}  # else norm

JITKERN = "import jitkern.ops as ops\n" + SETUP + """
t0 = time.perf_counter()
{call}
torch.cuda.synchronize()
print("SECONDS", time.perf_counter() - t0)
"""

# The reference's op in a fresh process, its module imported through benchmarks/utils.py.
REFERENCE = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from utils import reference_module, reference_ops
ref = reference_ops("{{module}}"[4:]) if "{{module}}".startswith("ops:") else reference_module("{{module}}")
""" + SETUP + """
t0 = time.perf_counter()
{call}
torch.cuda.synchronize()
print("SECONDS", time.perf_counter() - t0)
"""


def run(code: str, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        frames = [line.strip() for line in out.stderr.splitlines() if line.strip().startswith("File ")]
        raise RuntimeError((frames[-1] + ": " if frames else "") + out.stderr.strip().splitlines()[-1])
    return float(out.stdout.split("SECONDS")[-1])


def fresh_env(cache: str, extra_path: str | None = None) -> dict:
    env = empty_cache_env(cache, JITKERN_PREBUILT_DIRS="")
    if extra_path:
        env["PYTHONPATH"] = extra_path + os.pathsep + env.get("PYTHONPATH", "")
    return env


def timed(code: str, extra_path: str | None = None) -> list[float]:
    out = []
    for _ in range(TRIALS):
        with tempfile.TemporaryDirectory() as cache:
            os.chmod(cache, 0o700)
            out.append(run(code, fresh_env(cache, extra_path)))
    return out


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s" + (f" [{min(xs):.2f}-{max(xs):.2f}]" if len(xs) > 1 else "")


def main() -> None:
    ref = reference_path()
    print(f"\n### First call of each op, empty cache, bf16 ({environment()}, {JOBS} CPUs, {TRIALS} trials)\n")
    print("| op | jitkern | reference | jitkern / reference |")
    print("|---|---|---|---|")
    wanted = [] if sys.argv[1:] == ["builds"] else sys.argv[1:] or list(OPS)
    for op, (mine, theirs) in ((op, OPS[op]) for op in wanted):
        jk = timed(JITKERN.format(call=mine))
        if theirs is None or ref is None:
            why = REF_UNAVAILABLE.get(op, "no such JIT op") if theirs is None else "not run: no reference wheel"
            print(f"| {op} | {fmt(jk)} | {why} | |", flush=True)
            continue
        try:
            rf = timed(REFERENCE.format(call=theirs, module=REF_MODULES.get(op, "norm")), ref)
        except RuntimeError as e:
            print(f"| {op} | {fmt(jk)} | not run: {str(e)[-200:]} | |", flush=True)
            continue
        print(f"| {op} | {fmt(jk)} | {fmt(rf)} | {statistics.median(jk) / statistics.median(rf):.2f}x |", flush=True)

    if sys.argv[1:] and sys.argv[1:] != ["builds"]:
        return
    # The compilers' CPU time (every process the build ran, user + system) over the CPUs is the least wall
    # time any schedule of these compiles can take.
    print(f"\n| build into an empty cache | seconds | compilers' CPU seconds | CPU seconds / {JOBS} CPUs |")
    print("|---|---|---|---|")
    import jitkern.ops
    n = len(jitkern.ops.specs(dtypes=["bfloat16"]))
    with tempfile.TemporaryDirectory() as cache:
        os.chmod(cache, 0o700)
        wall, cpu = with_cpu(lambda: run("import jitkern.ops as ops, torch, time\nt0 = time.perf_counter()\nops.warmup(dtypes=[torch.bfloat16])\n"
                                         "print('SECONDS', time.perf_counter() - t0)", fresh_env(cache)))
    print(f"| `jitkern.ops.warmup(dtypes=[torch.bfloat16])` (every op, {n} modules) | {wall:.2f} | {cpu:.0f} | {cpu / JOBS:.2f} |")
    arch = os.environ.get("JITKERN_CUDA_ARCH", "sm_90a")
    n = len(jitkern.ops.specs(dtypes=["float16", "bfloat16", "float32"]))
    with tempfile.TemporaryDirectory() as cache:
        wall, cpu = with_cpu(lambda: time_prebuild(cache, "all", arch))
    print(f"| `jitkern prebuild --ops all` for fp16, bf16, fp32 ({arch}, -j {JOBS}, {n} modules) | {wall:.2f} | {cpu:.0f} | {cpu / JOBS:.2f} |")


def with_cpu(fn) -> tuple[float, float]:
    """fn()'s result (seconds) and the CPU seconds of the processes it ran."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = fn()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_prebuild(cache: str, families: str, arch: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jitkern", "prebuild", "--ops", families, "--arch", arch, "--dtypes", "float16,bfloat16,float32",
                    "-j", str(JOBS), "--cache-dir", cache + "/c"], check=True, capture_output=True, env=fresh_env(cache))
    return time.perf_counter() - t0

if __name__ == "__main__":
    main()
