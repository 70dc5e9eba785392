"""Runs hot ops of the reference framework (SGLang) through its own Python wrappers, on the GPU, with
fixed inputs, and saves their outputs and the seconds each first call took:
`python compat_sglang_ops.py {reference,jitkern} OUT.pt [OP ...]` (default: the seven of OPS, whose first calls
are docs/benchmarks/compat.md's table; TWENTY names them and MORE_OPS' thirteen, the twenty hottest), or
`run(...)` from another process (empty caches, the reference from REFERENCE_WHEEL or installed); without
a GPU, `python compat_sglang_ops.py host-checks [OP ...]` (default: the twenty) runs the ops' wrappers and
their kernels' host-side checks on the CPU (host_checks). The op modules are
imported before any timing, through benchmarks/utils.py's reference_import (a wheel alone suffices).
With "jitkern", jitkern.compat.sglang.install() makes jitkern the engine first, and the file also records
which ops jitkern built. test_compat_current.py runs it once per engine and compares;
benchmarks/bench_compat_sglang.py times the first calls."""

import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from utils import compile_seconds, reference_import, reference_path  # noqa: E402

MODULES = ["sglang.kernels.jit.utils", "sglang.kernels.ops.layernorm.norm", "sglang.kernels.ops.activation.activation",
           "sglang.kernels.ops.kvcache.kvcache", "sglang.kernels.ops.quantization.per_token_group_quant", "sglang.kernels.ops.moe",
           "sglang.kernels.ops.attention.rope", "sglang.kernels.ops.attention.fused_qknorm_rope", "sglang.kernels.ops.kvcache.set_mla_kv_buffer",
           "sglang.kernels.ops.attention.concat_mla", "sglang.kernels.ops.moe.moe_align", "sglang.kernels.ops.moe.moe_topk_sum",
           "sglang.kernels.ops.moe.moe_topk_sigmoid", "sglang.kernels.ops.quantization.per_token_quant_fp8",
           "sglang.kernels.ops.quantization.per_tensor_quant_fp8", "sglang.kernels.ops.moe.dsv4",
           "sglang.kernels.ops.layernorm.grouped_gemma_rmsnorm", "sglang.kernels.ops.layernorm.rmsnorm_hf"]


def run(engine: str, out_path: str, ops=(), cache_root: str = "", timeout: float = 1800) -> subprocess.CompletedProcess:
    """This file in a child process for `engine`, with empty caches under `cache_root` and the reference
    (unpacked once here) on its path; None where the reference is absent."""
    path = reference_path()
    if path is None:
        return None
    env = {k: v for k, v in os.environ.items() if k != "REFERENCE_WHEEL"}
    env.update(JITKERN_CACHE_DIR=f"{cache_root}/jitkern", SGLANG_JIT_CACHE_DIR=f"{cache_root}/sglang-{engine}", TVM_FFI_CACHE_DIR=f"{cache_root}/tvm-ffi-{engine}")
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, __file__, engine, out_path, *ops], env=env, capture_output=True, text=True, timeout=timeout)


def timing_table(runs: dict) -> str:
    """Markdown: each op's first-call seconds per engine and jitkern / reference, and their sum (the cold
    start of all of them); `runs` maps "reference"/"jitkern" to a list of run results (median taken).
    The device chain of jitkern's builds of the op (nvcc's device compile of the same source, which any
    engine building it from source runs) is the floor a first call cannot go under."""
    import statistics

    def median_of(values: list):  # of the runs' values, where every run has one
        return statistics.median(values) if values and None not in values else None

    def total(res: dict):
        return None if any("error" in r for r in res.values()) else sum(r["seconds"] for r in res.values())

    every = "all (cold start)"
    lines = ["| op | modules built | reference s | jitkern s | jitkern / reference | jitkern's builds s | nvcc's device chain alone s "
             "| device chain / reference |", "|---|---|---|---|---|---|---|---|"]
    for op in list(runs["reference"][0]) + [every]:
        seconds = {}
        for engine, results in runs.items():
            values = [total(res) if op == every else res.get(op, {}).get("seconds") for res in results]
            seconds[engine] = median_of(values)
        ref, ours = seconds["reference"], seconds["jitkern"]
        fmt = lambda s: f"{s:.2f}" if s is not None else "error"  # noqa: E731
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"  # noqa: E731
        first = runs["jitkern"][0]  # modules jitkern built (rmsnorm: one per hidden size)
        modules = sum(len(r.get("built", ())) for r in first.values()) if op == every else len(first.get(op, {}).get("built", ()))

        def jitkern_median(key):  # of jitkern's runs: the op's (or every op's) build or device seconds
            values = [sum(r.get(key, 0) for r in res.values()) if op == every else res.get(op, {}).get(key) for res in runs["jitkern"]]
            return median_of(values)

        builds, floor = jitkern_median("build_seconds"), jitkern_median("device_seconds")
        lines.append(f"| {op} | {modules} | {fmt(ref)} | {fmt(ours)} | {ratio(ours, ref)} | {fmt(builds)} | {fmt(floor)} | {ratio(floor, ref)} |")
    return "\n".join(lines)


