"""AllReduce (jitkern.ops.all_reduce): the argument checks on the CPU; on every GPU of the machine (2 to
8, one rank each), against the exact sum of every rank's input (one rounding from it) and against NCCL.

The GPU checks run in one set of worker processes (this file run as a script, rank r on cuda:r), which
write each check's outcome as it finishes; each GPU test asserts one check on every rank. NVLink multicast stays off in the workers (NCCL_NVLS_ENABLE=0 and the torch/NVSHMEM switches)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DTYPES = ("float16", "bfloat16", "float32")
TOL = {"float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3), "float32": (1e-6, 1e-6)}  # one rounding (the fused op's normalisation)
MAX_BYTES = 64 << 20
# Elements, 1 to 16 MiB: odd counts take the element-wise kernels, the rest 16-byte vectors; by the
# default limits, push up to 512 KiB, one-shot up to 8 MiB at 2 ranks (512 KiB at 4), two-shot above.
SIZES = [1, 7, 8, 1000, 4096, 4099, 65536, 131072, 262144, 262147, 1 << 20, 3_000_001, 1 << 22]
# Rows of 16-byte vectors and of single elements (odd widths), one or several per thread; the last is
# above the push limit (all_reduce, then fused_add_rmsnorm).
FUSED_SHAPES = [(1, 4096), (3, 1000), (7, 5120), (5, 2047), (64, 4096), (1, 16384), (2, 4095), (2, 16392), (200, 4096)]
CHECKS = ([f"sizes[{d}]" for d in DTYPES] + ["max_bytes[float32]", "max_bytes[bfloat16]", "forced_push", "forced_one_shot", "forced_two_shot", "nccl_fallback",
          "in_place", "single_rank_group"] + [f"fused[{d}]" for d in DTYPES] + ["back_to_back", "mixed_alignment", "graph", "compile", "errors", "timeout"])
WORKER_DEADLINE_S = 150


# ---- CPU: the Python layer's argument checks (before any process group or GPU is needed) ----

def test_arguments_are_checked_before_anything_else():
    from jitkern.ops.all_reduce import AllReduce

    with pytest.raises(ValueError, match="max_bytes must be positive"):
        AllReduce(max_bytes=0)
    with pytest.raises(TypeError, match="timeout_ms must be an int"):
        AllReduce(timeout_ms=1.5)
    with pytest.raises(ValueError, match="one_shot_max_bytes must be non-negative"):
        AllReduce(one_shot_max_bytes=-1)
    with pytest.raises(TypeError, match="max_bytes must be an int"):
        AllReduce(max_bytes=True)


def test_limits_are_checked_before_the_engine():
    from jitkern.ops.all_reduce import AllReduce

    comm = AllReduce.__new__(AllReduce)  # no process group here: the Python checks run before any engine call
    for name in ("push_max_bytes", "one_shot_max_bytes"):
        with pytest.raises(ValueError, match=f"{name} must be non-negative"):
            setattr(comm, name, -1)
        with pytest.raises(TypeError, match=f"{name} must be an int"):
            setattr(comm, name, 1.5)
        with pytest.raises(TypeError, match=f"{name} must be an int"):
            setattr(comm, name, True)


def test_family_is_registered():
    from jitkern import ops
    from jitkern.ops import all_reduce

    assert ops.OPS["AllReduce"] == "all_reduce"
    assert [(s.name, s.args[1:]) for s in ops.specs(ops=["AllReduce"], dtypes=["bfloat16"])] == [
        ("all_reduce", ()), ("all_reduce_kernels", ("fp16_t",)), ("all_reduce_kernels", ("bf16_t",)), ("all_reduce_kernels", ("fp32_t",))], \
        "the communicator's module and every dtype's kernels, whatever dtypes are asked for (AllReduce loads them all)"
    assert {w[0] for w in all_reduce.spec().cuda_wrappers} >= {"create", "open_peers", "check", "set_push_max", "push_max"}
    assert {w[0] for w in all_reduce.kernels_spec("bfloat16").cuda_wrappers} == {"all_reduce", "all_reduce_add_rmsnorm"}
    assert [all_reduce.default_one_shot_max_bytes(w) for w in (2, 4, 8)] == [8 << 20, 512 << 10, 128 << 10]


# ---- GPU: two ranks against NCCL ----

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    import torch

    world = min(torch.cuda.device_count(), 8)
    if world < 2:
        pytest.skip(f"NOT RUN: needs 2 GPUs or more, this machine has {torch.cuda.device_count()}")
    import jitkern

    # Built once here, so that the ranks only load them (a rank compiling while its peer waits in a kernel would time out).
    jitkern.warmup(*jitkern.ops.specs(ops=["AllReduce", "fused_add_rmsnorm"]))
    out = tmp_path_factory.mktemp("all_reduce")
    port = _free_port()
    env = {**os.environ, **NO_MULTICAST}
    procs = [subprocess.Popen([sys.executable, __file__, str(rank), str(world), str(port), str(out)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in range(world)]
    deadline = time.monotonic() + WORKER_DEADLINE_S
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0] + f"\n[killed after {WORKER_DEADLINE_S} s]")
    results = []
    for rank in range(world):
        path = out / f"rank{rank}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {})
    return results, [p.returncode for p in procs], logs


@pytest.mark.gpu
@pytest.mark.parametrize("check", CHECKS)
def test_ranks(ranks, check):
    results, codes, logs = ranks
    for rank in range(len(results)):
        outcome = results[rank].get(check)
        assert outcome == "ok", (f"rank {rank}, check {check}: " + (outcome or f"did not report (exit code {codes[rank]}); "
                                                                       f"log tail:\n{logs[rank][-3000:]}"))


# ---- the worker: one process per rank ----

class Problems(list):
    """A check's mismatches, collected rather than raised, so that both ranks go through the same collectives."""

    def exact(self, torch, got, parts, what):
        """got must be the exact sum of every rank's part rounded once to its dtype (the kernels add in
        fp32): within one unit in the last place of the sum, plus fp32's error on the magnitudes added.
        NCCL, which rounds every partial sum of its ring to the dtype, can be further off at 3 ranks or
        more."""
        stacked = torch.stack([q.double() for q in parts])
        exact, magnitude = stacked.sum(0), stacked.abs().sum(0)
        info = torch.finfo(got.dtype)
        bound = info.eps * exact.abs() + len(parts) * 2.0**-23 * magnitude + info.smallest_normal * info.eps
        error = (got.double() - exact).abs()
        bad = ~(error <= bound)  # NaN counts as bad
        if bad.any():
            i = int(bad.nonzero()[0, 0]) if bad.dim() else 0
            flat = lambda t: t.reshape(-1)[i].item() if t.dim() else t.item()  # noqa: E731
            self.append(f"{what}: {int(bad.sum())} of {bad.numel()} elements off the exact sum by more than a rounding; first at flat "
                        f"index {i}: got {flat(got)}, exact {flat(exact)}, bound {flat(bound):.3g}")

    def near_nccl(self, torch, got, nccl, parts, what):
        """got and NCCL's result differ by no more than NCCL's roundings of its partial sums allow."""
        magnitude = torch.stack([q.double().abs() for q in parts]).sum(0)
        info = torch.finfo(got.dtype)
        bound = len(parts) * info.eps * magnitude + info.smallest_normal * info.eps
        bad = ~((got.double() - nccl.double()).abs() <= bound)
        if bad.any():
            self.append(f"{what}: {int(bad.sum())} of {bad.numel()} elements further from NCCL's result than its roundings allow")

    def close(self, torch, got, expected, dtype_name, what):
        rtol, atol = TOL[dtype_name]
        if torch.isnan(got).any():
            self.append(f"{what}: NaN in the result (unwritten elements?)")
            return
        try:
            torch.testing.assert_close(got.double(), expected.double(), rtol=rtol, atol=atol)
        except AssertionError as e:
            self.append(f"{what}: {e}")

    def same_on_every_rank(self, torch, dist, t, what):
        """Every rank must get the same bits (the sum is taken in the same order everywhere)."""
        theirs = t.clone()
        dist.broadcast(theirs, src=0)
        if not torch.equal(theirs.view(torch.uint8), t.view(torch.uint8)):
            self.append(f"{what}: the ranks' results differ")

    def expect(self, condition, what):
        if not condition:
            self.append(what)


