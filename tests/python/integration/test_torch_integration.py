"""jitkern's ops as torch custom ops: opcheck, torch.compile(fullgraph=True) with and without CUDA
graphs on a toy decoder block, dynamic token counts, typed errors under compile, and the guard
against loading a module inside a CUDA graph capture."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu


def _torch():
    import torch

    return torch


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
def test_opcheck_norm_ops(dtype_name):
    torch = _torch()
    import jitkern.ops  # noqa: F401  (registers torch.ops.jitkern)

    dtype = getattr(torch, dtype_name)
    dev = "cuda"
    for tokens, hidden in ((1, 4096), (7, 1000), (64, 128)):
        x = torch.randn(tokens, hidden, dtype=dtype, device=dev)
        w = torch.randn(hidden, dtype=dtype, device=dev)
        torch.library.opcheck(torch.ops.jitkern.rmsnorm, (x, w, 1e-6))
        torch.library.opcheck(torch.ops.jitkern.rmsnorm_out, (x, w, torch.empty_like(x), 1e-6))
        torch.library.opcheck(torch.ops.jitkern.fused_add_rmsnorm, (x.clone(), torch.randn_like(x), w, 1e-6))
        torch.library.opcheck(torch.ops.jitkern.qknorm_across_heads, (x.clone(), torch.randn(tokens, 256, dtype=dtype, device=dev), w,
                                                                      torch.randn(256, dtype=dtype, device=dev), 1e-6))
    q, k = torch.randn(5, 8, 128, dtype=dtype, device=dev), torch.randn(5, 2, 128, dtype=dtype, device=dev)
    hw = torch.randn(128, dtype=dtype, device=dev)
    torch.library.opcheck(torch.ops.jitkern.qknorm, (q, k, hw, hw, 1e-6, 0))
    torch.library.opcheck(torch.ops.jitkern.qknorm, (q.view(5, -1).clone(), k.view(5, -1).clone(), hw, hw, 1e-6, 128))


def test_opcheck_add_constant():
    torch = _torch()
    import jitkern.ops  # noqa: F401

    src = torch.randint(-100, 100, (1000,), dtype=torch.int32, device="cuda")
    torch.library.opcheck(torch.ops.jitkern.add_constant, (src, 5))
    torch.library.opcheck(torch.ops.jitkern.add_constant_out, (src, 5, torch.empty_like(src)))


def _block(torch, hidden=512, heads=8, kv=2, d=64):
    """embedding -> rmsnorm -> linear -> fused_add_rmsnorm (the residual is the embedding output, an
    intermediate as in a model's first layer) -> qkv linear -> qknorm on q/k column slices -> linear."""
    from jitkern.ops import fused_add_rmsnorm, fused_inplace_qknorm, rmsnorm

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            kw = dict(dtype=torch.bfloat16, device="cuda")
            self.embed = torch.nn.Embedding(1000, hidden, **kw)
            self.w1, self.w2 = torch.nn.Parameter(torch.randn(hidden, **kw)), torch.nn.Parameter(torch.randn(hidden, **kw))
            self.qw, self.kw = torch.nn.Parameter(torch.randn(d, **kw)), torch.nn.Parameter(torch.randn(d, **kw))
            self.up = torch.nn.Linear(hidden, hidden, **kw)
            self.qkv = torch.nn.Linear(hidden, (heads + 2 * kv) * d, **kw)
            self.out = torch.nn.Linear(heads * d, hidden, **kw)

        def forward(self, ids):
            residual = self.embed(ids)
            h = self.up(rmsnorm(residual, self.w1))
            fused_add_rmsnorm(h, residual, self.w2)
            qkv = self.qkv(h)
            q, k = qkv[:, : heads * d], qkv[:, heads * d : (heads + kv) * d]
            fused_inplace_qknorm(q, k, self.qw, self.kw, head_dim=d)
            return self.out(q) + k.sum(-1, keepdim=True), residual

    return Block().eval()


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_block_matches_eager_without_graph_breaks_or_recompiles(mode):
    torch = _torch()
    import torch._dynamo.testing
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    block = _block(torch)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend=counter) if mode == "default" else \
        torch.compile(block, fullgraph=True, dynamic=True, mode=mode)
    skips, first_frames = counters["inductor"]["cudagraph_skips"], None
    with torch.no_grad():
        explanation = torch._dynamo.explain(block)(torch.randint(0, 1000, (3,), device="cuda"))
        assert explanation.graph_break_count == 0, explanation.break_reasons
        for step in range(2):
            for tokens in (7, 64, 512, 1):
                ids = torch.randint(0, 1000, (tokens,), device="cuda")
                expected, expected_r = block(ids)
                if mode == "reduce-overhead":
                    torch.compiler.cudagraph_mark_step_begin()
                got, got_r = compiled(ids)
                if first_frames is None:
                    first_frames = counter.frame_count  # the first compile (torch may count several frames)
                torch.testing.assert_close(got, expected, rtol=5e-2, atol=5e-2)
                torch.testing.assert_close(got_r, expected_r, rtol=5e-2, atol=5e-2)
    if mode == "default":
        # one graph for every token count >= 2, and torch's usual specialisation of a size of 1
        recompiles = counter.frame_count - first_frames
        assert recompiles <= 1, f"recompiled {recompiles} times for four token counts"
    else:
        assert counters["inductor"]["cudagraph_skips"] == skips, "Inductor ran the block without CUDA graphs"