import torch  # noqa: E402

dev = "cuda"
BF16 = torch.bfloat16
built: list[str] = []
compiled: list[tuple[float, float]] = []  # per jitkern build: its seconds, nvcc's device chain's (preprocess, cicc, ptxas, fatbinary)


def gen(seed, *shape, dtype=BF16):
    g = torch.Generator(device=dev).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(dtype)


def rmsnorm():
    from sglang.kernels.ops.layernorm.norm import rmsnorm

    outs = []
    for d in (128, 4096, 8192):
        x, w = gen(1, 64, d), gen(2, d)
        out = torch.empty_like(x)
        rmsnorm(x, w, out, 1e-6)
        outs.append(out)
    return outs


def fused_add_rmsnorm():
    from sglang.kernels.ops.layernorm.norm import fused_add_rmsnorm

    x, r, w = gen(3, 64, 4096), gen(4, 64, 4096), gen(5, 4096)
    fused_add_rmsnorm(x, r, w, 1e-6)
    return [x, r]


def qknorm():
    from sglang.kernels.ops.layernorm.norm import fused_inplace_qknorm

    q, k, qw, kw = gen(6, 16, 8, 128), gen(7, 16, 2, 128), gen(8, 128), gen(9, 128)
    fused_inplace_qknorm(q, k, qw, kw, 1e-6)
    return [q, k]


def activations():
    from sglang.kernels.ops.activation.activation import gelu_and_mul, silu_and_mul

    x = gen(10, 64, 2 * 4096)
    return [silu_and_mul(x), gelu_and_mul(x)]


def store_cache():
    from sglang.kernels.ops.kvcache.kvcache import store_cache

    k, v = gen(11, 32, 8 * 128), gen(12, 32, 8 * 128)
    kc, vc = torch.zeros(256, 8 * 128, device=dev, dtype=BF16), torch.zeros(256, 8 * 128, device=dev, dtype=BF16)
    idx = torch.randperm(256, generator=torch.Generator().manual_seed(13))[:32].to(dev)
    store_cache(k, v, kc, vc, idx)
    return [kc, vc]


def per_token_group_quant():
    from sglang.kernels.ops.quantization.per_token_group_quant import per_token_group_quant

    q, s = per_token_group_quant(gen(14, 64, 4096), group_size=128)
    return [q.view(torch.uint8), s]


def topk_softmax():
    from sglang.kernels.ops.moe import topk_softmax

    weights, ids = torch.empty(64, 8, device=dev), torch.empty(64, 8, device=dev, dtype=torch.int32)
    topk_softmax(weights, ids, gen(15, 64, 64, dtype=torch.float32), True)
    return [weights, ids]


OPS = [rmsnorm, fused_add_rmsnorm, qknorm, activations, store_cache, per_token_group_quant, topk_softmax]