def _worker(rank: int, world: int, port: int, out: Path) -> None:
    os.environ.update(NO_MULTICAST)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from jitkern.ops import AllReduce, fused_add_rmsnorm

    device = torch.device("cuda", rank)
    results: dict = {}

    def record(name, fn):
        problems = Problems()
        try:
            fn(problems)
            if problems:
                raise AssertionError(f"{len(problems)} problems:\n" + "\n".join(problems[:10]))
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            results[name] = traceback.format_exc()
        torch.cuda.synchronize()
        dist.barrier()
        (out / f"rank{rank}.json").write_text(json.dumps(results))

    def inputs(n, dtype, seed):
        g = torch.Generator(device=device).manual_seed(seed * 100 + rank)  # different on each rank
        return torch.randn(n, generator=g, device=device, dtype=torch.float32).to(dtype)

    def nccl_sum(x):
        expected = x.clone()
        dist.all_reduce(expected)
        return expected

    def parts_of(x):
        """Every rank's x, in rank order."""
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return parts

    def rounded_sum(x):
        """The exact sum of every rank's x, rounded once to x's dtype."""
        return torch.stack([q.double() for q in parts_of(x)]).sum(0).to(x.dtype)

    comm = AllReduce(max_bytes=MAX_BYTES, timeout_ms=20_000)
    if not comm.enabled:
        raise RuntimeError(f"the kernels are not in use: {comm.reason}")

    def compare_sizes(p, dtype_name, sizes, what, *, nccl=False):
        """nccl: the message goes to NCCL, whose bits it must have."""
        dtype = getattr(torch, dtype_name)
        for i, n in enumerate(sizes):
            x = inputs(n, dtype, i)
            before = x.clone()
            parts = parts_of(x)
            got = comm.all_reduce(x)
            if nccl:
                p.expect(torch.equal(got, nccl_sum(x)), f"{what} {dtype_name} n={n}: not NCCL's bits")
            else:
                p.exact(torch, got, parts, f"{what} {dtype_name} n={n}")
                p.near_nccl(torch, got, nccl_sum(x), parts, f"{what} {dtype_name} n={n}")
            p.expect(torch.equal(x, before), f"{what} n={n}: x was changed")
            p.same_on_every_rank(torch, dist, got, f"{what} n={n}")

    for d in DTYPES:
        record(f"sizes[{d}]", lambda p, d=d: compare_sizes(p, d, SIZES, "default limits"))
    record("max_bytes[float32]", lambda p: compare_sizes(p, "float32", [MAX_BYTES // 4], "64 MiB"))
    record("max_bytes[bfloat16]", lambda p: compare_sizes(p, "bfloat16", [MAX_BYTES // 2 - 8], "64 MiB - 16 B"))

    def forced(p, one_shot, push, sizes, what):
        defaults = comm.one_shot_max_bytes, comm.push_max_bytes
        comm.one_shot_max_bytes, comm.push_max_bytes = one_shot, push
        try:
            for d in DTYPES:
                compare_sizes(p, d, sizes, what)
        finally:
            comm.one_shot_max_bytes, comm.push_max_bytes = defaults

    push_max = comm.push_max_bytes
    record("forced_push", lambda p: forced(p, MAX_BYTES, push_max, [1, 7, 4099, 65536, 131072 - 1, 131072], "push"))
    record("forced_one_shot", lambda p: forced(p, MAX_BYTES, 0, [1, 4099, 262144, (1 << 20) + 3, 1 << 22], "one-shot"))
    record("forced_two_shot", lambda p: forced(p, 0, 0, [1, 3, 8, 24, 4099, 262147, 1 << 20], "two-shot"))

    def nccl_fallback(p):
        compare_sizes(p, "bfloat16", [MAX_BYTES // 2 + 8], "above max_bytes", nccl=True)
        for dtype in (torch.int32, torch.float64):
            x = (inputs(1001, torch.float32, 7) * 100).to(dtype)
            p.expect(torch.equal(comm.all_reduce(x), nccl_sum(x)), f"{dtype}: differs from NCCL")

    record("nccl_fallback", nccl_fallback)

    def in_place(p):
        for n in (4096, 1 << 20, 4099):
            x = inputs(n, torch.bfloat16, n)
            parts = parts_of(x)
            p.expect(comm.all_reduce(x, out=x) is x, "out=x: x is not returned")
            p.exact(torch, x, parts, f"in place n={n}")
        x = inputs(6 * 1000, torch.float16, 3).view(2, 3, 1000)
        out = torch.full_like(x, float("nan"))
        parts = parts_of(x)
        p.expect(comm.all_reduce(x, out=out) is out, "out is not returned")
        p.exact(torch, out, parts, "3-D x with out=")

    record("in_place", in_place)

    def single_rank_group(p):
        groups = [dist.new_group([r]) for r in range(world)]
        solo = AllReduce(groups[rank])
        try:
            p.expect(not solo.enabled and solo.reason == "a single rank", f"one rank: enabled={solo.enabled}, reason={solo.reason!r}")
            x = inputs(1000, torch.bfloat16, 1)
            p.expect(torch.equal(solo.all_reduce(x), x), "one rank: the sum is not x")
        finally:
            solo.close()

    record("single_rank_group", single_rank_group)

    def fused(p, dtype_name):
        dtype = getattr(torch, dtype_name)
        for i, (t, h) in enumerate(FUSED_SHAPES):
            x = inputs(t * h, dtype, 50 + i).view(t, h)
            g = torch.Generator(device=device).manual_seed(1000 + i)  # the same residual and weight on every rank
            residual = torch.randn(t, h, generator=g, device=device).to(dtype)
            weight = torch.randn(h, generator=g, device=device).to(dtype)
            x_ref, r_ref = rounded_sum(x), residual.clone()
            fused_add_rmsnorm(x_ref, r_ref, weight, 1e-6)
            comm.all_reduce_add_rmsnorm(x, residual, weight, 1e-6)
            p.close(torch, residual, r_ref, dtype_name, f"fused residual [{t}, {h}]")
            p.close(torch, x, x_ref, dtype_name, f"fused x [{t}, {h}]")
            p.same_on_every_rank(torch, dist, x, f"fused x [{t}, {h}]")
        x3 = inputs(2 * 3 * 512, dtype, 9).view(2, 3, 512)  # leading dimensions are flattened
        r3 = torch.ones_like(x3)
        w = torch.ones(512, device=device, dtype=dtype)
        x_ref, r_ref = rounded_sum(x3).view(6, 512), r3.clone().view(6, 512)
        fused_add_rmsnorm(x_ref, r_ref, w, 1e-5)
        comm.all_reduce_add_rmsnorm(x3, r3, w, 1e-5)
        p.close(torch, x3.view(6, 512), x_ref, dtype_name, "fused 3-D x")
        p.close(torch, r3.view(6, 512), r_ref, dtype_name, "fused 3-D residual")

    for d in DTYPES:
        record(f"fused[{d}]", lambda p, d=d: fused(p, d))

    def graph(p):
        small, large = inputs(4096 * 16, torch.bfloat16, 1), inputs(9 << 20, torch.bfloat16, 2)  # 128 KiB push, 18 MiB two-shot
        x = inputs(8 * 4096, torch.bfloat16, 3).view(8, 4096)
        residual = torch.zeros_like(x)
        weight = inputs(4096, torch.bfloat16, 4)
        out_small, out_large = torch.empty_like(small), torch.empty_like(large)

        def step():
            comm.all_reduce(small, out=out_small)
            comm.all_reduce(large, out=out_large)
            comm.all_reduce_add_rmsnorm(x, residual, weight, 1e-6)

        step()  # nothing may be loaded inside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        for replay in range(3):
            for t, seed in ((small, 10), (large, 11), (x, 12), (residual, 13)):
                t.copy_(inputs(t.numel(), t.dtype, seed + 10 * replay).view_as(t))
            x_ref, r_ref = rounded_sum(x), residual.clone()
            fused_add_rmsnorm(x_ref, r_ref, weight, 1e-6)
            p_small, p_large = parts_of(small), parts_of(large)
            g.replay()
            torch.cuda.synchronize()
            p.exact(torch, out_small, p_small, f"graph replay {replay}: push")
            p.exact(torch, out_large, p_large, f"graph replay {replay}: two-shot")
            p.close(torch, x, x_ref, "bfloat16", f"graph replay {replay}: fused x")
            p.close(torch, residual, r_ref, "bfloat16", f"graph replay {replay}: fused residual")
        comm.check()

    record("graph", graph)

    def back_to_back(p):
        """Push launches of different grid sizes, the fused push kernel, one-shot and two-shot, queued
        with nothing between them, three rounds of fresh inputs into NaN-filled outputs, each round with
        an odd number of push launches (so a message's slots alternate between rounds): each push
        launch must read the slots its peers' same launch wrote."""
        sizes = [8, 1 << 17, 4096, 200_000 - 8, 1 << 21, 24, 1 << 18, 1000, 9 << 20]  # 16 B .. 18 MiB of bf16
        g = torch.Generator(device=device).manual_seed(90)
        weight = torch.randn(4096, generator=g, device=device).to(torch.bfloat16)
        for round_ in range(3):
            plain = [inputs(n, torch.bfloat16, 70 + 10 * round_ + i) for i, n in enumerate(sizes)]
            outs = [torch.full_like(x, float("nan")) for x in plain]
            parts = [parts_of(x) for x in plain]
            fused = round_ == 0  # 8 more push launches: 15 in this round, 7 in the others
            xs = [inputs(3 * 4096, torch.bfloat16, 200 + k).view(3, 4096) for k in range(len(sizes) - 1)] if fused else []
            residuals = [torch.randn(3, 4096, generator=g, device=device).to(torch.bfloat16) for _ in xs]
            refs = []
            for x, r in zip(xs, residuals):
                x_ref, r_ref = rounded_sum(x), r.clone()
                fused_add_rmsnorm(x_ref, r_ref, weight, 1e-6)
                refs.append((x_ref, r_ref))
            torch.cuda.synchronize()
            dist.barrier()
            for k, (x, out) in enumerate(zip(plain, outs)):
                comm.all_reduce(x, out=out)
                if k < len(xs):
                    comm.all_reduce_add_rmsnorm(xs[k], residuals[k], weight, 1e-6)
            torch.cuda.synchronize()
            for n, out, ps in zip(sizes, outs, parts):
                p.exact(torch, out, ps, f"back to back, round {round_}, n={n}")
            for k, (x, r, (x_ref, r_ref)) in enumerate(zip(xs, residuals, refs)):
                p.close(torch, r, r_ref, "bfloat16", f"back to back fused residual {k}")
                p.close(torch, x, x_ref, "bfloat16", f"back to back fused x {k}")

    def mixed_alignment(p):
        """Rank r reduces a slice starting r elements into its buffer (16-byte aligned on rank 0 only):
        every rank must still split the message alike."""
        for limits, what in (((MAX_BYTES, comm.push_max_bytes), "push"), ((MAX_BYTES, 0), "one-shot"), ((0, 0), "two-shot")):
            defaults = comm.one_shot_max_bytes, comm.push_max_bytes
            comm.one_shot_max_bytes, comm.push_max_bytes = limits
            try:
                for n in (4096, 1 << 16, 262144 + 8):
                    buf = inputs(n + 8, torch.bfloat16, 300 + n)
                    x = buf[rank % 8: rank % 8 + n]
                    parts = parts_of(x)
                    out = torch.full((n + 8,), float("nan"), device=device, dtype=torch.bfloat16)[1: n + 1]
                    comm.all_reduce(x, out=out)
                    p.exact(torch, out, parts, f"{what}, rank {rank} at offset {rank % 8}, n={n}")
            finally:
                comm.one_shot_max_bytes, comm.push_max_bytes = defaults

    record("mixed_alignment", mixed_alignment)
    record("back_to_back", back_to_back)

    def compile_(p):
        def f(a, x, residual, weight):
            y = comm.all_reduce(a) * 2
            comm.all_reduce(a, out=a)
            comm.all_reduce_add_rmsnorm(x, residual, weight, 1e-6)
            return y

        compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
        a = inputs(4096, torch.bfloat16, 5)
        x = inputs(2 * 1024, torch.bfloat16, 6).view(2, 1024)
        residual, weight = torch.ones_like(x), torch.ones(1024, device=device, dtype=torch.bfloat16)
        a2, x2, r2 = a.clone(), x.clone(), residual.clone()
        y = compiled(a, x, residual, weight)
        y2 = f(a2, x2, r2, weight)
        for got, expected, what in ((y, y2, "y"), (a, a2, "a (out=a)"), (x, x2, "x"), (residual, r2, "residual")):
            p.expect(torch.equal(got, expected), f"compiled {what} differs from eager")

    record("compile", compile_)

    def errors(p):
        x = inputs(4096, torch.bfloat16, 1)
        rows = x.view(4, 1024)
        zeros, ones = torch.zeros_like(rows), torch.ones(1024, device=device, dtype=x.dtype)
        cases = [
            (TypeError, "out must have x's dtype", lambda: comm.all_reduce(x, out=torch.empty(4096, device=device, dtype=torch.float16))),
            (ValueError, "out must have x's shape", lambda: comm.all_reduce(x, out=torch.empty(4095, device=device, dtype=x.dtype))),
            (ValueError, "x must be on cuda:", lambda: comm.all_reduce(x.cpu())),
            (ValueError, "x must be contiguous", lambda: comm.all_reduce(x.view(64, 64).t())),
            (TypeError, "x must be a torch.Tensor", lambda: comm.all_reduce([1.0])),
            (ValueError, "weight", lambda: comm.all_reduce_add_rmsnorm(rows, zeros, torch.ones(1000, device=device, dtype=x.dtype))),
            (TypeError, "residual", lambda: comm.all_reduce_add_rmsnorm(rows, zeros.float(), ones)),
            (ValueError, "x", lambda: comm.all_reduce_add_rmsnorm(x.view(64, 64).t(), zeros.view(64, 64), ones[:64])),
            (ValueError, "eps must not be negative", lambda: comm.all_reduce_add_rmsnorm(rows, zeros, ones, -1.0)),
            (ValueError, "push_max_bytes must be in [0, 524288]", lambda: setattr(comm, "push_max_bytes", (512 << 10) + 16)),
        ]
        push_max = comm.push_max_bytes
        for kind, text, call in cases:
            try:
                call()
                p.append(f"no {kind.__name__} ({text})")
            except kind as e:
                p.expect(text in str(e), f"{kind.__name__} without {text!r}: {e}")
        p.expect(comm.push_max_bytes == push_max, f"a refused push_max_bytes changed it: {comm.push_max_bytes}")
        try:
            AllReduce(max_bytes=MAX_BYTES + 16 * rank)
            p.append("ranks with different max_bytes were not refused")
        except ValueError as e:
            p.expect("disagree" in str(e), str(e))

    record("errors", errors)

    def timeout(p):
        short = AllReduce(max_bytes=1 << 20, timeout_ms=300)
        try:
            x = inputs(4096, torch.bfloat16, 1)
            short.all_reduce(x)  # both ranks: the communicator works
            torch.cuda.synchronize()
            dist.barrier()
            if rank == 0:  # the others never come
                start = time.monotonic()
                short.all_reduce(x)
                torch.cuda.synchronize()
                waited = time.monotonic() - start
                p.expect(0.25 < waited < 5, f"the kernel returned after {waited:.2f} s (timeout 0.3 s)")
                for call in (short.check, lambda: short.all_reduce(x)):
                    try:
                        call()
                        p.append("no TimeoutError after the peer stayed away")
                    except TimeoutError as e:
                        p.expect("waited more than 300 ms for rank " in str(e), str(e))
            else:
                short.check()  # the ranks that stayed away have nothing to report
            dist.barrier()
        finally:
            short.close()

    record("timeout", timeout)
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