def test_reduce_overhead_skips_graphs_when_an_input_is_mutated():
    """The control for the check above: torch's CUDA graph trees skip a graph that writes one of its
    inputs (here the residual passed in), for custom ops as for torch's own in-place ops."""
    torch = _torch()
    from torch._dynamo.utils import counters

    from jitkern.ops import fused_add_rmsnorm

    torch._dynamo.reset()
    w = torch.randn(256, dtype=torch.bfloat16, device="cuda")

    def f(x, residual):
        fused_add_rmsnorm(x, residual, w)
        return x * 2

    skips = counters["inductor"]["cudagraph_skips"]
    compiled = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    x, r = torch.randn(4, 256, dtype=torch.bfloat16, device="cuda"), torch.randn(4, 256, dtype=torch.bfloat16, device="cuda")
    expected_r = r + x
    compiled(x.clone(), r)
    torch.testing.assert_close(r, expected_r, rtol=2e-2, atol=2e-2)
    assert counters["inductor"]["cudagraph_skips"] > skips


def test_every_op_traces_in_one_graph_and_add_constant_compiles():
    torch = _torch()
    from jitkern.ops import add_constant, fused_inplace_qknorm_across_heads, rmsnorm

    torch._dynamo.reset()

    def f(x, w, src, q, k):
        y = rmsnorm(x, w)
        out = torch.empty_like(y)
        rmsnorm(x, w, out)
        fused_inplace_qknorm_across_heads(q, k, w, w)
        return y + out, add_constant(src, 3) * 2, add_constant(src, 4, torch.empty_like(src)), q, k

    x, w = torch.randn(4, 256, dtype=torch.float16, device="cuda"), torch.randn(256, dtype=torch.float16, device="cuda")
    src = torch.randint(0, 9, (100,), dtype=torch.int32, device="cuda")
    q, k = torch.randn(4, 256, dtype=torch.float16, device="cuda"), torch.randn(4, 256, dtype=torch.float16, device="cuda")
    explanation = torch._dynamo.explain(f)(x, w, src, q.clone(), k.clone())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    expected = f(x, w, src, q.clone(), k.clone())
    got = torch.compile(f, fullgraph=True)(x, w, src, q.clone(), k.clone())
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_typed_errors_under_compile():
    torch = _torch()
    from jitkern.ops import rmsnorm

    torch._dynamo.reset()
    f = torch.compile(lambda x, w: rmsnorm(x, w), fullgraph=True)
    x = torch.randn(4, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=r"weight: Size mismatch for shape#0\('hidden_size'\)"):
        f(x, torch.randn(32, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(TypeError, match="weight: DType mismatch: float32"):
        f(x, torch.randn(64, dtype=torch.float32, device="cuda"))


CAPTURE = textwrap.dedent(
    """
    import sys, torch, jitkern.ops
    from jitkern.ops import rmsnorm
    x = torch.randn(8, 256, dtype=torch.float16, device="cuda"); w = torch.randn(256, dtype=torch.float16, device="cuda")
    out = torch.empty_like(x)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            rmsnorm(x, w, out)
        print("CAPTURED WITHOUT WARMUP")
    except RuntimeError as e:
        print("REFUSED", str(e).replace("\\n", " "))
    jitkern.ops.warmup(dtypes=[torch.float16])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        rmsnorm(x, w, out)
    out.zero_(); graph.replay(); torch.cuda.synchronize()
    ref = (x.double() * (x.double().pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt() * w.double()).half()
    torch.testing.assert_close(out, ref, rtol=2e-3, atol=2e-3)
    print("CAPTURED AFTER WARMUP")
    """
)


def test_capture_guard_and_warmup():
    """A module not loaded yet is refused inside a capture with a message that says how to warm it up;
    after jitkern.ops.warmup the same capture works (fresh process: nothing loaded before)."""
    proc = subprocess.run([sys.executable, "-c", CAPTURE], capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED jitkern: the norm_rmsnorm module for torch.float16 is not loaded yet and a CUDA graph is being captured" in proc.stdout, proc.stdout
    assert "jitkern.ops.warmup(dtypes=[torch.float16])" in proc.stdout
    assert "CAPTURED AFTER WARMUP" in proc.stdout


def test_warmup_builds_specs_in_parallel(tmp_path, monkeypatch):
    torch = _torch()
    import jitkern
    from jitkern.ops.add_constant import spec

    monkeypatch.setenv("JITKERN_CACHE_DIR", str(tmp_path / "cache"))
    modules = jitkern.warmup(*(spec(c) for c in (101, 102, 103)))
    assert [m.exports for m in modules] == [("add_constant",)] * 3
    src = torch.arange(10, dtype=torch.int32, device="cuda")
    out = torch.empty_like(src)
    modules[1].add_constant(out, src)
    torch.testing.assert_close(out, src + 102)


def test_ops_warmup_builds_every_family_in_one_parallel_build(tmp_path, monkeypatch):
    """ops.warmup hands every module of the selection, of all its families, to one parallel build (a family
    never waits for another's modules); the ops then run without compiling."""
    torch = _torch()
    import jitkern.jit
    import jitkern.ops as ops

    monkeypatch.setenv("JITKERN_CACHE_DIR", str(tmp_path / "cache"))
    calls, build_all = [], jitkern.jit.warmup

    def recording(*specs, **kwargs):
        calls.append([spec.args for spec in specs])
        return build_all(*specs, **kwargs)

    monkeypatch.setattr(jitkern.jit, "warmup", recording)
    wanted = ["rmsnorm", "moe_align_block_size", "store_cache"]
    ops.warmup(dtypes=[torch.bfloat16], ops=wanted)
    assert calls and sorted(calls[0]) == sorted(spec.args for spec in ops.specs(ops=wanted, dtypes=[torch.bfloat16])), calls
    assert len(calls[0]) == 3
    assert not [spec.name for spec in ops.specs(ops=wanted, dtypes=[torch.bfloat16]) if spec._build_reporting()[1]], "a module was left unbuilt"
    monkeypatch.setenv("JITKERN_ON_MISS", "error")  # everything is cached now: a compile would raise
    x = torch.randn(4, 256, dtype=torch.bfloat16, device="cuda")
    torch.testing.assert_close(ops.rmsnorm(x, torch.ones(256, dtype=torch.bfloat16, device="cuda")).float(),
                               x.float() * x.float().pow(2).mean(-1, keepdim=True).add(1e-6).rsqrt(), rtol=2e-2, atol=2e-2)


def test_user_kernel_becomes_a_torch_op(tmp_path):
    """jitkern.torch_op: a user's JitSpec export as a torch op, loaded lazily, traced with fullgraph=True."""
    torch = _torch()
    import jitkern

    kernel = tmp_path / "scale_by_two.cuh"
    kernel.write_text(
        "#include <jitkern/tensor.h>\n#include <jitkern/utils.cuh>\n"
        "__global__ void twice_kernel(float* out, const float* x, int64_t n) {\n"
        "  const int64_t i = blockIdx.x * int64_t{256} + threadIdx.x; if (i < n) out[i] = 2.0f * x[i]; }\n"
        "inline void twice(jitkern::TensorView x, jitkern::TensorView out) {\n"
        "  using namespace host; auto N = SymbolicSize{\"n\"}; auto device = SymbolicDevice{};\n"
        "  TensorMatcher({N}).with_dtype<float>().with_device<kDLCUDA>(device).verify(x, \"x\").verify(out, \"out\");\n"
        "  LaunchKernel(div_ceil(N.unwrap(), 256), 256, device.unwrap())(twice_kernel, static_cast<float*>(out.data_ptr()),\n"
        "      static_cast<const float*>(x.data_ptr()), N.unwrap()); }\n")
    spec = jitkern.JitSpec("user_twice", cuda_files=[str(kernel)], cuda_wrappers=[("twice", "twice", "x, out")])
    op = jitkern.torch_op("jitkern_test::twice", "(Tensor x, Tensor(a!) out) -> ()", spec, "twice")
    torch.library.opcheck(op, (torch.randn(100, device="cuda"), torch.empty(100, device="cuda")))

    def f(x):
        out = torch.empty_like(x)
        op(x, out)
        return out + 1

    torch._dynamo.reset()
    x = torch.randn(1000, device="cuda")
    assert torch._dynamo.explain(f)(x).graph_break_count == 0
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), 2 * x + 1)
    with pytest.raises(ValueError, match=r"x: Size mismatch|out: Size mismatch"):
        op(x, torch.empty(10, device="cuda"))


def test_ops_refuse_a_cpu_tensor_before_building_anything(tmp_path):
    """A tensor the kernels cannot take (here on the CPU) is refused by the op's first call, naming the op and
    the argument, before any module is built (JITKERN_ON_MISS=error would raise CacheMissError for a build)."""
    code = textwrap.dedent("""
        import torch
        from jitkern.ops import (add_constant, concat_mla_absorb_q, concat_mla_k, moe_align_block_size, per_token_quant_fp8, rmsnorm,
                                 silu_and_mul, store_cache)
        x = torch.randn(4, 64)
        for call in (lambda: rmsnorm(x, torch.ones(64)), lambda: silu_and_mul(x), lambda: per_token_quant_fp8(x),
                     lambda: add_constant(torch.zeros(4, dtype=torch.int32), 5),
                     lambda: moe_align_block_size(torch.zeros(4, 2, dtype=torch.int32), 8, 16),
                     lambda: concat_mla_k(torch.empty(4, 2, 96), torch.zeros(4, 2, 64), torch.zeros(4, 1, 32)),
                     lambda: concat_mla_absorb_q(torch.zeros(4, 2, 64), torch.zeros(4, 2, 32)),
                     lambda: store_cache(x, x, torch.empty(8, 64), torch.empty(8, 64), torch.arange(4))):
            try:
                call()
                print("no error")
            except Exception as e:
                print(type(e).__name__, e)
    """)
    env = dict(os.environ, JITKERN_CACHE_DIR=str(tmp_path / "cache"), JITKERN_ON_MISS="error")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["ValueError rmsnorm(): input must be a CUDA tensor, got cpu",
                                       "ValueError silu_and_mul(): input must be a CUDA tensor, got cpu",
                                       "ValueError per_token_quant_fp8(): input must be a CUDA tensor, got cpu",
                                       "ValueError add_constant(): src must be a CUDA tensor, got cpu",
                                       "ValueError moe_align_block_size(): topk_ids must be a CUDA tensor, got cpu",
                                       "ValueError concat_mla_k(): k must be a CUDA tensor, got cpu",
                                       "ValueError concat_mla_absorb_q(): a must be a CUDA tensor, got cpu",
                                       "ValueError store_cache(): k must be a CUDA tensor, got cpu"], run.stdout
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir()), "nothing may be built"