# The other thirteen of the twenty hottest: what a serving engine's decode/prefill step calls besides the
# seven above (RoPE, MLA cache writes, MoE routing and reduction, FP8 quantization, norm variants).
def rope():
    from sglang.kernels.ops.attention.rope import FusedSetKVBufferArg, apply_rope_with_cos_sin_cache_inplace

    cos_sin, positions = gen(20, 64, 128, dtype=torch.float32), torch.arange(16, device=dev) * 3 % 64
    q, k = gen(21, 16, 8, 128), gen(22, 16, 2, 128)
    apply_rope_with_cos_sin_cache_inplace(q, k, cos_sin, positions, is_neox=True)
    # with the KV-cache store fused: the same module's second function
    q2, k2, v = gen(23, 16, 8, 128), gen(24, 16, 2, 128), gen(25, 16, 2 * 128)
    kc, vc = torch.zeros(64, 2 * 128, device=dev, dtype=BF16), torch.zeros(64, 2 * 128, device=dev, dtype=BF16)
    loc = torch.randperm(64, generator=torch.Generator().manual_seed(26))[:16].to(dev)
    apply_rope_with_cos_sin_cache_inplace(q2, k2, cos_sin, positions, is_neox=True, fused_args=FusedSetKVBufferArg(v, kc, vc, loc))
    return [q, k, q2, k2, kc, vc]


def fused_qk_norm_rope():
    from sglang.kernels.ops.attention.fused_qknorm_rope import fused_qk_norm_rope

    qkv, qw, kw = gen(27, 16, (8 + 2 + 2) * 128), gen(28, 128), gen(29, 128)
    positions = torch.arange(16, device=dev, dtype=torch.int32) * 5
    fused_qk_norm_rope(qkv, 8, 2, 2, 128, 1e-6, qw, kw, 10000.0, True, positions, 1.0, 1.0, 1.0, 1.0)
    return [qkv]


def set_mla_kv_buffer():
    from sglang.kernels.ops.kvcache.set_mla_kv_buffer import set_mla_kv_buffer

    kv = torch.zeros(256, 1, 512 + 64, device=dev, dtype=BF16)  # DeepSeek's MLA row: kv_lora_rank 512, rope 64
    loc = (torch.randperm(255, generator=torch.Generator().manual_seed(30))[:32] + 1).to(dev)  # slot 0 is reserved
    set_mla_kv_buffer(kv, loc, gen(31, 32, 1, 512), gen(32, 32, 1, 64))
    return [kv]


def concat_mla_k():
    from sglang.kernels.ops.attention.concat_mla import concat_mla_k

    k = torch.zeros(8, 128, 192, device=dev, dtype=BF16)  # the kernel's fixed 128 heads, nope 128 + rope 64
    concat_mla_k(k, gen(33, 8, 128, 128), gen(34, 8, 1, 64))
    return [k]


def concat_mla_absorb_q():
    from sglang.kernels.ops.attention.concat_mla import concat_mla_absorb_q

    return [concat_mla_absorb_q(gen(35, 8, 16, 512), gen(36, 8, 16, 64))]


def moe_align_block_size():
    from sglang.kernels.ops.moe.moe_align import moe_align_block_size

    # As the serving engine calls it: 16 experts plus the bucket of filtered ones (ids offset by one), small
    # enough for the kernel's one-block path, whose order of tokens within an expert is fixed.
    experts, block = 16, 16
    ids = torch.randint(0, experts, (16, 4), generator=torch.Generator().manual_seed(37), dtype=torch.int32).to(dev)
    padded = (ids.numel() + (experts + 1) * (block - 1) + 3) // 4 * 4
    sorted_ids = torch.full((padded,), -7, device=dev, dtype=torch.int32)
    expert_ids = torch.full(((padded + block - 1) // block,), -7, device=dev, dtype=torch.int32)
    post_pad, cumsum = torch.zeros(1, device=dev, dtype=torch.int32), torch.zeros(experts + 2, device=dev, dtype=torch.int32)
    moe_align_block_size(ids, experts + 1, block, sorted_ids, expert_ids, post_pad, cumsum, True)
    return [sorted_ids, expert_ids, post_pad]


def moe_topk_sum():
    from sglang.kernels.ops.moe.moe_topk_sum import moe_topk_sum

    return [moe_topk_sum(gen(38, 32, 8, 4096), torch.empty(32, 4096, device=dev, dtype=BF16))]


def topk_sigmoid():
    from sglang.kernels.ops.moe.moe_topk_sigmoid import topk_sigmoid

    weights, ids = torch.empty(64, 8, device=dev), torch.empty(64, 8, device=dev, dtype=torch.int32)
    topk_sigmoid(weights, ids, gen(39, 64, 128), True, correction_bias=gen(40, 128, dtype=torch.float32))
    return [weights, ids]


def per_token_quant_fp8():
    from sglang.kernels.ops.quantization.per_token_quant_fp8 import per_token_quant_fp8

    q, s = torch.empty(64, 4096, device=dev, dtype=torch.float8_e4m3fn), torch.empty(64, device=dev)
    per_token_quant_fp8(gen(41, 64, 4096), q, s)
    return [q.view(torch.uint8), s]


def per_tensor_quant_fp8():
    from sglang.kernels.ops.quantization.per_tensor_quant_fp8 import per_tensor_quant_fp8

    q, s = torch.empty(64, 4096, device=dev, dtype=torch.float8_e4m3fn), torch.zeros(1, device=dev)  # the absmax starts at 0
    per_tensor_quant_fp8(gen(42, 64, 4096), q, s)
    return [q.view(torch.uint8), s]


def silu_and_mul_masked_post_quant():
    from sglang.kernels.ops.moe.dsv4 import silu_and_mul_masked_post_quant

    experts, tokens, hidden = 8, 16, 2048
    out = torch.zeros(experts, tokens, hidden, device=dev, dtype=torch.float8_e4m3fn)  # rows past masked_m stay as they are
    scale = torch.zeros(experts, tokens, hidden // 128, device=dev)
    masked_m = torch.tensor([16, 3, 0, 7, 16, 1, 9, 5], device=dev, dtype=torch.int32)
    silu_and_mul_masked_post_quant(gen(43, experts, tokens, 2 * hidden), out, scale, 128, masked_m)
    return [out.view(torch.uint8), scale]


def gemma_rmsnorm():
    from sglang.kernels.ops.layernorm.grouped_gemma_rmsnorm import grouped_gemma_rmsnorm

    return [grouped_gemma_rmsnorm(gen(44, 64, 2048), gen(45, 2048), group_size=2048)]  # one group: Gemma's RMSNorm


def rmsnorm_hf():
    from sglang.kernels.ops.layernorm.norm import fused_add_rmsnorm
    from sglang.kernels.ops.layernorm.rmsnorm_hf import rmsnorm_hf

    # the serving engine's norms with Hugging Face's rounding (cast before the weight multiply), with and without the residual
    out = rmsnorm_hf(gen(46, 64, 4096), gen(47, 4096))
    x, r = gen(48, 64, 4096), gen(49, 64, 4096)
    fused_add_rmsnorm(x, r, gen(50, 4096), 1e-6, cast_x_before_out_mul=True)
    return [out, x, r]


MORE_OPS = [rope, fused_qk_norm_rope, set_mla_kv_buffer, concat_mla_k, concat_mla_absorb_q, moe_align_block_size, moe_topk_sum,
            topk_sigmoid, per_token_quant_fp8, per_tensor_quant_fp8, silu_and_mul_masked_post_quant, gemma_rmsnorm, rmsnorm_hf]
TWENTY = [op.__name__ for op in OPS + MORE_OPS]  # the twenty hottest: `run(..., ops=TWENTY)`


def import_modules() -> None:
    for module in MODULES:  # imported before any timing, with either engine
        if reference_import(module) is None:
            sys.exit("the reference (sglang) is neither installed nor named by REFERENCE_WHEEL")


def use_jitkern():
    """jitkern.compat.sglang, installed as the engine under the imported reference, recording each build
    (`built`) and its seconds (`compiled`)."""
    import logging

    from jitkern.compat import sglang as compat

    compat.install()
    spec_of = compat.jit_spec

    def counting_jit_spec(*args, **kwargs):  # every jitkern build goes through it
        built.append(str(args[0]) if args else "?")
        return spec_of(*args, **kwargs)

    compat.jit_spec = counting_jit_spec

    class DeviceSeconds(logging.Handler):  # from the engine's "compiled NAME ..." lines
        def emit(self, record):
            seconds = compile_seconds(record.getMessage())
            if seconds is not None:
                compiled.append(seconds)

    logging.getLogger("jitkern").setLevel(logging.INFO)
    logging.getLogger("jitkern").addHandler(DeviceSeconds())
    return compat


def main(engine: str, out_path: str, chosen: list[str]) -> None:
    import_modules()
    if engine == "jitkern":
        use_jitkern()
    torch.zeros(1, device=dev)  # CUDA context first: not part of any op's first call
    results = {}
    for op in OPS + MORE_OPS:
        if op.__name__ not in (chosen or [o.__name__ for o in OPS]):
            continue
        before, compiled_before = len(built), len(compiled)
        try:
            start = time.perf_counter()
            outs = op()
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            results[op.__name__] = {"outputs": [t.cpu() for t in outs], "built": built[before:], "seconds": seconds,
                                    "build_seconds": sum(b for b, _ in compiled[compiled_before:]),
                                    "device_seconds": sum(d for _, d in compiled[compiled_before:])}
        except Exception:  # noqa: BLE001
            results[op.__name__] = {"error": traceback.format_exc(limit=3)}
    torch.save(results, out_path)


def host_checks(chosen: list[str]) -> int:
    """Without a GPU (torch for the CPU suffices): each op through the reference's wrappers with jitkern as
    the engine, its modules built for sm_90a, and each kernel function called with the op's own tensors
    relabelled as CUDA memory, so that the kernel's host-side checks (shapes, strides, dtypes, devices) judge
    the op's real arguments; a call that passes them stops at the CUDA runtime (no driver). One line per op;
    returns 1 where one failed before that."""
    import ctypes

    import tvm_ffi
    from torch.utils.dlpack import to_dlpack

    global dev
    if torch.cuda.is_available():
        sys.exit("host-checks runs where no GPU is (it hands the kernels host memory labelled as CUDA memory)")
    dev = "cpu"
    # the custom ops' dispatcher has no CPU kernels: the wrappers' own functions are called instead
    reference_import("sglang.srt.utils.custom_op").register_custom_op = lambda fn=None, **_: fn if fn is not None else (lambda f: f)
    import_modules()
    compat = use_jitkern()
    from sglang.kernels import selector, spec
    from sglang.kernels.jit.utils import override_jit_cuda_arch

    selector._platform = lambda: spec.PlatformInfo(device_type="cuda", cuda_arch_major=9, cuda_arch_minor=0)  # for ops it dispatches

    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

    class AsCuda:  # a CPU tensor's DLPack export with its device type set to kDLCUDA (2)
        def __init__(self, tensor):
            self.tensor = tensor

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **_):
            capsule = to_dlpack(self.tensor)
            ctypes.c_int32.from_address(get_pointer(capsule, b"dltensor") + 8).value = 2  # DLTensor.device, after the data pointer
            return capsule

    class Relabelling:  # a built module whose functions get the tensors relabelled
        def __init__(self, module):
            self.module = module

        def __getattr__(self, name):
            def call(*args, **kwargs):
                cuda = lambda a: tvm_ffi.from_dlpack(AsCuda(a)) if isinstance(a, torch.Tensor) else a  # noqa: E731
                try:
                    return getattr(self.module, name)(*map(cuda, args), **{k: cuda(v) for k, v in kwargs.items()})
                except RuntimeError as e:
                    if "CUDA error" not in str(e):  # the first CUDA runtime call after the checks
                        raise

            return call

    load_jit = compat.load_jit
    for module in [m for name, m in sys.modules.items() if name.startswith("sglang.") and getattr(m, "load_jit", None) is load_jit]:
        module.load_jit = lambda *args, **kwargs: Relabelling(load_jit(*args, **kwargs))
    failed = 0
    with override_jit_cuda_arch(9, 0, "a"), compat.override_jit_cuda_arch(9, 0, "a"):
        for op in OPS + MORE_OPS:
            if op.__name__ not in (chosen or TWENTY):
                continue
            before = len(built)
            try:
                op()
                print(f"{op.__name__}: built {built[before:]}, host-side checks passed", flush=True)
            except Exception as e:  # noqa: BLE001
                failed += 1
                print(f"{op.__name__}: built {built[before:]}, FAILED: {type(e).__name__}: {str(e).strip()[-400:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1] == "host-checks":
        sys.exit(host_checks(sys.argv[2:]))
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
